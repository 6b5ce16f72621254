"""The DES/live ranking-agreement check: its tie rule and its verdicts on hand-built runs."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import pytest
from rich.console import Console

from igw.bench.agreement import compare, ranking, separation, welch_significant
from igw.bench.results import PolicyRun, ScenarioRun
from igw.bench.stats import RunSummary, t_critical_975


def _summary(p99: float) -> RunSummary:
    return RunSummary(
        requests=100, errors=0, ttft_p50_s=p99 / 10, ttft_p95_s=p99 * 0.9, ttft_p99_s=p99,
        itl_p50_s=0.01, itl_p99_s=0.02, e2e_p99_s=p99 * 2, output_tok_per_s=1000.0, goodput=1.0,
        prefix_hit_rate=0.0, load_share={},
    )  # fmt: skip


def _run(mode: str, p99_by_policy: Mapping[str, Sequence[float]]) -> ScenarioRun:
    run = ScenarioRun(scenario="s", mode=mode, parameters={})
    for name, values in p99_by_policy.items():
        run.policies[name] = PolicyRun(
            policy=name,
            description=name,
            seeds=list(range(len(values))),
            summaries=[_summary(v) for v in values],
        )
    return run


def test_t_critical_values_round_df_down_and_reject_nonsense() -> None:
    assert t_critical_975(4) == 2.776
    assert t_critical_975(4.9) == 2.776  # rounded down: stricter
    assert t_critical_975(0.5) == 12.706
    # beyond the table: the exact quantiles (t(0.975, 45) = 2.01410, t(0.975, 500) = 1.96472)
    assert t_critical_975(45) == pytest.approx(2.01410, abs=1e-4)
    assert t_critical_975(500) == pytest.approx(1.96472, abs=1e-4)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_critical_975(0)


def test_welch_test_on_known_samples() -> None:
    # means 2 and 5, s² = 1 each, n = 3: t = 3 / sqrt(2/3) = 3.67 > t(0.975, df = 4) = 2.776
    assert welch_significant([1, 2, 3], [4, 5, 6])
    # the same spread, means 0.5 apart: t = 0.61
    assert not welch_significant([1, 2, 3], [1.5, 2.5, 3.5])
    assert welch_significant([1, 1], [2, 2])  # deterministic difference
    assert not welch_significant([1, 1], [1, 1])
    with pytest.raises(ValueError, match="at least two"):
        welch_significant([1], [2, 3])


def test_separation_needs_both_the_tolerance_and_significance() -> None:
    assert separation([1.0, 1.01, 0.99], [2.0, 2.02, 1.98], tolerance=0.1) == -1
    assert separation([2.0, 2.02, 1.98], [1.0, 1.01, 0.99], tolerance=0.1) == 1
    # 20 % apart on average but the seeds overlap widely: a tie
    assert separation([1.0, 2.2, 1.4], [1.8, 1.6, 2.2], tolerance=0.1) == 0
    # significant but within the tolerance: a tie
    assert separation([1.0, 1.0, 1.0], [1.05, 1.05, 1.05], tolerance=0.1) == 0
    # one seed: the tolerance alone decides
    assert separation([1.8], [2.2], tolerance=0.1) == -1


def test_opposite_significant_orders_disagree() -> None:
    des = _run("des", {"a": [1.0, 1.1, 0.9], "b": [3.0, 3.1, 2.9]})
    live = _run("live", {"a": [3.0, 3.2, 2.8], "b": [1.0, 1.1, 0.9]})
    (p99,) = compare(des, live, metrics=["ttft_p99_s"])
    assert not p99.agrees
    assert p99.contradictions == (("a", "b"),)
    assert "DISAGREE on a/b" in p99.describe()


def test_noisy_pair_is_a_tie_not_a_contradiction_but_clear_pairs_still_count() -> None:
    # The measured situation: two peers running the same algorithm swap places between runs.
    des = _run(
        "des", {"gw": [0.5, 0.55, 0.45], "sgl": [1.6, 2.3, 1.8], "vllm": [2.2, 1.7, 2.1], "rr": [4, 4.2, 4.1]}
    )
    live = _run(
        "live",
        {"gw": [0.3, 0.35, 0.7], "sgl": [2.2, 1.9, 2.0], "vllm": [1.8, 2.1, 1.9], "rr": [2.4, 2.5, 2.4]},
    )
    (p99,) = compare(des, live, metrics=["ttft_p99_s"])
    assert p99.agrees
    assert ("sgl", "vllm") in p99.ties
    assert ("gw", "rr") in p99.confirmed
    assert ("gw", "sgl") in p99.confirmed
    assert not p99.single_seed
    assert ranking(des, metric="ttft_p99_s", policies=["rr", "gw"]) == ("gw", "rr")


def test_single_seed_runs_are_flagged() -> None:
    des = _run("des", {"a": [1.0], "b": [2.0]})
    live = _run("live", {"a": [2.0], "b": [1.0]})
    (p99,) = compare(des, live, metrics=["ttft_p99_s"])
    assert not p99.agrees
    assert p99.single_seed
    assert "tolerance only" in p99.describe()


def test_a_pair_one_mode_cannot_separate_is_said_as_such_not_as_ordered_alike() -> None:
    """The newcomer's walk (session s50): one live seed, the DES's two seeds too noisy for Welch's
    test. Both orders read ``gw < rr`` by mean; the line said "AGREE (0 pairs ordered alike, 1 tied in
    a mode)", and on the terminal the one-seed note was gone (rich read ``[...]`` as markup)."""
    des = _run("des", {"gw": [0.05, 0.05], "rr": [0.02, 1.3]})
    live = _run("live", {"gw": [0.05], "rr": [0.6]})
    (p99,) = compare(des, live, metrics=["ttft_p99_s"])
    line = p99.describe()
    assert line == (
        "ttft_p99_s: by mean, DES gw < rr | live gw < rr -> AGREE: no pair in opposite order; of 1 pair, "
        "0 separated in both modes, in the same order; not separated (within 10% or not significant): "
        "1 in DES, 0 live (one seed in a mode: tolerance only, no significance test)"
    )
    printed = io.StringIO()
    Console(file=printed, width=1000).print(line)  # as igw bench --check-agreement prints it
    assert printed.getvalue().strip() == line


