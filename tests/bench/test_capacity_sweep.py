"""The offered-rate sweep: below the knee a pod keeps up, past it the completion rate plateaus."""

from __future__ import annotations

import pytest

from igw.bench.capacity import fleet_capacity, pod_capacity, probe_capacity
from igw.bench.capacity_sweep import PodSweep, SweepStep, _sustained_rps, sweep_pod
from igw.bench.scenarios import DEMO

A10G = next(g for g in DEMO.fleet if g.preset == "llama-3.1-8b/a10g")


def test_sustained_rate_counts_completions_inside_the_arrival_window() -> None:
    arrivals = [float(i) for i in range(11)]  # one per second, 0..10
    # every request takes 0.5 s: completions track arrivals
    assert _sustained_rps(arrivals, [a + 0.5 for a in arrivals]) == pytest.approx(1.0, abs=0.15)
    # the server only finishes every other request inside the window: half the rate
    assert _sustained_rps(arrivals, [a + 0.5 for a in arrivals[::2]] + [99.0] * 5) < 0.7


def test_sweep_keeps_up_below_the_knee_and_plateaus_past_it() -> None:
    probe = probe_capacity(DEMO, A10G, seed=1)
    sweep = sweep_pod(DEMO, A10G, probe_rps=probe.requests_per_s, requests_per_step=600, seed=1,
                      fractions=(0.5, 1.3))  # fmt: skip
    low, high = sweep.steps
    assert low.keeps_up
    assert not high.keeps_up
    assert high.ttft_p50_s is not None
    assert low.ttft_p50_s is not None
    assert high.ttft_p50_s > 5 * low.ttft_p50_s  # the queue, not the batch, sets TTFT past the knee
    # the flood overestimates: the plateau lies below the probe (short requests fill its window)
    assert 0.5 < sweep.plateau_vs_probe < 1.0
    assert "plateau" in sweep.describe()


def test_sweep_extends_while_the_pod_keeps_up() -> None:
    probe = probe_capacity(DEMO, A10G, seed=1)
    sweep = sweep_pod(DEMO, A10G, probe_rps=probe.requests_per_s, requests_per_step=300, seed=1,
                      fractions=(0.2,))  # fmt: skip
    assert len(sweep.steps) > 1
    assert not sweep.steps[-1].keeps_up or sweep.steps[-1].offered_fraction >= 4.0


def test_capacity_with_a_sweep_is_its_plateau() -> None:
    cap = pod_capacity(DEMO, A10G, seed=1, sweep=True)
    assert cap.sweep is not None
    assert cap.requests_per_s == cap.sweep.plateau_rps < cap.probe_rps
    fleet = fleet_capacity(DEMO, seed=1, sweep=False)
    assert all(c.sweep is None and c.requests_per_s == c.probe_rps for c in fleet.per_type)
    assert fleet.sweep_lines() == []
    assert "flooded" in fleet.describe()


def test_sweep_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="probe_rps"):
        sweep_pod(DEMO, A10G, probe_rps=0.0, requests_per_step=100, seed=1)


def test_keeps_up_is_a_five_percent_rule() -> None:
    step = SweepStep(
        offered_fraction=1.0, offered_rps=10.0, sustained_rps=9.6, ttft_p50_s=None, ttft_p99_s=None
    )
    assert step.keeps_up
    assert not SweepStep(1.0, 10.0, 9.4, None, None).keeps_up
    assert PodSweep(preset="p", probe_rps=10.0, steps=(step,)).plateau_vs_probe == pytest.approx(0.96)
