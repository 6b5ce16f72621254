"""``igw bench random``: the drawn family covers the stated ranges, deterministically."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from igw.bench.random_family import MAX_COUNT, Verdict, draw, family, verdict_markdown
from igw.bench.scenarios import BurstLoad, LoraShape, SharedPrefixShape, SteadyLoad
from igw.bench.workload import fleet_pods
from igw.sim.presets import get_preset


def test_draws_are_deterministic_and_distinct() -> None:
    assert draw(4, 2) == draw(4, 2)
    assert draw(4, 2) != draw(4, 3)
    assert [s.name for s in family(4, 3)] == ["random-4-00", "random-4-01", "random-4-02"]
    with pytest.raises(ValueError, match="--count must be >= 1"):
        family(1, 0)


def test_selected_draws_are_the_same_scenarios_as_in_the_whole_family() -> None:
    whole = family(1, 20)
    assert family(1, 20, [16, 3, 16]) == [whole[3], whole[16]]
    with pytest.raises(ValueError, match=r"--draws: \[20\] outside the family's draws 0..19"):
        family(1, 20, [20])


def test_the_family_stays_within_its_stated_ranges() -> None:
    scenarios = family(1, 60)
    for s in scenarios:
        assert 4 <= s.pod_count <= 16
        types = [g.preset for g in s.fleet]
        assert 2 <= len(set(types)) == len(types) <= 4, s.name
        assert len({get_preset(t).model.name for t in types}) == 1, s.name
        assert all(g.count >= 1 for g in s.fleet)
        load = s.load
        mean = load.fraction if isinstance(load, SteadyLoad) else load.mean_fraction()
        assert 0.45 <= mean <= 1.15, s.name
        if isinstance(s.workload, LoraShape):
            slots = sorted(p.max_loras for p in fleet_pods(s))
            assert slots[0] in (1, 2)
            assert slots[-1] == 4
    assert {len(s.fleet) for s in scenarios} == {2, 3, 4}
    gpus = {get_preset(g.preset).gpu.name for s in scenarios for g in s.fleet}
    assert gpus == {"h100", "h200", "a100", "a10g"}
    kinds = {type(s.workload).__name__ for s in scenarios} | {type(s.load).__name__ for s in scenarios}
    assert {"LengthMix", "SharedPrefixShape", "LoraShape", "SteadyLoad", "BurstLoad"} <= kinds
    assert any(isinstance(s.workload, SharedPrefixShape) for s in scenarios)
    assert any(isinstance(s.load, BurstLoad) for s in scenarios)


def test_verdicts_count_closeness_and_peer_losses() -> None:
    verdicts = [
        Verdict("a", 0.110, 0.100, "least-request", 0.2),  # +10 %: close, better than the peer
        Verdict("b", 0.300, 0.100, "least-request", 0.25),  # +200 %, worse than the peer
        Verdict("c", math.inf, 0.100, None, None),  # failed requests
    ]
    assert [v.close_to_oracle for v in verdicts] == [True, False, False]
    assert [v.worse_than_best_peer for v in verdicts] == [False, True, False]
    text = verdict_markdown(verdicts, command="igw bench random")
    assert "Within 15 % of the oracle: 1 of 3" in text
    assert "Worse than the best peer: 1 of 3" in text
    assert "| c | failed |" in text


def test_verdicts_are_read_from_run_reports(tmp_path: Path) -> None:
    import orjson

    from igw.bench.random_family import family_verdict
    from igw.cli.main import main

    def doc(name: str, p99: dict[str, float | None]) -> dict[str, object]:
        return {
            "scenario": name,
            "mode": "des",
            "parameters": {},
            "policies": {
                p: {"unavailable": None, "estimates": {"ttft_p99_s": {"mean": v, "lo": v, "hi": v, "n": 1}},
                    "reduction_vs_baseline_pct": {}, "gap_to_oracle_pct": {}}
                for p, v in p99.items()
            },
        }  # fmt: skip

    a = doc("random-1-00", {"gateway-default": 0.11, "oracle": 0.1, "least-request": 0.5})
    b = doc("random-1-01", {"gateway-default": None, "oracle": 0.1, "least-request": 0.5})
    [va, vb] = family_verdict([a, b])
    assert va.close_to_oracle
    assert not va.worse_than_best_peer
    assert vb.gateway_p99_s == math.inf  # a null mean is a failed percentile
    for d in (a, b):
        (tmp_path / f"{d['scenario']}.json").write_bytes(orjson.dumps(d))
    assert main(["bench", "--summarize", str(tmp_path)]) == 0
    assert "Within 15 % of the oracle: 1 of 2" in (tmp_path / "random-family.md").read_text()


def test_a_family_larger_than_the_maximum_is_refused_before_any_draw_is_built() -> None:
    """``--count 1000000`` built every draw before the first ran (25 s and 390 MB in, still building,
    nothing printed); now refused, naming the option, the bound and ``--draws``."""
    assert len(family(1, MAX_COUNT, [MAX_COUNT - 1])) == 1
    with pytest.raises(ValueError, match=r"--count: at most 1,000 draws, got 1,001 .*--draws"):
        family(1, MAX_COUNT + 1)


def test_draws_of_any_number_run_the_bound_is_on_how_many_are_built() -> None:
    """``--count`` was bounded with ``--draws`` too, so ``--count 2000 --draws 1500`` was refused and
    ``--count 1000 --draws 1500`` named 1500 outside 0..999: no draw numbered 1,000 or more could run,
    though the refusal said to run a larger family in parts with ``--draws``."""
    (picked,) = family(1, 2000, [1500])
    assert picked == draw(1, 1500)
    assert picked.name == "random-1-1500"
    assert [s.name for s in family(3, 10**9, [10**8, 7])] == ["random-3-07", "random-3-100000000"]
    with pytest.raises(ValueError, match="--draws: at most 1,000 draws, got 1,001"):
        family(1, 5000, range(1001))
    with pytest.raises(ValueError, match=r"--draws: \[2000\] outside the family's draws 0..1999"):
        family(1, 2000, [2000])
