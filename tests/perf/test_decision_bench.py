"""The decision micro-benchmark of ``igw perf gateway``: it drives the scheduler as the gateway does."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import pytest

from igw.config.model import LabelSelector, SchedulerSpec
from igw.perf.gateway_micro import COMPLETION_LAG_PICKS, _Fleet, _view, decision_time
from igw.scheduling.factory import scheduler_from_spec
from igw.scheduling.plugins.predicted_ttft_scorer import PredictedTtftScorer


def test_fleet_replaces_scraped_views_and_completes_routed_requests() -> None:
    rng = random.Random(1)
    scheduler = scheduler_from_spec(
        SchedulerSpec(name="b", model_selector=LabelSelector(), model_name="m"), rng=random.Random(1)
    )
    keys = [f"10.0.0.{i}:8000" for i in range(100)]
    fleet = _Fleet(views=[_view(k, rng, 0.0) for k in keys], rng=rng, speeds=dict.fromkeys(keys, 0.1))
    before = list(fleet.views)
    fleet.routed = [(str(i), keys[i % 100]) for i in range(COMPLETION_LAG_PICKS + 1)]
    fleet.advance(scheduler, now=0.001)
    replaced = [i for i, (a, b) in enumerate(zip(before, fleet.views, strict=True)) if a is not b]
    assert replaced == [0, 1]  # 100 endpoints x 1 ms / 50 ms: two scrapes land per pick
    assert all(fleet.views[i].scraped_at == 0.001 for i in replaced)
    ttft = next(ws.scorer for ws in scheduler.profile.scorers if isinstance(ws.scorer, PredictedTtftScorer))
    assert ttft.ttft.count(keys[0]) == 1  # the oldest routed request completed


def test_decision_time_reports_cpu_time_per_pick_against_a_random_pick() -> None:
    t = decision_time(endpoints=8, picks=50)
    assert t.name == "scheduler decision, 8 endpoints"
    assert 0 < t.p50_us <= t.p99_us
    assert t.baseline_mean_us > 0
    assert t.ratio > 1  # scoring eight endpoints costs more than indexing a list


def test_decision_time_counts_the_outcome_path_of_the_timed_picks_only() -> None:
    """Work a plugin does in ``on_complete`` is CPU per request too: the timing reports it beside the
    pick, counting the completions among the timed picks, not the warm-up's."""
    assert decision_time(endpoints=8, picks=50).outcome_mean_us == 0.0  # nothing completes within the lag
    t = decision_time(endpoints=8, picks=COMPLETION_LAG_PICKS + 60)
    assert t.outcome_mean_us > 0.0


def test_perf_decide_prints_the_target_ratio_and_where_the_time_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from igw.cli.main import main

    assert main(["perf", "decide", "--endpoints", "16,5", "--picks", "40"]) == 0
    out = capsys.readouterr().out
    assert "scheduler decision, 16 endpoints, 40 picks" in out
    assert re.search(r"target p50 <= 100 µs: ratio \d+\.\d\d, (met|MISSED)", out)
    assert "scheduler decision, 5 endpoints" in out  # no target for this size: reported only
    for component in ("score prefix-cache-scorer", "rank max-score-picker", "dispatch ledger annotate"):
        assert component in out
    shares = [float(m) for m in re.findall(r"(\d+\.\d)%", out)]
    assert len(shares) >= 18  # nine rows per size
    assert all(0.0 <= s <= 100.0 for s in shares)
    assert re.search(r"^load average at start: \d+\.\d\d", out, re.MULTILINE)
    per_request = re.findall(
        r"outcome path \(on_complete, one per request, off the request's path\): mean (\d+) µs; "
        r"scheduler CPU per request \(pick mean \+ outcome mean\) (\d+) µs",
        out,
    )
    assert len(per_request) == 2  # one row per size
    views = re.findall(
        r"pool views per request \(one endpoint changed since the last\): (\d+\.\d) µs; "
        r"baseline: a new view per endpoint (\d+\.\d) µs \(ratio (\d+\.\d\d)\)",
        out,
    )
    assert len(views) == 2  # one row per size
    assert re.search(
        r"^targets \(median p50\): 16 endpoints \d+ µs \(ratio \d+\.\d\d, (met|MISSED)\)$", out, re.M
    )


def test_perf_decide_runs_several_times_and_judges_the_median(capsys: pytest.CaptureFixture[str]) -> None:
    from igw.cli.main import main

    assert main(["perf", "decide", "--endpoints", "1000", "--picks", "20", "--runs", "3"]) == 0
    out = capsys.readouterr().out
    p50s = [int(m) for m in re.findall(r"run \d: p50 (\d+) µs", out)]
    assert len(p50s) == 3
    median = sorted(p50s)[1]
    spread = re.search(r"p50 over 3 runs: median (\d+) µs, spread (\d+)-(\d+) µs", out)
    assert spread is not None
    assert abs(int(spread[1]) - median) <= 1  # printed rounded: the median of the unrounded p50s
    assert (int(spread[2]), int(spread[3])) == (min(p50s), max(p50s))
    ratio = re.search(r"target p50 <= 1000 µs: ratio (\d+\.\d\d)", out)
    assert ratio is not None
    assert abs(float(ratio[1]) - int(spread[1]) / 1000) <= 0.006  # both printed rounded


def test_pool_views_cost_is_timed_against_building_every_view() -> None:
    from igw.perf.decide import pool_views_time

    kept, rebuilt = pool_views_time(endpoints=50, calls=30)
    assert kept > 0
    assert rebuilt > 0


