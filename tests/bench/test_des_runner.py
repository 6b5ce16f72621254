"""Small deterministic DES runs: the runner, the capacity probe and the oracle against real engines."""

from __future__ import annotations

from igw.bench.agreement import compare, ranking
from igw.bench.capacity import fleet_capacity
from igw.bench.des_runner import DesOptions, run_des
from igw.bench.scenarios import DEMO


def test_capacity_probe_sees_the_h100_much_faster_than_the_a10g() -> None:
    cap = fleet_capacity(DEMO, seed=1)
    by_type = {c.preset: c.requests_per_s for c in cap.per_type}
    ratio = by_type["llama-3.1-8b/h100"] / by_type["llama-3.1-8b/a10g"]
    assert 5 < ratio < 30  # A10G vs H100: ~5x decode, ~10x prefill (docs/simulator.md, Presets)
    assert cap.requests_per_s == sum(c.requests_per_s * 2 for c in cap.per_type)


def test_des_run_is_reproducible_and_ranks_the_oracle_above_round_robin_on_a_mixed_fleet() -> None:
    options = DesOptions(policies=["round-robin", "least-request", "oracle"], seeds=[1], duration_scale=0.05)
    cap = fleet_capacity(DEMO, seed=1)
    first = run_des(DEMO, options=options, capacity=cap)
    again = run_des(DEMO, options=options, capacity=cap)
    rr, oracle = first.policies["round-robin"], first.policies["oracle"]
    assert rr.summaries == again.policies["round-robin"].summaries
    assert rr.summaries[0].requests == oracle.summaries[0].requests > 250
    assert set(rr.mean_load_share()) == {"h100-0", "h100-1", "a10g-0", "a10g-1"}
    assert all(abs(v - 0.25) < 0.01 for v in rr.mean_load_share().values())
    # The A10Gs cannot keep up with a quarter of the traffic each: round-robin's tail is its queue.
    assert first.reduction_vs_baseline("oracle", "ttft_p99_s") is not None
    assert first.reduction_vs_baseline("oracle", "ttft_p99_s") > 80  # type: ignore[operator]
    assert ranking(first, metric="ttft_p99_s", policies=["round-robin", "oracle"]) == (
        "oracle",
        "round-robin",
    )
    assert len(rr.queue_series) == 4
    assert all(first.policies[p].samples for p in options.policies)
    [a95, a99] = compare(first, again)
    assert a95.agrees
    assert a99.agrees


def test_tune_ranks_candidates_by_their_p99_relative_to_the_oracle() -> None:
    import math

    from igw.bench.tune import tune

    candidates = [{"queue": 2, "kvCache": 2, "prefix": 3, "predictedLatency": 1}, {"prefix": 1}]
    rows, baselines = tune([DEMO], candidates=candidates, duration_scale=0.05)
    assert [r.objective for r in rows] == sorted(r.objective for r in rows)
    assert all(math.isfinite(r.objective) and r.objective > 0 for r in rows)
    # Prefix-only routing is blind to the A10Gs' slowness on a mixed fleet: it must rank last.
    assert rows[-1].weights == {"prefix": 1}
    assert baselines[DEMO.name]["oracle"] < baselines[DEMO.name]["round-robin"]
