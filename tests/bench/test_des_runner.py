"""Small deterministic DES runs: the runner, the capacity probe and the oracle against real engines."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from igw.bench.agreement import compare, ranking
from igw.bench.capacity import fleet_capacity
from igw.bench.des_runner import DesOptions, run_des, run_trace
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


def test_decisions_out_writes_one_line_per_request_naming_the_pod_it_was_sent_to(tmp_path: Path) -> None:
    out = tmp_path / "decisions.jsonl"
    options = DesOptions(
        policies=["round-robin", "gateway-default"], seeds=[1], duration_scale=0.02, decisions_out=out
    )
    run = run_des(DEMO, options=options, capacity=fleet_capacity(DEMO, seed=1))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_policy = {p: [r for r in rows if r["policy"] == p] for p in options.policies}
    for policy, mine in by_policy.items():
        assert len(mine) == run.policies[policy].summaries[0].requests > 0
        assert [r["request_id"] for r in mine] == [f"req-{i}" for i in range(len(mine))]
        shares = Counter(r["pod"] for r in mine if r["status"] == 200)
        assert set(shares) <= {"h100-0", "h100-1", "a10g-0", "a10g-1"}
        assert {r["scenario"] for r in mine} == {DEMO.name}
        assert {r["seed"] for r in mine} == {1}
        served = [r for r in mine if r["status"] == 200]
        assert all(r["ttft_s"] > 0 and r["prompt_tokens"] > 0 for r in served)
        arrivals = [r["arrival_s"] for r in mine]
        assert arrivals == sorted(arrivals)
    # Round-robin sends request i to pod i mod 4, so the file reflects the real assignment.
    rr_pods = [r["pod"] for r in by_policy["round-robin"]]
    assert rr_pods[:8] == rr_pods[:4] * 2
    assert len(set(rr_pods[:4])) == 4


def test_decisions_out_also_covers_trace_replays(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "\n".join(
            json.dumps({"arrival": i * 0.05, "prompt_tokens": 200, "output_tokens": 8, "request_id": f"t{i}"})
            for i in range(40)
        )
        + "\n"
    )
    out = tmp_path / "not-yet" / "decisions.jsonl"  # a missing folder is created
    options = DesOptions(policies=["round-robin", "gateway-default"], seeds=[1], decisions_out=out)
    run_trace(trace, fleet_yaml=None, speedup=1.0, options=options)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["policy"] for r in rows] == ["round-robin"] * 40 + ["gateway-default"] * 40
    assert {r["scenario"] for r in rows} == {"trace-t"}
    assert [r["request_id"] for r in rows[:40]] == [f"t{i}" for i in range(40)]
    assert all(r["status"] == 200 and r["pod"] for r in rows)


def test_capacity_description_names_the_engine_only_where_a_preset_runs_under_two() -> None:
    from igw.bench.capacity import FleetCapacity, PodCapacity

    cap = FleetCapacity(
        per_type=(
            PodCapacity("llama-3.1-8b/h100", "vllm", 86.0, 1.0, 300, 86.0),
            PodCapacity("llama-3.1-8b/h100", "sglang", 62.0, 1.0, 300, 62.0),
            PodCapacity("llama-3.1-8b/a10g", "vllm", 3.5, 1.0, 300, 3.5),
        ),
        requests_per_s=151.5,
    )
    assert cap.describe() == (
        "151.50 req/s (llama-3.1-8b/h100 (vllm) 86.00 req/s, llama-3.1-8b/h100 (sglang) 62.00 req/s, "
        "llama-3.1-8b/a10g 3.50 req/s; one pod of each type flooded)"
    )
