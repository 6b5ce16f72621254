"""The DES depends on its seed only: not on what ran before in the process, not on the other seeds
of the command, not on the hash seed.

Every benchmark table compares policies and rounds on the assumption that a scenario and a seed
give the same requests and the same decisions wherever they run: alone or after other scenarios
(``igw bench A B C``), alone or beside other seeds (``--seeds 2`` against ``--seeds 1,2,3``), in any
process (``PYTHONHASHSEED`` randomises the iteration order of sets of strings such as adapter names).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from igw.bench.capacity import FleetCapacity
from igw.bench.des_runner import DesOptions, run_des, run_trace
from igw.bench.policies.registry import DEFAULT_POLICIES
from igw.bench.random_family import draw
from igw.bench.scenarios import DEMO, SCENARIOS, Scenario
from tests.bench.determinism import LORA_FLEET_YAML, digest, write_trace

REPO = Path(__file__).resolve().parents[2]


def _capacity(rps: float) -> FleetCapacity:
    """A stated capacity (the load level's reference) instead of the sweep: the same for every run."""
    return FleetCapacity(per_type=(), requests_per_s=rps)


def _decisions(scenario: Scenario, out: Path, *, rps: float) -> str:
    options = DesOptions(policies=list(DEFAULT_POLICIES), seeds=[1], duration_scale=0.02, decisions_out=out)
    run_des(scenario, options=options, capacity=_capacity(rps))
    return out.read_text()


def test_a_scenario_decides_the_same_alone_and_after_other_scenarios_in_one_process(tmp_path: Path) -> None:
    lora = SCENARIOS["lora-multi-adapter"]
    alone = _decisions(lora, tmp_path / "alone.jsonl", rps=300.0)
    assert alone.count("\n") > 10 * len(DEFAULT_POLICIES)
    # Scenarios that touch other state first: a mixed fleet (learnt speeds), shared prefixes (the
    # cache-aware peers' trees), a random draw with LoRA slots on a mixed fleet.
    _decisions(SCENARIOS["mixed-fleet-8b"], tmp_path / "m.jsonl", rps=300.0)
    _decisions(SCENARIOS["shared-prefix-8b-high-cache"], tmp_path / "s.jsonl", rps=300.0)
    _decisions(draw(1, 3), tmp_path / "r.jsonl", rps=60.0)
    assert _decisions(lora, tmp_path / "after.jsonl", rps=300.0) == alone


def test_a_trace_decides_the_same_alone_and_after_another_run_in_one_process(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(LORA_FLEET_YAML)

    def run(name: str) -> str:
        out = tmp_path / name
        options = DesOptions(policies=list(DEFAULT_POLICIES), seeds=[1, 2], decisions_out=out)
        run_trace(trace, fleet_yaml=str(fleet), speedup=1.0, options=options)
        return out.read_text()

    first = run("first.jsonl")
    assert {json.loads(line)["policy"] for line in first.splitlines()} == set(DEFAULT_POLICIES)
    assert run("second.jsonl") == first


def _bench_in_new_process(tmp_path: Path, name: str, *, hash_seed: str) -> Path:
    """``igw bench --trace`` (every default policy, two seeds) in a new interpreter."""
    trace = write_trace(tmp_path / "trace.jsonl")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(LORA_FLEET_YAML)
    decisions = tmp_path / f"{name}.jsonl"
    argv = [
        sys.executable, "-m", "igw.cli.main", "bench", "--trace", str(trace), "--fleet", str(fleet),
        "--policies", ",".join(DEFAULT_POLICIES), "--seeds", "1,2", "--allow-failures",
        "--decisions-out", str(decisions), "--out", str(tmp_path / name),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return decisions


def test_two_processes_with_different_hash_seeds_write_identical_decisions_and_reports(
    tmp_path: Path,
) -> None:
    a = _bench_in_new_process(tmp_path, "a", hash_seed="0")
    b = _bench_in_new_process(tmp_path, "b", hash_seed="4242")
    assert a.stat().st_size > 0
    assert digest(a) == digest(b)
    report_a = (tmp_path / "a" / "trace-trace.json").read_text()
    report_b = (tmp_path / "b" / "trace-trace.json").read_text()
    assert report_a.replace(str(tmp_path / "a"), "OUT") == report_b.replace(str(tmp_path / "b"), "OUT")


def _rows_of_seed(text: str, seed: int) -> list[str]:
    return [line for line in text.splitlines() if json.loads(line)["seed"] == seed]


def test_a_seed_gets_the_same_workload_whichever_seeds_run_beside_it(tmp_path: Path) -> None:
    # The load level comes from the capacity measured before the run; measured on the run's first
    # seed, `--seeds 2` and `--seeds 1,2` replayed different request counts as "seed 2".
    def run(name: str, seeds: list[int]) -> str:
        out = tmp_path / name
        options = DesOptions(policies=["round-robin", "gateway-default"], seeds=seeds, duration_scale=0.02,
                             decisions_out=out)  # fmt: skip
        run_des(DEMO, options=options)
        return out.read_text()

    alone = run("alone.jsonl", [2])
    beside = run("beside.jsonl", [1, 2])
    assert len(_rows_of_seed(alone, 2)) > 100
    assert _rows_of_seed(beside, 2) == _rows_of_seed(alone, 2)
    assert _rows_of_seed(beside, 1) != _rows_of_seed(beside, 2)  # the seeds do differ


def test_a_trace_seed_gets_the_same_requests_whichever_seeds_run_beside_it(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.jsonl")  # no prompt texts: the replay writes filler text
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(LORA_FLEET_YAML)

    def run(name: str, seeds: list[int]) -> str:
        out = tmp_path / name
        # sglang-cache-aware matches prompt characters, so it sees whether the filler text changed.
        options = DesOptions(
            policies=["sglang-cache-aware", "gateway-default"], seeds=seeds, decisions_out=out
        )
        run_trace(trace, fleet_yaml=str(fleet), speedup=1.0, options=options)
        return out.read_text()

    alone = run("alone.jsonl", [3])
    beside = run("beside.jsonl", [1, 3])
    assert _rows_of_seed(beside, 3) == _rows_of_seed(alone, 3)
