"""The DES model of ``igw serve --workers N``: separate in-flight counts and ledgers, optional sharing."""

from __future__ import annotations

import random
import re

import pytest

from igw.bench.policies.baselines import LeastRequestPolicy
from igw.bench.policies.registry import PolicyContext, build_policy
from igw.bench.policies.workers import WorkerSplitPolicy
from igw.cli.main import main
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from igw.scheduling.types import EndpointView, EngineMetrics, RequestOutcome, RoutingPolicy, RoutingRequest

VIEWS = [
    EndpointView(key=k, metrics=EngineMetrics(waiting=0, running=0, kv_usage=0.1), scraped_at=0.0)
    for k in ("a:1", "b:1")
]


def request(i: int) -> RoutingRequest:
    return RoutingRequest(
        request_id=f"r{i}",
        model="m",
        base_model="m",
        prefix_text="hello " * 100,
        prompt_tokens=10,
        max_tokens=5,
    )


def least_request_split(seed: int, share: str) -> WorkerSplitPolicy:
    def build(index: int) -> RoutingPolicy:
        return LeastRequestPolicy(rng=random.Random(seed * 10 + index))

    return WorkerSplitPolicy(
        build,
        workers=2,
        rng=random.Random(seed),
        assignment="round-robin",
        share=share,
        report_interval_s=0.0,
    )


def test_each_worker_sees_only_its_own_in_flight_requests_without_sharing() -> None:
    same = 0
    for seed in range(20):
        split = least_request_split(seed, "none")
        first = split.pick(request(1), VIEWS, now=1.0).endpoint
        second = split.pick(request(2), VIEWS, now=1.0).endpoint  # worker 1: both look idle to it
        same += first == second
    assert 0 < same < 20


def test_shared_in_flight_counts_steer_the_other_worker_away() -> None:
    for seed in range(20):
        split = least_request_split(seed, "inflight")
        first = split.pick(request(1), VIEWS, now=1.0).endpoint
        second = split.pick(request(2), VIEWS, now=1.0).endpoint
        assert first != second


def test_completions_return_to_the_worker_that_dispatched() -> None:
    split = least_request_split(3, "inflight")
    first = split.pick(request(1), VIEWS, now=1.0).endpoint
    assert first is not None
    split.on_complete(RequestOutcome(request_id="r1", endpoint=first, ok=True), now=1.5)
    split.on_complete(RequestOutcome(request_id="unknown", endpoint=first, ok=True), now=1.5)
    # nothing in flight anywhere now: worker 1 sees two idle endpoints again, even with sharing
    picks = {split.pick(request(i), VIEWS, now=2.0 + i).endpoint for i in range(2, 12, 2)}
    assert picks <= {"a:1", "b:1"}


def test_shared_dispatches_reach_the_other_workers_ledgers() -> None:
    def build(index: int) -> RoutingPolicy:
        return build_policy("gateway-default", PolicyContext(rng=random.Random(index)))

    split = WorkerSplitPolicy(
        build,
        workers=2,
        rng=random.Random(0),
        assignment="round-robin",
        share="dispatches",
        report_interval_s=0.05,
    )
    chosen = split.pick(request(1), VIEWS, now=1.0).endpoint  # worker 0
    assert chosen is not None
    other = split._workers[1]
    ledger = other.ledger  # type: ignore[attr-defined]
    view = next(v for v in VIEWS if v.key == chosen)
    assert ledger.unreflected(view, now=1.01) == 0  # not reported yet
    split.pick(request(2), VIEWS, now=1.06)  # the next report: worker 1 learns worker 0's dispatch
    assert ledger.unreflected(view, now=1.07) >= 1


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="workers: must be at least 1"):
        WorkerSplitPolicy(lambda i: LeastRequestPolicy(rng=random.Random(i)), workers=0, rng=random.Random(0))
    with pytest.raises(ValueError, match="share: one of none, inflight, dispatches"):
        WorkerSplitPolicy(
            lambda i: LeastRequestPolicy(rng=random.Random(i)), workers=2, rng=random.Random(0), share="all"
        )


def test_workers_des_command_prints_every_variant(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["perf", "workers-des", "--scenarios", "mixed-fleet-8b", "--workers", "1,2", "--seeds", "1"]
    assert main([*argv, "--duration-scale", "0.01"]) == 0
    summary = capsys.readouterr().out.split("summary:")[1]
    rows = re.findall(r"^mixed-fleet-8b\s+(\d)\s+(\w+)\s+[\d.]+s\s+([\d.]+)s.*\s([\d.]+)×$", summary, re.M)
    assert [(n, share) for n, share, _p99, _ratio in rows] == [
        ("1", "none"),
        ("2", "none"),
        ("2", "inflight"),
        ("2", "dispatches"),
        ("2", "picks"),
    ]
    assert rows[0][3] == "1.00"


def test_shared_picks_teach_the_other_workers_prefix_index() -> None:
    """``picks`` is what ``igw serve --workers`` does: the plugins' pick notes, through the same
    outbox and learner (igw.scheduling.pick_notes)."""

    def build(index: int) -> RoutingPolicy:
        return build_policy("gateway-default", PolicyContext(rng=random.Random(index)))

    for share, learns in (("dispatches", False), ("picks", True)):
        split = WorkerSplitPolicy(
            build,
            workers=2,
            rng=random.Random(0),
            assignment="round-robin",
            share=share,
            report_interval_s=0.05,
        )
        chosen = split.pick(request(1), VIEWS, now=1.0).endpoint  # worker 0 routes a prompt
        assert chosen is not None
        other = split._workers[1]
        index = next(
            ws.scorer.index
            for ws in other.profile.scorers  # type: ignore[attr-defined]
            if isinstance(ws.scorer, PrefixCacheScorer)
        )
        assert index.size(chosen) == 0
        split.pick(request(2), VIEWS, now=1.06)  # the report after one interval
        assert (index.size(chosen) > 0) is learns


def test_pick_notes_travel_every_note_interval_not_every_report() -> None:
    """The notes' own interval (``igw serve``: a few ms) is shorter than the report interval."""

    def build(index: int) -> RoutingPolicy:
        return build_policy("gateway-default", PolicyContext(rng=random.Random(index)))

    def learned_after(note_interval_s: float) -> bool:
        split = WorkerSplitPolicy(
            build,
            workers=2,
            rng=random.Random(0),
            assignment="round-robin",
            share="picks",
            report_interval_s=0.05,
            note_interval_s=note_interval_s,
        )
        chosen = split.pick(request(1), VIEWS, now=1.0).endpoint
        assert chosen is not None
        split.pick(request(2), VIEWS, now=1.006)  # 6 ms later: within one report interval
        index = next(
            ws.scorer.index
            for ws in split._workers[1].profile.scorers  # type: ignore[attr-defined]
            if isinstance(ws.scorer, PrefixCacheScorer)
        )
        return index.size(chosen) > 0

    assert learned_after(0.005)
    assert not learned_after(0.05)