def test_policies_missing_or_unavailable_in_one_mode_are_left_out() -> None:
    des = _run("des", {"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [3.0, 3.0]})
    live = _run("live", {"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [3.0, 3.0]})
    live.policies["c"].unavailable = "not installed"
    (p99,) = compare(des, live, metrics=["ttft_p99_s"])
    assert p99.des_order == p99.live_order == ("a", "b")
    assert p99.confirmed == (("a", "b"),)


def test_des_side_of_the_check_keeps_the_live_seeds_and_adds_more() -> None:
    from igw.bench.live_runner import agreement_des_seeds

    assert agreement_des_seeds(live_seeds=[1, 2, 3], count=5) == [1, 2, 3, 4, 5]
    assert agreement_des_seeds(live_seeds=[7, 3], count=4) == [7, 3, 1, 2]
    assert agreement_des_seeds(live_seeds=[1, 2, 3], count=2) == [1, 2, 3]  # never fewer than live


def test_a_failed_percentile_is_worse_than_any_finite_one_and_ties_only_another_failure() -> None:
    """Live routers that lose requests have an infinite p99 (failures are infinite latency): it tied
    with a finite p99 (``inf <= 0.1 * inf``), and two of them over two seeds crashed Welch's test."""
    inf = math.inf
    assert separation([inf, inf, inf], [0.3, 0.4, 0.5], tolerance=0.1) == 1
    assert separation([0.3, 0.4, 0.5], [inf, 2.0, 3.0], tolerance=0.1) == -1  # one failed seed suffices
    assert separation([inf], [0.3], tolerance=0.1) == 1
    assert separation([inf, inf], [inf, 4.0], tolerance=0.1) == 0
    des = _run("des", {"round-robin": [3.8, 3.9], "sglang-router": [1.9, 1.8], "gateway-default": [0.5, 0.6]})
    live = _run(
        "live", {"round-robin": [inf, inf], "sglang-router": [inf, inf], "gateway-default": [0.4, 0.3]}
    )
    [p99] = compare(des, live, metrics=("ttft_p99_s",))
    assert p99.agrees
    assert set(p99.confirmed) == {("gateway-default", "round-robin"), ("gateway-default", "sglang-router")}
    assert p99.ties == (("round-robin", "sglang-router"),)  # both failed live: not comparable there