def test_perf_decide_profile_lists_the_picks_busiest_functions(capsys: pytest.CaptureFixture[str]) -> None:
    from igw.cli.main import main

    assert main(["perf", "decide", "--endpoints", "16", "--picks", "40", "--profile", "5"]) == 0
    out = capsys.readouterr().out
    assert "profile of the picks (cProfile on the thread CPU clock, top 5 by own time):" in out
    calls = re.search(r"Python-level calls per pick: (\d+)", out)
    assert calls is not None
    assert int(calls[1]) > 10
    rows = re.findall(r"^\s+(\d+\.\d) µs\s+(\d+\.\d) calls  (.+)$", out, re.MULTILINE)
    assert len(rows) == 5
    own = [float(r[0]) for r in rows]
    assert own == sorted(own, reverse=True)
    assert own[0] > 0
    assert any("scheduling/" in r[2] for r in rows)  # the scheduler's own modules, named by path


def test_prompt_lengths_default_to_the_fixed_workload_and_can_follow_the_azure_trace() -> None:
    """``fixed-300`` is the workload every earlier round measured (the same texts, 300 tokens each);
    ``azure-conv`` draws each prompt's length from the trace's distribution, its text that many
    tokens long (4 characters each) and starting with one of the shared openings."""
    from igw.cli.perf import _prompt_lengths
    from igw.perf.gateway_micro import PROMPT_LENGTHS, _prompts

    assert tuple(_prompt_lengths(",".join(PROMPT_LENGTHS))) == PROMPT_LENGTHS  # the CLI knows them all
    fixed = _prompts(40, "fixed-300", random.Random(2))
    assert fixed[7] == ("You are assistant #7. " * 40 + "user question number 7 " * 8, 300)
    assert {tokens for _, tokens in fixed} == {300}
    mixed = _prompts(400, "azure-conv", random.Random(2))
    lengths = sorted(tokens for _, tokens in mixed)
    assert all(len(text) == tokens * 4 for text, tokens in mixed)
    assert 600 < lengths[200] < 1600  # the trace's median: 1,020 tokens
    assert lengths[-1] > 2000
    assert lengths[0] < 300
    assert sum(text.startswith("You are assistant #3. ") for text, _ in mixed) >= 10
    with pytest.raises(ValueError, match="prompt lengths"):
        _prompts(1, "uniform", random.Random(2))


def test_perf_decide_reports_each_prompt_workload(capsys: pytest.CaptureFixture[str]) -> None:
    from igw.cli.main import main

    assert (
        main(["perf", "decide", "--endpoints", "16", "--picks", "30", "--prompts", "fixed-300,azure-conv"])
        == 0
    )
    out = capsys.readouterr().out
    assert "scheduler decision, 16 endpoints, 30 picks (CPU time per pick)" in out
    assert "scheduler decision, 16 endpoints, 30 picks, azure-conv prompts (CPU time per pick)" in out
    summary = re.search(r"^targets \(median p50\): (.*)$", out, re.M)
    assert summary is not None
    assert re.fullmatch(
        r"16 endpoints \d+ µs \(ratio \d\.\d\d, \w+\); 16 endpoints, azure-conv prompts \d+ µs .*", summary[1]
    )


def test_decision_time_routes_the_drawn_prompts_and_reports_their_lengths_back() -> None:
    """With ``azure-conv`` the picks see each request's drawn length and text, and the completions
    fed back carry the same length (the TTFT fits learn from it); the default stays at 300."""
    from igw.perf.gateway_micro import _prompts
    from igw.scheduling.scheduler import Scheduler
    from igw.scheduling.types import EndpointView, RequestOutcome, RoutingDecision, RoutingRequest

    for workload in ("azure-conv", "fixed-300"):
        picked: dict[str, tuple[str, int]] = {}
        completed: dict[str, int] = {}

        def install(scheduler: Scheduler, picked: dict[str, tuple[str, int]] = picked,
                    completed: dict[str, int] = completed) -> None:  # fmt: skip
            pick, on_complete = scheduler.pick, scheduler.on_complete

            def recording_pick(
                request: RoutingRequest,
                endpoints: Sequence[EndpointView],
                *,
                now: float,
                settle_later: bool = False,
                on_decided: Callable[[RoutingDecision], None] | None = None,
            ) -> RoutingDecision:
                picked[request.request_id] = (request.prefix_text, request.prompt_tokens)
                return pick(request, endpoints, now=now, settle_later=settle_later, on_decided=on_decided)

            def recording_outcome(outcome: RequestOutcome, *, now: float) -> None:
                completed[outcome.request_id] = outcome.prompt_tokens
                on_complete(outcome, now=now)

            scheduler.pick = recording_pick  # type: ignore[method-assign]  # this instance only
            scheduler.on_complete = recording_outcome  # type: ignore[method-assign]

        decision_time(
            endpoints=4, picks=COMPLETION_LAG_PICKS + 40, prompt_lengths=workload, instrument=install
        )
        drawn = _prompts(COMPLETION_LAG_PICKS + 40, workload, random.Random(2))
        assert [picked[str(i)] for i in range(len(drawn))] == drawn
        timed = {k: v for k, v in completed.items() if not k.startswith("warm-")}
        assert len(timed) >= 30
        assert all(tokens == picked[k][1] for k, tokens in timed.items())
        assert all(v == 300 for k, v in completed.items() if k.startswith("warm-"))
