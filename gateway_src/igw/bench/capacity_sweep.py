"""The offered-rate sweep that checks the capacity probe: where does a pod stop keeping up?

:mod:`igw.bench.capacity` measures a pod type's saturation throughput by flooding one pod. This module
then offers that pod Poisson traffic of the scenario's workload at fixed fractions of the probed rate
(:data:`SWEEP_FRACTIONS`) and records, per step, the completion rate it sustained and the TTFT it gave.
Below the knee the pod completes what it is offered and TTFT stays flat; above it the completion rate
plateaus and TTFT grows with the queue. The plateau (the highest sustained rate) is the sweep's
capacity; :attr:`PodSweep.plateau_vs_probe` says how far it lies from the probe, so every scenario
states that its load fractions rest on a capacity two independent measurements agree on.

The sweep reports and checks; the load fractions stay relative to the probe, whose one-shot window is
not subject to the finite-window noise a Poisson step has near the knee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from igw.bench.policies.baselines import RoundRobinPolicy
from igw.bench.scenarios import PodGroup, Scenario
from igw.bench.stats import percentile
from igw.bench.workload import fleet_pods, poisson_requests
from igw.sim.des import simulate

SWEEP_FRACTIONS: Final = (0.5, 0.7, 0.85, 1.0, 1.15, 1.3)
"""Offered rates as fractions of the probed saturation rate: the scenarios' steady levels (0.5–0.7),
the approach to the knee, and two steps past it to show the plateau."""


MAX_FRACTION: Final = 4.0
"""The sweep extends past its last fraction while the pod keeps up, up to this multiple of the probe."""


@dataclass(frozen=True, slots=True)
class SweepStep:
    offered_fraction: float
    offered_rps: float
    sustained_rps: float
    """Completions per second between the 30th-percentile arrival and the last arrival (the first 30 %
    of the window is the ramp-up, when the pod has not yet filled its batch)."""
    ttft_p50_s: float | None
    ttft_p99_s: float | None

    @property
    def keeps_up(self) -> bool:
        """The pod completed at least 95 % of what it was offered over the window."""
        return self.sustained_rps >= 0.95 * self.offered_rps


@dataclass(frozen=True, slots=True)
class PodSweep:
    preset: str
    probe_rps: float
    steps: tuple[SweepStep, ...]

    @property
    def plateau_rps(self) -> float:
        return max(s.sustained_rps for s in self.steps)

    @property
    def plateau_vs_probe(self) -> float:
        return self.plateau_rps / self.probe_rps

    def describe(self) -> str:
        cells = ", ".join(
            f"{s.offered_fraction:.0%}→{s.sustained_rps / self.probe_rps:.0%}"
            + (f" (p50 {s.ttft_p50_s * 1000:.0f} ms)" if s.ttft_p50_s is not None else "")
            for s in self.steps
        )
        return (
            f"{self.preset}: offered→sustained, as % of the probe: {cells}; "
            f"plateau {self.plateau_vs_probe:.0%} of the probe"
        )


def _sustained_rps(arrivals: Sequence[float], finishes: Sequence[float]) -> float:
    start = percentile(arrivals, 30)
    assert start is not None
    end = max(arrivals)
    if end <= start:
        return 0.0
    return sum(1 for f in finishes if start <= f <= end) / (end - start)


def sweep_pod(
    scenario: Scenario,
    group: PodGroup,
    *,
    probe_rps: float,
    requests_per_step: int,
    seed: int,
    fractions: Sequence[float] = SWEEP_FRACTIONS,
) -> PodSweep:
    """Offer one pod of ``group`` each fraction of ``probe_rps`` for ``requests_per_step`` requests."""
    if probe_rps <= 0 or requests_per_step < 20:
        raise ValueError("sweep_pod needs probe_rps > 0 and at least 20 requests per step")
    pod = next(p for p in fleet_pods(scenario) if p.preset == group.preset and p.engine.value == group.engine)
    steps: list[SweepStep] = []
    pending = list(fractions)
    while pending:
        fraction = pending.pop(0)
        rate = fraction * probe_rps
        requests = poisson_requests(scenario, rate_rps=rate, count=requests_per_step, seed=seed)
        result = simulate(pods=[pod], requests=requests, policy=RoundRobinPolicy(), seed=seed)
        served = [r for r in result.records if r.ok and r.e2e is not None]
        ttfts = sorted(r.ttft for r in served if r.ttft is not None)
        steps.append(
            SweepStep(
                offered_fraction=fraction,
                offered_rps=rate,
                sustained_rps=_sustained_rps(
                    [r.arrival for r in requests], [r.arrival + r.e2e for r in served if r.e2e is not None]
                ),
                ttft_p50_s=percentile(ttfts, 50),
                ttft_p99_s=percentile(ttfts, 99),
            )
        )
        if not pending and steps[-1].keeps_up and fraction < MAX_FRACTION:
            pending.append(fraction * 1.3)  # the probe was low: keep going until the pod falls behind
    return PodSweep(preset=group.preset, probe_rps=probe_rps, steps=tuple(steps))
