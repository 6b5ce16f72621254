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


def test_a_run_too_long_to_hold_is_refused_before_any_request_is_built() -> None:
    """``igw bench demo-mixed-8b --duration-scale 1e9`` built trillions of requests (prompt text
    included) until the process died of a ``MemoryError`` traceback. Run in a child process capped at
    1.5 GiB of address space, so that without the bound it fails fast instead of taking the machine's
    memory."""
    import resource
    import subprocess
    import sys

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))

    code = (
        "from igw.bench.scenarios import DEMO\n"
        "from igw.bench.workload import scenario_requests\n"
        "try:\n"
        "    scenario_requests(DEMO, capacity_rps=300.0, seed=1, duration_s=DEMO.duration_s * 1e9)\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=cap_memory
    )
    assert done.returncode == 0, done.stderr[-400:]
    assert done.stdout.startswith("demo-mixed-8b: ")
    assert "requests per seed, more than the 1,000,000 a run holds; lower --duration-scale" in done.stdout
