"""Values kept from one scrape to the next (:class:`igw.scheduling.columns.ScrapeCache`) are never
used once a scrape, a candidate or the candidates' order changed.

Whole schedulers are compared pick by pick with one that keeps nothing between picks, over
generated sequences of picks, scrapes (new metrics objects, equal or not), completions, membership
changes and reorderings; targeted tests pin the case where a scrape lands between two picks, and a
third-party scorer that knows nothing of the cache.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Hashable, Sequence
from dataclasses import replace
from itertools import compress

from hypothesis import given, settings
from hypothesis import strategies as st

from igw.config.model import LabelSelector, SchedulerSpec
from igw.scheduling import columns
from igw.scheduling.columns import Columns, ScrapeCache
from igw.scheduling.factory import scheduler_from_spec
from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.kv_cache_scorer import KvCacheScorer
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.plugins.queue_scorer import QueueScorer
from igw.scheduling.scheduler import Profile, Scheduler, WeightedScorer
from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    EndpointView,
    EngineMetrics,
    RequestOutcome,
    RoutingDecision,
)
from tests.compiled.tree import REFERENCES_SUBCLASS, skip_compiled
from tests.scheduling.helpers import BareHooks, ep, req
from tests.scheduling.reference import ReferenceKvCacheScorer, ReferenceQueueScorer

_REFERENCES = skip_compiled("igw.scheduling.scheduler", REFERENCES_SUBCLASS)


class KeepsNothing(ScrapeCache):
    """A cache that forgets everything on every validation: the from-scratch oracle."""

    def validate(
        self, keys: list[EndpointKey], metrics: Sequence[EngineMetrics | None]
    ) -> dict[Hashable, object]:
        self.values = {}
        return self.values


def _default(seed: int, *, keep: bool) -> Scheduler:
    spec = SchedulerSpec(name="s", model_selector=LabelSelector(), model_name="m")
    scheduler = scheduler_from_spec(spec, rng=random.Random(seed))
    if not keep:
        scheduler._scrape = KeepsNothing()
    return scheduler


def _both_pick(
    schedulers: Sequence[Scheduler], views: list[EndpointView], i: int, now: float
) -> RoutingDecision:
    text = f"system prompt {i % 3} " * 30 + f"question {i}"
    decisions = [s.pick(req(text, model="m", request_id=str(i)), views, now=now) for s in schedulers]
    assert decisions[0] == decisions[1]  # pick, fallbacks, every weighted score, reason
    return decisions[0]


_ROUNDS = st.lists(
    st.tuples(
        # scrapes landing before the pick: (endpoint, new waiting count; KV use follows it), each a
        # new metrics object even with equal values
        st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6)), max_size=3),
        # then one of: nothing else, a completion, two endpoints swapped, an endpoint leaving
        st.sampled_from(["none", "none", "complete", "reorder", "drop"]),
        st.integers(0, 5),
        st.integers(1, 8),
    ),
    min_size=1,
    max_size=40,
)


@_REFERENCES
@settings(max_examples=150, deadline=None)
@given(rounds=_ROUNDS, blocks=st.lists(st.sampled_from([1000, 1000, 2000, 4000]), min_size=6, max_size=6))
def test_default_scheduler_keeping_scrape_values_decides_as_one_keeping_nothing(
    rounds: list[tuple[list[tuple[int, int]], str, int, int]], blocks: list[int]
) -> None:
    schedulers = [_default(3, keep=True), _default(3, keep=False)]
    views = [
        ep(
            f"10.0.0.{i}:8000",
            waiting=i % 3,
            kv=0.1 * i,
            block_size=16,
            num_gpu_blocks=blocks[i],
            scraped_at=10.0,
        )
        for i in range(6)
    ]
    now = 10.0
    for n, (scrapes, change, a, b) in enumerate(rounds):
        now += 0.01
        for i, waiting in scrapes:
            if i < len(views):
                m = views[i].metrics
                assert m is not None
                views[i] = replace(
                    views[i], metrics=replace(m, waiting=waiting, kv_usage=waiting / 8), scraped_at=now
                )
        a %= len(views)
        if change == "complete":
            outcome = RequestOutcome(f"c{n}", views[a].key, ok=True, ttft_s=0.02 * b, prompt_tokens=200)
            for s in schedulers:
                s.on_complete(outcome, now=now)
        elif change == "reorder":
            other = b % len(views)
            views[a], views[other] = views[other], views[a]
        elif change == "drop" and len(views) > 1:
            gone = views.pop(a)
            for s in schedulers:
                s.on_endpoints_removed([gone.key])
        decision = _both_pick(schedulers, views, n, now)
        if decision.endpoint is not None:
            outcome = RequestOutcome(str(n), decision.endpoint, ok=True, ttft_s=0.05 * b, prompt_tokens=300)
            for s in schedulers:
                s.on_complete(outcome, now=now)


@_REFERENCES
def test_a_scrape_landing_between_two_picks_is_scored_from_its_new_values() -> None:
    queue, kv = QueueScorer(), KvCacheScorer()
    scheduler = Scheduler(
        name="s",
        profile=Profile(
            filters=(),
            scorers=(WeightedScorer(queue, 1.0), WeightedScorer(kv, 1.0)),
            picker=MaxScorePicker(max_endpoints=2),
        ),
        rng=random.Random(1),
        compensate_dispatches=False,
    )
    views = [ep("a", waiting=0, kv=0.1), ep("b", waiting=4, kv=0.7)]
    first = scheduler.pick(req("x"), views, now=0.5)
    assert first.endpoint == "a"
    # Same metrics objects, new view objects (in-flight counts moved): the kept scores still hold.
    views = [replace(v, inflight=3) for v in views]
    assert scheduler.pick(req("x"), views, now=0.6).scores == first.scores
    # b's scrape lands: a is now the queued and full one. Kept columns would still pick a.
    views[1] = ep("b", waiting=0, kv=0.1, scraped_at=0.6)
    views[0] = ep("a", waiting=4, kv=0.7, scraped_at=0.6)
    second = scheduler.pick(req("x"), views, now=0.7)
    assert second.endpoint == "b"
    ctx = CycleContext(request=req("x"), now=0.7, rng=random.Random(0))
    expected_queue = ReferenceQueueScorer().score(ctx, views)
    expected_kv = ReferenceKvCacheScorer().score(ctx, views)
    for i, view in enumerate(views):
        assert second.scores[view.key]["queue-scorer"] == expected_queue[i]
        assert second.scores[view.key]["kv-cache-utilization-scorer"] == expected_kv[i]


def test_the_saturation_check_follows_a_scrape_that_frees_capacity() -> None:
    scheduler = _default(1, keep=True)
    full = [ep("a", waiting=50, kv=0.99), ep("b", waiting=50, kv=0.99)]
    assert scheduler.pick(req("x", model="m"), full, now=0.5).kind is DecisionKind.SATURATED
    freed = [full[0], ep("b", waiting=0, kv=0.2, scraped_at=0.5)]
    decision = scheduler.pick(req("x", model="m"), freed, now=0.6)
    assert decision.kind is DecisionKind.PICKED
    assert decision.endpoint == "b"


def test_per_scrape_values_are_recomputed_on_each_kind_of_change() -> None:
    cache = ScrapeCache()
    calls: list[int] = []

    def value(views: list[EndpointView]) -> int:
        cols = Columns(views, cache)

        def compute() -> int:
            calls.append(1)
            return len(calls)

        return cols.per_scrape("owner", compute)

    views = [ep("a", waiting=1), ep("b", waiting=2)]
    assert value(views) == 1
    assert value([replace(v, inflight=5) for v in views]) == 1  # same metrics objects: kept
    metrics_a = views[0].metrics
    assert metrics_a is not None
    assert value([replace(views[0], metrics=replace(metrics_a)), views[1]]) == 2  # a new scrape, equal values
    rescraped = [replace(views[0], metrics=replace(metrics_a)), views[1]]
    assert value(rescraped) == 3
    assert value(rescraped[::-1]) == 4  # another order
    assert value(rescraped[:1]) == 5  # a candidate left
    assert value([rescraped[0], replace(rescraped[1], key="c")]) == 6  # another endpoint, same metrics
    assert value([rescraped[0], replace(rescraped[1], key="c")]) == 6
    assert Columns(views).per_scrape("owner", lambda: 99) == 99  # no cache: this list only


class PlainScorer(BareHooks):
    """A third-party scorer written to the bare protocol: no PluginHooks, no columns, plain lists."""

    type_name = "plain-queue"
    name = "plain-queue"
    signal = "waiting"

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        return [
            None if e.metrics is None or e.metrics.waiting is None else 1.0 / (1 + e.metrics.waiting)
            for e in endpoints
        ]


def test_a_scorer_without_the_hook_sees_every_scrape() -> None:
    scheduler = Scheduler(
        name="s",
        profile=Profile(
            filters=(),
            scorers=(WeightedScorer(PlainScorer(), 1.0), WeightedScorer(QueueScorer(), 1.0)),
            picker=MaxScorePicker(max_endpoints=2),
        ),
        rng=random.Random(1),
    )
    views = [ep("a", waiting=0), ep("b", waiting=3, running=None)]
    assert scheduler.pick(req("x"), views, now=0.5).endpoint == "a"
    views = [ep("a", waiting=3, scraped_at=0.6), ep("b", waiting=None, scraped_at=0.6)]
    decision = scheduler.pick(req("x"), views, now=0.7)
    # b's waiting is missing now: the plain scorer's None is imputed with a's 0.25 (the mean)
    # and reported, and the queue scorer's too; nothing kept from the first pick shows.
    assert decision.scores["a"]["plain-queue"] == 0.25
    assert decision.scores["b"]["plain-queue"] == 0.25
    assert "plain-queue: waiting missing on 1 endpoints" in decision.reason
    assert "queue-scorer: waiting missing on 1 endpoints" in decision.reason


def test_after_a_few_rescrapes_only_their_positions_are_updated() -> None:
    cache = ScrapeCache()
    views = [ep(f"e{i}", waiting=i) for i in range(6)]
    updates: list[tuple[int, list[int]]] = []

    def value(views: list[EndpointView]) -> int:
        cols = Columns(views, cache)

        def update(old: int, changed: list[int]) -> int:
            updates.append((old, changed))
            return old + 1

        return cols.per_scrape("owner", lambda: 0, update)

    assert value(views) == 0
    rescraped = [views[0], ep("e1", waiting=9), *views[2:4], ep("e4", waiting=9), views[5]]
    assert value(rescraped) == 1
    assert updates == [(0, [1, 4])]
    waiting = Columns(rescraped, cache).waiting
    assert waiting is not None
    assert (waiting.values, waiting.lo, waiting.hi) == ([0, 9, 2, 3, 9, 5], 0, 9)
    assert value(rescraped[::-1]) == 0  # another order: computed in full, not updated
    assert len(updates) == 1


def test_rescraped_positions_equal_the_iterator_pass() -> None:
    """``columns._rescraped`` (the compiled build's pass in ``ScrapeCache.validate``) finds the
    positions whose ``metrics`` object changed, by identity, as the ``compress`` pass does."""
    rng = random.Random(11)
    pool = [EngineMetrics(waiting=i) for i in range(6)] + [None]
    for _ in range(2000):
        n = rng.randint(0, 12)
        old = [rng.choice(pool) for _ in range(n)]
        new = [m if rng.random() < 0.6 else rng.choice(pool) for m in old]
        if n and rng.random() < 0.3:  # an equal but new object: a re-scrape with the same values
            i = rng.randrange(n)
            metrics = new[i]
            if metrics is not None:
                new[i] = replace(metrics)
        expected = list(compress(range(n), map(operator.is_not, old, new)))
        assert columns._rescraped(old, new) == expected
