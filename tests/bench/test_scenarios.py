from __future__ import annotations

from collections import Counter

import pytest

from igw.bench.scenarios import DEMO, GROUPS, SCENARIOS, BurstLoad, resolve
from igw.bench.workload import fleet_pods, flood_requests, scenario_requests


def test_every_scenario_states_fleet_workload_load_and_seeds() -> None:
    for s in SCENARIOS.values():
        d = s.describe()
        assert d["fleet"]
        assert d["workload"]
        assert "capacity" in d["load"]
        assert d["seeds"]
        assert fleet_pods(s)
    assert DEMO.name not in GROUPS["all"]


def test_resolve_expands_groups_and_rejects_unknown_names() -> None:
    names = [
        s.name for s in resolve(["shared-prefix-8b", "shared-prefix-8b-low-cache", "homogeneous-steady"])
    ]
    assert names == ["shared-prefix-8b-high-cache", "shared-prefix-8b-low-cache", "homogeneous-steady"]
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        resolve(["nope"])


def test_mixed_fleet_pods_are_named_and_labelled_by_gpu() -> None:
    pods = fleet_pods(SCENARIOS["mixed-fleet-8b"])
    assert [p.name for p in pods] == [f"h100-{i}" for i in range(4)] + [f"a10g-{i}" for i in range(4)]
    assert Counter(p.labels["gpu"] for p in pods) == {"h100": 4, "a10g": 4}


def test_request_count_follows_load_fraction_capacity_and_duration() -> None:
    s = SCENARIOS["homogeneous-steady"]
    reqs = scenario_requests(s, capacity_rps=100.0, seed=1, duration_s=10.0)
    assert len(reqs) == 700  # 70 % of 100 req/s for 10 s
    assert reqs == scenario_requests(s, capacity_rps=100.0, seed=1, duration_s=10.0)
    assert reqs != scenario_requests(s, capacity_rps=100.0, seed=2, duration_s=10.0)
    span = reqs[-1].arrival - reqs[0].arrival
    assert 8.5 < span < 11.5


def test_burst_mean_fraction_and_lora_and_prefix_shapes() -> None:
    burst = SCENARIOS["burst-70b"].load
    assert isinstance(burst, BurstLoad)
    assert burst.mean_fraction() == pytest.approx(0.4 * 2 / 3 + 1.5 / 3)
    lora = scenario_requests(SCENARIOS["lora-multi-adapter"], capacity_rps=50, seed=1, duration_s=4)
    assert all(r.adapter is not None and r.model == r.adapter for r in lora)
    top = Counter(r.adapter for r in lora).most_common(1)[0][0]
    assert top == "adapter-0"  # Zipf: the first adapter is the most popular
    sp = flood_requests(SCENARIOS["shared-prefix-8b-high-cache"], count=50, seed=1)
    assert all(r.arrival == 0.0 and r.prompt_tokens == 2048 + 256 for r in sp)
    demo = scenario_requests(DEMO, capacity_rps=100, seed=1, duration_s=3)
    assert max(r.output_tokens for r in demo) <= 48
    assert max(r.prompt_tokens for r in demo) <= 1024
