"""The cheaper decision path decides exactly as the straightforward code it replaced.

Oracles: :mod:`tests.scheduling.reference` (the per-endpoint code before the cost work). Whole
decisions are compared on a simulated mixed fleet under load (queues, prefix reuse, settled TTFT
means, dispatches between scrapes), and each fast path is compared on generated inputs that reach
its edge cases (ties, missing signals, negative counts, unsettled and forgotten endpoints).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from typing import cast

import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from igw.config.model import LabelSelector, SchedulerSpec
from igw.scheduling import dispatch_ledger
from igw.scheduling import scheduler as scheduler_module
from igw.scheduling.columns import ScrapeCache
from igw.scheduling.dispatch_ledger import DispatchLedger
from igw.scheduling.factory import scheduler_from_spec
from igw.scheduling.framework import CycleContext, UnitScores
from igw.scheduling.plugins.backlog_ttft_scorer import (
    MIN_FIT_SAMPLES,
    SPEED_SAMPLES,
    STATE_ONE_KIND,
    STATE_PREDICTED,
    Backlog,
    BacklogTtftScorer,
    LinearFit,
    Predictions,
    capacities_updated,
    kv_capacities,
)
from igw.scheduling.plugins.context_length_filter import fitting
from igw.scheduling.plugins.kv_cache_scorer import KvCacheScorer
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.plugins.predicted_ttft_scorer import STATE_SCORES, PredictedTtftScorer, PublishedScores
from igw.scheduling.plugins.prefill_collision_scorer import PrefillCollisionScorer
from igw.scheduling.plugins.prefix_cache_scorer import STATE_ANY_HIT, STATE_MATCH, PrefixCacheScorer
from igw.scheduling.plugins.queue_scorer import QueueScorer
from igw.scheduling.plugins.speed_pools import SpeedPools
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.types import (
    EndpointView,
    EngineMetrics,
    RequestOutcome,
    RoutingRequest,
)
from igw.sim.des import simulate
from igw.sim.spec import PodSpec
from igw.sim.workloads import poisson_arrivals, shared_prefix
from tests.compiled.tree import REFERENCES_SUBCLASS, skip_compiled
from tests.scheduling.helpers import Recording, req, run_loaded_mixed_fleet
from tests.scheduling.reference import (
    ReferenceBacklogTtftScorer,
    ReferenceDispatchLedger,
    ReferenceKvCacheScorer,
    ReferenceMaxScorePicker,
    ReferencePredictedTtftScorer,
    ReferencePrefillCollisionScorer,
    ReferencePrefixCacheScorer,
    ReferenceQueueScorer,
    reference_fitting,
    reference_pool,
    reference_pooled_ttft,
    reference_profile,
)

_REFERENCES = skip_compiled("igw.scheduling.scheduler", REFERENCES_SUBCLASS)


def _default_scheduler(seed: int) -> Scheduler:
    spec = SchedulerSpec(name="s", model_selector=LabelSelector(), model_name="m")
    return scheduler_from_spec(spec, rng=random.Random(seed))


def _reference_scheduler(seed: int) -> Scheduler:
    fast = _default_scheduler(seed)
    scheduler = Scheduler(
        name=fast.name,
        profile=reference_profile(fast.profile),
        settings=fast.settings,
        rng=random.Random(seed),
    )
    scheduler.ledger = ReferenceDispatchLedger(horizon_s=scheduler.settings.stale_threshold_s)
    return scheduler


@_REFERENCES
def test_default_scheduler_decides_exactly_as_the_reference_code_on_a_loaded_mixed_fleet() -> None:
    fast, reference = Recording(_default_scheduler(7)), Recording(_reference_scheduler(7))
    run_loaded_mixed_fleet(fast, seed=3)
    run_loaded_mixed_fleet(reference, seed=3)
    assert len(fast.decisions) == len(reference.decisions) == 480
    assert fast.decisions == reference.decisions  # pick, fallbacks, every weighted score, reason
    picked = {d.endpoint for d in fast.decisions}
    assert len(picked) >= 4, picked  # the load spread over the fleet: the scores did the deciding
    prefix = "prefix-cache-scorer"
    prefix_scores = [d.scores[d.endpoint].get(prefix, 0.0) for d in fast.decisions if d.endpoint]
    assert max(prefix_scores) > 0  # prefix reuse happened
    pooled = fast.scheduler.profile.scorers
    ttft = next(ws.scorer for ws in pooled if isinstance(ws.scorer, PredictedTtftScorer))
    settled = [c for c in ttft.log_ttft.counts.values() if c >= ttft.log_ttft.settled_count]
    assert len(settled) >= 4  # noise pooling had settled endpoints to group


RATE_PER_POD = 200.0
"""Arrivals per second per pod in the one-kind workload: prompts queue on every pod."""


def _run_one_kind(policy: Recording, seed: int, pods: int) -> None:
    # One kind of hardware, long shared-prefix prompts and short answers of varied length (about 2 %
    # of the tokens, under output-affinity-scorer's decode-share gate) arriving faster than the pods
    # prefill them (prompts queue on every pod: its queue gate open): its scores decide picks.
    rng = random.Random(seed)
    requests = [
        dataclasses.replace(r, output_tokens=rng.choice((2, 8, 30, 90)))
        for r in shared_prefix(
            groups=12,
            prompts_per_group=5 * pods,
            system_prompt_len=1800,
            question_len=200,
            output_len=30,
            arrivals=poisson_arrivals(rate=RATE_PER_POD * pods, rng=rng),
            model="m",
            rng=rng,
        )
    ]
    specs = [PodSpec(preset="llama-3.1-8b/h100", name=f"h100-{i}") for i in range(pods)]
    simulate(pods=specs, requests=requests, policy=policy, seed=seed)


@_REFERENCES
@pytest.mark.parametrize("pods", [4, 40])  # one pass and the slots, then the slots alone
def test_default_scheduler_decides_exactly_as_the_reference_code_on_one_kind_of_hardware(pods: int) -> None:
    fast, reference = Recording(_default_scheduler(7)), Recording(_reference_scheduler(7))
    _run_one_kind(fast, seed=5, pods=pods)
    _run_one_kind(reference, seed=5, pods=pods)
    assert len(fast.decisions) == len(reference.decisions) == 60 * pods
    assert fast.decisions == reference.decisions  # pick, fallbacks, every weighted score, reason
    weighted = [d.scores[d.endpoint].get("output-affinity-scorer") for d in fast.decisions if d.endpoint]
    assert sum(1 for w in weighted if w is not None and w < 2.0) >= 50  # it scored, telling pods apart


# --- the TTFT pool against a from-scratch sort, over random sequences of completions ---------------

_KEYS = [f"e{i}" for i in range(8)]
_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("observe"), st.sampled_from(_KEYS), st.sampled_from([0.05, 0.05, 0.08, 0.2, 0.21, 1.0])
        ),
        st.tuples(st.just("forget"), st.sampled_from(_KEYS), st.just(0.0)),
        st.tuples(st.just("pick"), st.permutations(_KEYS), st.integers(min_value=1, max_value=len(_KEYS))),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, noise_z=st.sampled_from([0.0, 0.5, 2.0]))
def test_ttft_pool_matches_a_from_scratch_sort(ops: list[tuple[str, object, object]], noise_z: float) -> None:
    scorer = PredictedTtftScorer(noise_z=noise_z)
    candidates = [EndpointView(key=k, metrics=None, scraped_at=None) for k in _KEYS]
    for op, a, b in ops:
        if op == "observe":
            scorer.on_complete(
                RequestOutcome(request_id="r", endpoint=str(a), ok=True, ttft_s=cast("float", b)), now=0.0
            )
        elif op == "forget":
            scorer.on_endpoints_removed([str(a)])
        else:
            order = list(a)  # type: ignore[call-overload]
            candidates = [EndpointView(key=k, metrics=None, scraped_at=None) for k in order[: int(b)]]  # type: ignore[call-overload]
        assert scorer.pooled_ttft(candidates) == reference_pooled_ttft(scorer, candidates)


def test_ttft_pool_with_a_key_listed_twice_matches_the_reference() -> None:
    scorer = PredictedTtftScorer()
    for i in range(12):
        scorer.on_complete(
            RequestOutcome(request_id=str(i), endpoint="a", ok=True, ttft_s=0.05 + i / 1000), now=0.0
        )
        scorer.on_complete(RequestOutcome(request_id=str(i), endpoint="b", ok=True, ttft_s=0.06), now=0.0)
    views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in ("a", "b", "a")]
    for _ in range(2):
        assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)


# --- scorers, picker and ledger against their references on generated candidate lists -------------

_METRICS = st.one_of(
    st.none(),
    st.builds(
        EngineMetrics,
        waiting=st.one_of(st.none(), st.integers(min_value=-1, max_value=5)),
        kv_usage=st.one_of(st.none(), st.sampled_from([0.0, 0.3, 0.5, 1.0, 1.2])),
    ),
)
_VIEWS = st.lists(
    st.builds(
        EndpointView,
        key=st.sampled_from(_KEYS),
        metrics=_METRICS,
        scraped_at=st.sampled_from([0.0, 0.5]),
        inflight=st.integers(min_value=-1, max_value=4),
        unreflected_dispatches=st.integers(min_value=-1, max_value=3),
    ),
    max_size=8,
    unique_by=lambda v: v.key,
)


@_REFERENCES
@settings(max_examples=200, deadline=None)
@given(views=_VIEWS, samples=st.lists(st.tuples(st.sampled_from(_KEYS), st.floats(0.01, 0.5)), max_size=40))
def test_scorers_match_their_references(views: list[EndpointView], samples: list[tuple[str, float]]) -> None:
    pairs = [
        (ReferenceQueueScorer(), QueueScorer()),
        (ReferenceKvCacheScorer(), KvCacheScorer()),
        (ReferencePredictedTtftScorer(), PredictedTtftScorer()),
        (ReferencePrefillCollisionScorer(), PrefillCollisionScorer()),
    ]
    for reference, fast in pairs:
        for i, (key, ttft) in enumerate(samples):
            outcome = RequestOutcome(request_id=str(i), endpoint=key, ok=True, ttft_s=ttft, prompt_tokens=100)
            reference.on_complete(outcome, now=1.0)
            fast.on_complete(outcome, now=1.0)
        for view in views[:3]:  # recent dispatches for the prefill-collision scorer
            for plugin in (reference, fast):
                plugin.on_picked(CycleContext(request=req(), now=0.9, rng=random.Random(0)), view)
        expected = reference.score(CycleContext(request=req(), now=1.0, rng=random.Random(0)), views)  # type: ignore[attr-defined]
        got = fast.score(CycleContext(request=req(), now=1.0, rng=random.Random(0)), views)  # type: ignore[attr-defined]
        assert list(got) == expected, type(fast).__name__


@_REFERENCES
@settings(max_examples=200, deadline=None)
@given(
    totals=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0, math.nan]), max_size=200),
    k=st.integers(min_value=1, max_value=5),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_max_score_picker_matches_its_reference(totals: list[float], k: int, seed: int) -> None:
    # With one endpoint to return, an all-NaN list has no maximum in either version (the scheduler
    # never ranks NaN totals: it clamps NaN scores first).
    assume((k > 1 and len(totals) > 1) or not any(t != t for t in totals))
    fast_rng, reference_rng = random.Random(seed), random.Random(seed)
    fast = MaxScorePicker(max_endpoints=k).rank(CycleContext(request=req(), now=0.0, rng=fast_rng), totals)
    expected = ReferenceMaxScorePicker(max_endpoints=k).rank(
        CycleContext(request=req(), now=0.0, rng=reference_rng), totals
    )
    assert fast == expected
    assert fast_rng.random() == reference_rng.random()  # the same number of draws


@_REFERENCES
@settings(max_examples=300, deadline=None)
@given(
    totals=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0, math.inf, -math.inf]), max_size=48),
    k=st.integers(min_value=1, max_value=5),
    seed=st.integers(min_value=0, max_value=1000),
)
def test_max_score_picker_matches_its_reference_on_small_pools_with_ties(
    totals: list[float], k: int, seed: int
) -> None:
    """Pools of up to ``8 x k`` candidates, no NaN, many totals tied with the k-th best (the short
    list is cut at the k-th largest total found by sorting the bare floats): the same ranking and
    the same random draws as the reference."""
    fast_rng, reference_rng = random.Random(seed), random.Random(seed)
    fast = MaxScorePicker(max_endpoints=k).rank(CycleContext(request=req(), now=0.0, rng=fast_rng), totals)
    expected = ReferenceMaxScorePicker(max_endpoints=k).rank(
        CycleContext(request=req(), now=0.0, rng=reference_rng), totals
    )
    assert fast == expected
    assert fast_rng.random() == reference_rng.random()


@_REFERENCES
@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["record", "scrape", "ttft"]), st.sampled_from(_KEYS[:3]), st.floats(0.0, 0.2)
        ),
        max_size=60,
    )
)
def test_dispatch_ledger_matches_its_reference(events: list[tuple[str, str, float]]) -> None:
    fast, reference = DispatchLedger(horizon_s=1.0), ReferenceDispatchLedger(horizon_s=1.0)
    scraped = dict.fromkeys(_KEYS[:3], 0.0)
    now = 0.0
    for kind, key, value in events:
        now += value / 4
        if kind == "record":
            for ledger in (fast, reference):
                ledger.record(key, now=now - value / 8)  # sometimes earlier than the last: out of order
        elif kind == "scrape":
            scraped[key] = now - value / 2
        else:
            for ledger in (fast, reference):
                ledger.on_complete(RequestOutcome(request_id="r", endpoint=key, ok=True, ttft_s=value))
        views = [EndpointView(key=k, metrics=None, scraped_at=t) for k, t in scraped.items()]
        assert [v.unreflected_dispatches for v in fast.annotate(views, now=now)] == [
            reference.unreflected(v, now=now) for v in views
        ]


@settings(max_examples=200, deadline=None)
@given(
    limits=st.lists(st.one_of(st.none(), st.sampled_from([100, 399, 400, 8192])), max_size=6),
    max_tokens=st.one_of(st.none(), st.integers(min_value=0, max_value=300)),
)
def test_context_length_fitting_matches_its_reference(
    limits: list[int | None], max_tokens: int | None
) -> None:
    views = [
        EndpointView(key=f"e{i}", metrics=None, scraped_at=None, max_model_len=n)
        for i, n in enumerate(limits)
    ]
    request = RoutingRequest(
        request_id="r", model="m", base_model="m", prefix_text="", prompt_tokens=100, max_tokens=max_tokens
    )
    fast, expected = fitting(request, views), reference_fitting(request, views)
    assert list(fast) == list(expected)
    assert (fast is views) == (expected is views)  # "all fit" still hands back the same list


# --- backlog-ttft-scorer against its reference over random dispatch/outcome/pick sequences ---------

_BACKLOG_KEYS = _KEYS[:6]
_BACKLOG_OPS = st.lists(
    st.one_of(
        # dispatch on an endpoint, then (maybe) its outcome: (op, key, (ttft, prompt tokens))
        st.tuples(
            st.just("serve"),
            st.sampled_from(_BACKLOG_KEYS),
            st.tuples(st.sampled_from([0.02, 0.05, 0.3, 1.5, math.inf, -1.0]), st.integers(1, 3000)),
        ),
        st.tuples(st.just("score"), st.sampled_from([None, "lora-a"]), st.integers(0, 4000)),
        # score with the prefix scorer's match map: (op, shares per endpoint, prompt tokens)
        st.tuples(
            st.just("score-matched"),
            st.dictionaries(st.sampled_from(_KEYS[:6]), st.sampled_from([0.0, 0.5, 0.875, 1.0]), max_size=3),
            st.integers(0, 4000),
        ),
        # a scrape replaces one endpoint's view: (op, position, (KV blocks, waiting, in flight))
        st.tuples(
            st.just("scrape"),
            st.integers(0, 5),
            st.tuples(
                st.sampled_from([None, 0, 27_485, 41_228, 80_000]), st.integers(0, 3), st.integers(0, 2)
            ),
        ),
        # the candidates of the next scores: positions into the views (a key may repeat)
        st.tuples(st.just("candidates"), st.lists(st.integers(0, 5), min_size=1, max_size=7), st.just(0)),
        st.tuples(st.just("forget"), st.sampled_from(_BACKLOG_KEYS), st.just(0)),
        # ten linear outcomes (intercept, seconds per token) with some noise: a regression forms
        st.tuples(
            st.just("teach"),
            st.sampled_from(_BACKLOG_KEYS),
            st.tuples(st.sampled_from([0.01, 0.04]), st.sampled_from([25e-6, 30e-6, 40e-6, 300e-6])),
        ),
    ),
    max_size=60,
)
_CAPACITIES = st.one_of(
    st.lists(st.sampled_from([None, 0, 1000, 27_485, 80_000, 300_000]), min_size=6, max_size=6),
    # KV capacities at and near the one-kind-of-hardware bound (x 1.5): alike or not
    st.lists(st.sampled_from([20_000, 27_485, 30_000, 41_227, 41_228]), min_size=6, max_size=6),
)


@_REFERENCES
@settings(max_examples=200, deadline=None)
@given(ops=_BACKLOG_OPS, capacities=_CAPACITIES, inflight=st.lists(st.integers(0, 2), min_size=6, max_size=6))
def test_backlog_ttft_scorer_matches_its_reference(
    ops: list[tuple[str, object, object]], capacities: list[int | None], inflight: list[int]
) -> None:
    """Scores, on_picked's backlog and the fits, after any mix of dispatches, outcomes (odd ones
    included), adapter requests (which leave the pick's pooled models as they were) and removals."""
    views = [
        EndpointView(
            key=k,
            metrics=EngineMetrics(waiting=i % 3, block_size=None if cap is None else 16, num_gpu_blocks=cap),
            scraped_at=0.0,
            inflight=n,
        )
        for i, (k, cap, n) in enumerate(zip(_BACKLOG_KEYS, capacities, inflight, strict=True))
    ]
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    now = 0.0
    candidates = list(views)
    for step, (op, a, b) in enumerate(ops):
        now += 0.01
        if op == "scrape":
            i = cast("int", a)
            blocks, waiting, n = cast("tuple[int | None, int, int]", b)
            metrics = EngineMetrics(
                waiting=waiting, block_size=None if blocks is None else 16, num_gpu_blocks=blocks
            )
            views[i] = EndpointView(key=views[i].key, metrics=metrics, scraped_at=now, inflight=n)
            candidates = [next(v for v in views if v.key == c.key) for c in candidates]
        elif op == "candidates":
            candidates = [views[i] for i in cast("list[int]", a)]
        elif op == "score-matched":
            request = RoutingRequest(
                request_id=f"s{step}",
                model="m",
                base_model="m",
                prefix_text="",
                prompt_tokens=int(b),  # type: ignore[call-overload]
            )
            scores = []
            for scorer in (fast, reference):
                ctx = CycleContext(request=request, now=now, rng=random.Random(0))
                ctx.state[STATE_MATCH] = dict(cast("dict[str, float]", a))
                scores.append(list(scorer.score(ctx, candidates)))
                scorer.on_picked(ctx, candidates[step % len(candidates)])
            assert scores[0] == scores[1]
        elif op == "serve":
            key = str(a)
            ttft, tokens = cast("tuple[float, int]", b)
            request = RoutingRequest(
                request_id=str(step), model="m", base_model="m", prefix_text="", prompt_tokens=int(tokens)
            )
            outcome = RequestOutcome(
                request_id=str(step), endpoint=key, ok=True, ttft_s=float(ttft), prompt_tokens=int(tokens)
            )
            view = next(v for v in views if v.key == key)
            for scorer in (fast, reference):
                scorer.on_picked(CycleContext(request=request, now=now, rng=random.Random(0)), view)
                scorer.on_complete(outcome, now=now)
        elif op == "forget":
            for scorer in (fast, reference):
                scorer.on_endpoints_removed([str(a)])
        elif op == "teach":
            key = str(a)
            intercept, slope = cast("tuple[float, float]", b)
            view = next(v for v in views if v.key == key)
            for i in range(10):
                now += 100.0  # the backlog has drained: tokens ahead are the prompt's own
                tokens = 100 + 97 * (i % 11)
                ttft = (intercept + slope * tokens) * (1.0 + 0.02 * ((step + i) % 3))
                request = RoutingRequest(
                    request_id=f"t{step}-{i}", model="m", base_model="m", prefix_text="", prompt_tokens=tokens
                )
                outcome = RequestOutcome(
                    request_id=f"t{step}-{i}", endpoint=key, ok=True, ttft_s=ttft, prompt_tokens=tokens
                )
                for scorer in (fast, reference):
                    scorer.on_picked(CycleContext(request=request, now=now, rng=random.Random(0)), view)
                    scorer.on_complete(outcome, now=now)
        else:
            adapter = None if a is None else str(a)
            request = RoutingRequest(
                request_id=f"s{step}", model=adapter or "m", base_model="m", prefix_text="",
                prompt_tokens=int(b), adapter=adapter,  # type: ignore[call-overload]
            )  # fmt: skip
            contexts = [CycleContext(request=request, now=now, rng=random.Random(0)) for _ in range(2)]
            if step % 2:
                # predicted-ttft-scorer's column of the pick, vouched or not: on one kind of
                # hardware the backlog scorer repeats a share of it.
                column = [(0.37 * i + 0.11 * step) % 1.0 for i in range(len(candidates))]
                for ctx in contexts:
                    values = UnitScores(column) if step % 4 == 1 else list[float | None](column)
                    ctx.state[STATE_SCORES] = PublishedScores(candidates, values)
            got = fast.score(contexts[0], candidates)
            expected = reference.score(contexts[1], candidates)
            assert list(got) == expected
            assert fast._cycle_models == reference._cycle_models
            # The predictions published for prefill-admission-scorer: the same floats and flags.
            published = [ctx.state.get(STATE_PREDICTED) for ctx in contexts]
            assert [p is None for p in published] == [False, False] or published == [None, None]
            if published[0] is not None:
                mine, theirs = cast("list[Predictions]", published)
                assert mine.endpoints is candidates
                assert theirs.endpoints is candidates
                assert [list(mine.seconds), list(mine.idle), list(mine.measured)] == [
                    list(theirs.seconds),
                    list(theirs.idle),
                    list(theirs.measured),
                ]
            picked = candidates[step % len(candidates)]
            for scorer in (fast, reference):  # the pick's own pooled models set the drain rate
                scorer.on_picked(CycleContext(request=request, now=now, rng=random.Random(0)), picked)
        assert fast.backlogs == reference.backlogs
        assert fast.fits == reference.fits
        assert fast.dispatched == reference.dispatched
        assert fast.prompt_mean == reference.prompt_mean
        assert fast._pooled() == reference._pooled()
    note(f"pooled models at the end: {len(fast._pooled())}")


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(_KEYS),
            st.one_of(
                st.none(),
                st.tuples(
                    st.sampled_from([0.0, 0.01, 0.04]), st.sampled_from([1.0, 1.5, 2.0, 2.25, 3.0, 1.5001])
                ),
            ),
        ),
        max_size=40,
    ),
    ratio=st.sampled_from([1.0, 1.5, 2.0]),
)
def test_speed_pools_match_a_from_scratch_grouping(
    changes: list[tuple[str, tuple[float, float] | None]], ratio: float
) -> None:
    """Slopes exactly ``ratio`` times a group's first one (1.0 -> 1.5 -> 2.25) stay in that group."""
    pools, models = SpeedPools(pool_ratio=ratio), dict[str, tuple[float, float]]()
    for key, model in changes:
        before = pools.pooled()
        kept = dict(before)
        pools.set(key, model)
        if model is None:
            models.pop(key, None)
        else:
            models[key] = model
        assert pools.pooled() == reference_pool(models, ratio)
        assert before == kept  # a pick's pooled models stay as they were


@_REFERENCES
@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.lists(st.sampled_from(_KEYS), min_size=1, max_size=8),  # candidates (a key may repeat)
            st.sampled_from(["", "system prompt A " * 20, "system prompt A " * 30, "system prompt B " * 25]),
            st.integers(min_value=0, max_value=7),  # which candidate is picked
        ),
        max_size=25,
    )
)
def test_prefix_cache_scorer_matches_its_reference(steps: list[tuple[list[str], str, int]]) -> None:
    """Scores and the published hit flag and match map, as candidate lists change between picks."""
    fast, reference = PrefixCacheScorer(auto_tune=False), ReferencePrefixCacheScorer(auto_tune=False)
    for keys, text, picked in steps:
        views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in keys]
        request = req(text)
        states = []
        for scorer in (fast, reference):
            ctx = CycleContext(request=request, now=0.0, rng=random.Random(0))
            scores = list(scorer.score(ctx, views))
            # No hit publishes no match map or an empty one: readers treat both alike.
            states.append((scores, ctx.state.get(STATE_ANY_HIT), ctx.state.get(STATE_MATCH) or {}))
            scorer.on_picked(ctx, views[picked % len(views)])
        assert states[0] == states[1]


@_REFERENCES
@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("observe"), st.sampled_from(_KEYS), st.sampled_from([0.01, 0.05, 0.2, 1e-9])),
            st.tuples(st.just("forget"), st.sampled_from(_KEYS), st.just(0.0)),
            # candidates for the next picks (a key may repeat), and the request's prompt tokens
            st.tuples(
                st.just("pick"), st.lists(st.sampled_from(_KEYS), min_size=1, max_size=8), st.just(0.0)
            ),
            # "one": the backlog scorer found the candidates one kind of hardware (one rate for all)
            st.tuples(st.just("score"), st.sampled_from(["", "one"]), st.sampled_from([1, 300, 4000])),
        ),
        max_size=60,
    )
)
def test_prefill_collision_scorer_matches_its_reference_over_many_picks(
    ops: list[tuple[str, object, float]],
) -> None:
    """The rates kept between picks (:class:`~igw.scheduling.columns.MeasuredColumn`) follow every
    completion, removal and change of the candidate list as reading every rate on each pick does."""
    fast, reference = PrefillCollisionScorer(), ReferencePrefillCollisionScorer()
    views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in _KEYS[:4]]
    now = 0.0
    for step, (op, a, b) in enumerate(ops):
        now += 0.003
        if op == "observe":
            outcome = RequestOutcome(
                request_id=str(step), endpoint=str(a), ok=True, ttft_s=b, prompt_tokens=300
            )
            for plugin in (fast, reference):
                plugin.on_complete(outcome, now=now)
        elif op == "forget":
            for plugin in (fast, reference):
                plugin.on_endpoints_removed([str(a)])
        elif op == "pick":
            views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in cast("list[str]", a)]
        else:
            request = RoutingRequest(
                request_id=str(step), model="m", base_model="m", prefix_text="", prompt_tokens=int(b)
            )
            scores = []
            for plugin in (fast, reference):
                ctx = CycleContext(request=request, now=now, rng=random.Random(0))
                if a == "one":
                    ctx.state[STATE_ONE_KIND] = views
                scores.append(list(plugin.score(ctx, views)))
                plugin.on_picked(ctx, views[step % len(views)])
            assert scores[0] == scores[1]


_MANY_KEYS = [f"p{i}" for i in range(48)]
"""More than ``ttft_pool.C_LOOP_ABOVE``: walks from the front take the C path, walks near the end the loop."""


@settings(max_examples=150, deadline=None)
@given(
    speeds=st.lists(st.sampled_from([0.05, 0.051, 0.08, 0.2, 0.5]), min_size=48, max_size=48),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["observe", "observe2", "forget", "settle"]),
            st.integers(min_value=0, max_value=47),
            st.sampled_from([0.02, 0.05, 0.08, 0.1, 0.2, 0.6, 3.0]),
        ),
        max_size=40,
    ),
    noise_z=st.sampled_from([0.5, 2.0]),
)
def test_ttft_pool_regroups_incrementally_as_a_from_scratch_walk(
    speeds: list[float], steps: list[tuple[str, int, float]], noise_z: float
) -> None:
    """A settled pool of 48 endpoints in several speed groups; one completion per pick (a move in
    the sorted order), two (the whole walk), a removal (a plain deletion) and an endpoint settling
    again (a plain insertion) must each leave the pooled TTFTs a from-scratch walk gives."""
    scorer = PredictedTtftScorer(noise_z=noise_z)
    rng = random.Random(len(steps))

    def observe(key: str, ttft: float) -> None:
        scorer.on_complete(RequestOutcome(request_id="r", endpoint=key, ok=True, ttft_s=ttft), now=0.0)

    for key, speed in zip(_MANY_KEYS, speeds, strict=True):
        for _ in range(scorer.log_ttft.settled_count + 1):
            observe(key, speed * rng.lognormvariate(0.0, 0.2))
    views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in _MANY_KEYS]
    assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)
    for kind, i, ttft in steps:
        key = _MANY_KEYS[i]
        if kind == "observe":
            observe(key, ttft)
        elif kind == "observe2":
            observe(key, ttft)
            observe(_MANY_KEYS[(i + 7) % 48], ttft * 1.5)
        elif kind == "forget":
            scorer.on_endpoints_removed([key])
        else:
            for _ in range(scorer.log_ttft.settled_count):
                observe(key, ttft)
        assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)


@settings(max_examples=150, deadline=None)
@given(
    speeds=st.lists(st.sampled_from([0.05, 0.051, 0.08, 0.2, 0.5]), min_size=48, max_size=48),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["observe", "catch_up", "pick", "forget", "reorder"]),
            st.integers(min_value=0, max_value=47),
            st.sampled_from([0.02, 0.05, 0.08, 0.1, 0.2, 0.6, 3.0]),
        ),
        max_size=60,
    ),
    noise_z=st.sampled_from([0.5, 2.0]),
)
def test_ttft_pool_caught_up_between_picks_pools_as_a_from_scratch_walk(
    speeds: list[float], steps: list[tuple[str, int, float]], noise_z: float
) -> None:
    """Outcomes taken in by the EWMAs alone (any number between two picks, so a pick may find one,
    several or none to apply), ``TtftPool.catch_up`` applying them early at any point, removals and
    another candidate order: every pick's pooled TTFTs equal a from-scratch walk's."""
    scorer = PredictedTtftScorer(noise_z=noise_z)
    rng = random.Random(len(steps))

    def observe(key: str, ttft: float) -> None:  # what on_complete does, without its catch_up
        scorer.ttft.observe(key, ttft)
        scorer.log_ttft.observe(key, math.log(max(ttft, 1e-6)))

    for key, speed in zip(_MANY_KEYS, speeds, strict=True):
        for _ in range(scorer.log_ttft.settled_count + 1):
            observe(key, speed * rng.lognormvariate(0.0, 0.2))
    keys = list(_MANY_KEYS)
    views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in keys]
    assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)
    for kind, i, ttft in steps:
        if kind == "observe":
            observe(keys[i], ttft)
        elif kind == "catch_up":
            scorer.pool.catch_up()
        elif kind == "forget":
            scorer.on_endpoints_removed([keys[i]])
        elif kind == "reorder":
            keys = keys[i:] + keys[:i]
            views = [EndpointView(key=k, metrics=None, scraped_at=None) for k in keys]
        else:
            assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)
    assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)


def _teach_both(scorers: Sequence[BacklogTtftScorer], key: str, intercept: float, slope: float) -> None:
    """Twenty idle outcomes of ``intercept + slope * tokens`` on ``key`` (a regression forms)."""
    for i in range(20):
        tokens = 100 + 97 * (i % 11)
        request = RoutingRequest(
            request_id=f"{key}-{i}", model="m", base_model="m", prefix_text="", prompt_tokens=tokens
        )
        outcome = RequestOutcome(
            request_id=request.request_id, endpoint=key, ok=True, ttft_s=intercept + slope * tokens,
            prompt_tokens=tokens,
        )  # fmt: skip
        view = EndpointView(key=key, metrics=None, scraped_at=None)
        for scorer in scorers:
            scorer.on_picked(CycleContext(request=request, now=1000.0 * (i + 1), rng=random.Random(0)), view)
            scorer.on_complete(outcome, now=1000.0 * (i + 1) + 1)


def _kv_view(key: str, blocks: int, *, inflight: int = 0) -> EndpointView:
    metrics = EngineMetrics(waiting=0, block_size=16, num_gpu_blocks=blocks)
    return EndpointView(key=key, metrics=metrics, scraped_at=0.0, inflight=inflight)


@_REFERENCES
@settings(max_examples=300, deadline=None)
@given(
    queued=st.sampled_from([0.0, 10.0, 500.0, 5000.0, 1e6]),
    at=st.sampled_from([0.0, 0.5, 2.0]),  # the picks start at 1.0: 2.0 is a backlog "from the future"
    mean_x=st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 300.0, 2000.0])),  # None: no fit
    model=st.one_of(
        st.none(), st.tuples(st.sampled_from([0.0, 0.01, -0.01]), st.sampled_from([0.0, 1e-5, 3e-4, -1e-5]))
    ),
    share=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 0.9999, 1.0])),
    prompt=st.sampled_from([0, 1, 300, 4000]),
    blocks=st.sampled_from([None, 0, 27_485]),
    picks=st.integers(min_value=1, max_value=12),
)
def test_backlog_on_picked_matches_its_reference(
    queued: float,
    at: float,
    mean_x: float | None,
    model: tuple[float, float] | None,
    share: float | None,
    prompt: int,
    blocks: int | None,
    picks: int,
) -> None:
    """The written-out dispatch step (drain up to now, then add the uncached prompt) against the
    helpers: backlogs ahead of and behind now, deep backlogs (beyond the mean tokens ahead), drains
    that are not positive, fits with no mean tokens ahead, the cycle's model or none (the KV prior),
    matched shares that leave less than one token, and the prompt mean's first picks."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    view = EndpointView(
        key="a",
        metrics=EngineMetrics(waiting=0, block_size=None if blocks is None else 16, num_gpu_blocks=blocks),
        scraped_at=0.0,
    )
    for scorer in (fast, reference):
        scorer.backlogs["a"] = Backlog(tokens=queued, at=at, total=queued)
        if mean_x is not None:
            scorer.fits["a"] = LinearFit(mean_x=mean_x, mean_y=0.05, count=3)
        scorer._cycle_models = {} if model is None else {"a": model}
    for i in range(picks):
        request = RoutingRequest(
            request_id=str(i), model="m", base_model="m", prefix_text="", prompt_tokens=prompt + 97 * i
        )
        for scorer in (fast, reference):
            ctx = CycleContext(request=request, now=1.0 + 0.003 * i, rng=random.Random(0))
            if share is not None:
                ctx.state[STATE_MATCH] = {"a": share}
            scorer.on_picked(ctx, view)
        assert fast.backlogs == reference.backlogs
        assert fast.dispatched == reference.dispatched
        assert (fast.prompt_mean, fast._prompts) == (reference.prompt_mean, reference._prompts)


@_REFERENCES
@settings(max_examples=300, deadline=None)
@given(
    queued=st.sampled_from([0.0, 10.0, 500.0, 5000.0, 1e6]),
    at=st.sampled_from([0.0, 0.5, 2.0]),  # the outcomes arrive from 1.0 on: 2.0 is "from the future"
    sent_after=st.sampled_from([0.0, 100.0, 1e7]),  # tokens dispatched after the request (the cap)
    mean_x=st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 300.0, 2000.0])),  # None: no fit before
    model=st.one_of(
        st.none(), st.tuples(st.sampled_from([0.0, 0.01, -0.01]), st.sampled_from([0.0, 1e-5, 3e-4, -1e-5]))
    ),
    ttft=st.sampled_from([0.0, 0.02, 0.5, math.inf, -1.0]),
    outcomes=st.integers(min_value=1, max_value=12),
)
def test_backlog_outcome_matches_its_reference(
    queued: float,
    at: float,
    sent_after: float,
    mean_x: float | None,
    model: tuple[float, float] | None,
    ttft: float,
    outcomes: int,
) -> None:
    """The written-out first-token cap of an outcome (the backlog drained up to now at the cycle's
    model, capped at what was dispatched after the request) against the helpers: backlogs ahead of
    and behind now, deep ones (beyond the mean tokens ahead), drains that are not positive, no
    model at all, and outcomes that teach nothing (infinite or negative TTFT)."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    for scorer in (fast, reference):
        scorer.backlogs["a"] = Backlog(tokens=queued, at=at, total=queued + sent_after)
        if mean_x is not None:
            scorer.fits["a"] = LinearFit(mean_x=mean_x, mean_y=0.05, count=3)
        scorer._cycle_models = {} if model is None else {"a": model}
    for i in range(outcomes):
        outcome = RequestOutcome(
            request_id=str(i), endpoint="a", ok=True, ttft_s=ttft, prompt_tokens=300 + 97 * i
        )
        for scorer in (fast, reference):
            own = float(outcome.prompt_tokens)
            scorer.dispatched[str(i)] = ("a", 40.0 * i, queued + 0.5 * sent_after * i, own, own)
            scorer.pending["a"] = scorer.pending.get("a", 0) + 1
            scorer.pending_tokens["a"] = scorer.pending_tokens.get("a", 0.0) + own
            scorer.on_complete(outcome, now=1.0 + 0.003 * i)
        assert fast.backlogs == reference.backlogs, i
        assert fast.fits == reference.fits, i
        assert fast.pending == reference.pending, i
        assert fast.pending_tokens == reference.pending_tokens, i


@_REFERENCES
def test_backlog_speed_check_is_not_kept_across_a_removal_under_the_same_candidates() -> None:
    """Two alike-KV endpoints measured at different speeds are told apart; once one is removed (its
    fit forgotten, no outcome in between), the same candidate list is one kind of hardware, as the
    reference finds: the kept speed check belongs to the fits it was made from."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    _teach_both((fast, reference), "a", 0.01, 25e-6)
    _teach_both((fast, reference), "b", 0.01, 300e-6)
    views = [_kv_view("a", 27_485), _kv_view("b", 27_485)]
    request = RoutingRequest(request_id="x", model="m", base_model="m", prefix_text="", prompt_tokens=500)

    def both_scores() -> list[list[float | None]]:
        out = []
        for scorer in (fast, reference):
            ctx = CycleContext(request=request, now=1e6, rng=random.Random(0))
            ctx.state[STATE_SCORES] = PublishedScores(views, UnitScores([1.0, 0.5]))
            out.append(list(scorer.score(ctx, views)))
        return out

    mine, theirs = both_scores()
    assert mine == theirs
    assert mine != [1.0, 1.0]  # two speeds: scored per endpoint
    for scorer in (fast, reference):
        scorer.on_endpoints_removed(["b"])
    mine, theirs = both_scores()
    assert mine == theirs
    assert mine == [1.0, 0.875]  # one kind now: a quarter of predicted-ttft-scorer's column


@_REFERENCES
def test_backlog_speed_check_follows_an_endpoint_reaching_its_speed_samples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fits whose regression stays the same from one outcome to the next (so the pooled models do
    too): the speed check must still notice the outcome that gives an endpoint ``SPEED_SAMPLES``
    samples (its slope then counts), as the reference does."""

    def steady(fit: LinearFit, *, min_samples: int, min_spread: float = 0.0) -> tuple[float, float] | None:
        if fit.count < min_samples:
            return None
        return (0.01, 25e-6) if fit.mean_y < 0.05 else (0.01, 300e-6)

    monkeypatch.setattr(LinearFit, "regression", steady)
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    views = [_kv_view("a", 27_485), _kv_view("b", 27_485)]
    models = {"a": (0.01, 25e-6), "b": (0.01, 300e-6)}
    request = RoutingRequest(request_id="x", model="m", base_model="m", prefix_text="", prompt_tokens=500)
    one_kind = []
    for i in range(SPEED_SAMPLES + 1):
        for key, (intercept, slope) in models.items():
            tokens = 100 + 97 * (i % 11)
            dispatch = RoutingRequest(
                request_id=f"{key}-{i}", model="m", base_model="m", prefix_text="", prompt_tokens=tokens
            )
            outcome = RequestOutcome(
                request_id=dispatch.request_id, endpoint=key, ok=True, ttft_s=intercept + slope * tokens,
                prompt_tokens=tokens,
            )  # fmt: skip
            view = next(v for v in views if v.key == key)
            for scorer in (fast, reference):
                at = 1000.0 * (i + 1)
                scorer.on_picked(CycleContext(request=dispatch, now=at, rng=random.Random(0)), view)
                scorer.on_complete(outcome, now=at + 1)
        scores = []
        for scorer in (fast, reference):
            ctx = CycleContext(request=request, now=1000.0 * (i + 1) + 2, rng=random.Random(0))
            ctx.state[STATE_SCORES] = PublishedScores(views, UnitScores([1.0, 0.5]))
            scores.append(list(scorer.score(ctx, views)))
        assert scores[0] == scores[1], i
        one_kind.append(scores[0] == [1.0, 0.875])
    # One kind until both have SPEED_SAMPLES samples (i = 15), two speeds from then on.
    assert one_kind == [True] * (SPEED_SAMPLES - 1) + [False, False]


@_REFERENCES
def test_backlog_published_measured_flags_follow_fits_reaching_their_samples_and_removals() -> None:
    """The published ``measured`` flags are kept between picks (per candidate keys and fits
    version): each pick must still publish what the reference does as an endpoint's fit reaches
    ``MIN_FIT_SAMPLES`` samples, after a removal and its return, and for another candidate order."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    _teach_both([fast, reference], "a", 0.010, 25e-6)  # "a" measured from the start
    views = [_kv_view("a", 27_485), _kv_view("b", 80_000), _kv_view("c", 80_000)]
    request = RoutingRequest(request_id="x", model="m", base_model="m", prefix_text="", prompt_tokens=800)
    flags = []
    for i in range(MIN_FIT_SAMPLES + 2):
        tokens = 100 + 97 * (i % 11)
        dispatch = RoutingRequest(
            request_id=f"b-{i}", model="m", base_model="m", prefix_text="", prompt_tokens=tokens
        )
        outcome = RequestOutcome(
            request_id=dispatch.request_id, endpoint="b", ok=True, ttft_s=0.02 + 50e-6 * tokens,
            prompt_tokens=tokens,
        )  # fmt: skip
        at = 1e5 * (i + 1)
        for scorer in (fast, reference):
            scorer.on_picked(CycleContext(request=dispatch, now=at, rng=random.Random(0)), views[1])
            scorer.on_complete(outcome, now=at + 1)
        if i == MIN_FIT_SAMPLES:
            for scorer in (fast, reference):
                scorer.on_endpoints_removed(["b"])
        candidates = views if i <= MIN_FIT_SAMPLES else [views[2], views[0], views[1]]
        published = []
        for scorer in (fast, reference):
            ctx = CycleContext(request=request, now=at + 2, rng=random.Random(0))
            scorer.score(ctx, candidates)
            found = ctx.state[STATE_PREDICTED]
            assert isinstance(found, Predictions)
            published.append((list(found.seconds), list(found.idle), list(found.measured)))
        assert published[0] == published[1], i
        flags.append(published[0][2][candidates.index(views[1])])
    # "b" counts as measured from its MIN_FIT_SAMPLES-th sample until its removal, and not after.
    assert flags == [False] * (MIN_FIT_SAMPLES - 1) + [True, False, False]


@_REFERENCES
def test_backlog_stand_ins_follow_a_newcomers_kv_capacity_and_a_key_listed_twice() -> None:
    """An unmeasured endpoint takes the model of the measured one with alike KV capacity: when a
    scrape changes its capacity (keys and measured endpoints unchanged), the kept stand-in must go;
    a key listed twice with different capacities gives each position the key's last model."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    _teach_both([fast, reference], "h100", 0.010, 25e-6)
    _teach_both([fast, reference], "a10g", 0.040, 300e-6)
    request = RoutingRequest(request_id="x", model="m", base_model="m", prefix_text="", prompt_tokens=800)
    lists = [
        [_kv_view("h100", 80_000), _kv_view("a10g", 27_485), _kv_view("new", 80_000)],
        [_kv_view("h100", 80_000), _kv_view("a10g", 27_485), _kv_view("new", 27_485)],
        [_kv_view("h100", 80_000), _kv_view("a10g", 27_485), _kv_view("new", 5_000, inflight=1)],
        [
            _kv_view("h100", 80_000),
            _kv_view("new", 80_000),
            _kv_view("a10g", 27_485),
            _kv_view("new", 27_485),
        ],
        [
            _kv_view("h100", 80_000),
            _kv_view("new", 27_485),
            _kv_view("a10g", 27_485),
            _kv_view("new", 80_000),
        ],
    ]
    results = []
    for views in lists:
        got = fast.score(CycleContext(request=request, now=1e6, rng=random.Random(0)), views)
        expected = reference.score(CycleContext(request=request, now=1e6, rng=random.Random(0)), views)
        assert list(got) == expected
        assert fast._cycle_models == reference._cycle_models
        results.append(expected)
    assert results[0][2] != results[1][2]  # the newcomer's stand-in changed with its capacity
    assert results[3] != results[4]  # each position of the twice-listed key takes its last model


@_REFERENCES
@pytest.mark.parametrize(
    "blocks",
    [
        [20_000, 30_000],  # exactly pool_ratio (1.5) apart: alike
        [20_000, 30_001],
        [27_485, 27_485, 41_227],
        [27_485, 41_228],
        [27_485, 0],  # zero blocks: unknown
        [27_485, None],
        [None],
        [0],
        [],
        [2**49, 2**49 + 1],  # capacities past 2**53 as ints: compared as the floats the reference uses
    ],
)
def test_one_kind_of_hardware_check_matches_its_reference(blocks: list[int | None]) -> None:
    views = [
        EndpointView(key=f"e{i}", metrics=EngineMetrics(block_size=16, num_gpu_blocks=b), scraped_at=0.0)
        for i, b in enumerate(blocks)
    ]
    assert BacklogTtftScorer().one_speed(views) is ReferenceBacklogTtftScorer().one_speed(views)


_BLOCKS = st.sampled_from([27_485, 41_228, 20_000, 0, None, 2**49])
"""KV blocks of a scrape: alike and unlike capacities, a zero and a missing number (unknown), and
one past 2**53 tokens (compared as floats)."""


@_REFERENCES
@settings(max_examples=200, deadline=None)
@given(
    first=st.lists(_BLOCKS, min_size=1, max_size=5),
    scrapes=st.lists(
        st.lists(st.tuples(st.integers(min_value=0, max_value=4), _BLOCKS), max_size=3),
        min_size=1,
        max_size=8,
    ),
)
def test_backlog_capacities_kept_between_scrapes_match_the_reference(
    first: list[int | None], scrapes: list[list[tuple[int, int | None]]]
) -> None:
    """Through the scheduler's scrape cache, the KV capacities and the alike-capacities check are
    updated only at the re-scraped positions (:func:`capacities_updated`): each pick scores as the
    reference, which reads every view on every pick, whether a scrape changed a capacity, left it,
    made it unknown or known again."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    _teach_both([fast, reference], "e0", 0.010, 25e-6)
    _teach_both([fast, reference], "e1", 0.040, 300e-6)
    cache = ScrapeCache()
    request = RoutingRequest(request_id="x", model="m", base_model="m", prefix_text="", prompt_tokens=800)
    views = [_kv_view(f"e{i}", b) for i, b in enumerate(first)]  # type: ignore[arg-type]  # None: unknown
    for step, changes in enumerate([[], *scrapes]):
        for position, blocks in changes:
            if position < len(views):
                views[position] = _kv_view(f"e{position}", blocks)  # type: ignore[arg-type]
        views = list(views)
        ctx = CycleContext(request=request, now=1e6 + step, rng=random.Random(0), scrape=cache)
        got = fast.score(ctx, views)
        theirs = CycleContext(request=request, now=1e6 + step, rng=random.Random(0))
        expected = reference.score(theirs, views)
        assert list(got) == expected, step
        assert (STATE_ONE_KIND in ctx.state) is (STATE_ONE_KIND in theirs.state), step
        assert ctx.columns(views).per_scrape((fast, "capacities"), lambda: None) == kv_capacities(views)


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ([27_485, 41_228], [27_485, 41_228], [0, 1]),  # re-scraped, the same capacities: the list kept
        ([27_485, 41_228], [27_485, 20_000], [1]),
        ([27_485, None], [27_485, 41_228], [1]),
        ([27_485, 41_228], [0, 41_228], [0]),
        ([None, None], [None, None], [0, 1]),
    ],
)
def test_capacities_updated_is_kv_capacities(
    before: list[int | None], after: list[int | None], changed: list[int]
) -> None:
    old = kv_capacities([_kv_view(f"e{i}", b) for i, b in enumerate(before)])  # type: ignore[arg-type]
    views = [_kv_view(f"e{i}", b) for i, b in enumerate(after)]  # type: ignore[arg-type]
    new = capacities_updated(old, changed, [v.metrics for v in views])
    assert new == kv_capacities(views)
    assert (new is old) is (before == after)  # a copy only when a capacity changed; ``old`` untouched
    assert old == kv_capacities([_kv_view(f"e{i}", b) for i, b in enumerate(before)])  # type: ignore[arg-type]


@_REFERENCES
@settings(max_examples=100, deadline=None)
@given(view=_VIEWS.filter(bool).map(lambda views: views[0]), n=st.integers(min_value=0, max_value=5))
def test_annotated_views_are_exact_copies_with_the_count(view: EndpointView, n: int) -> None:
    copy = dispatch_ledger._with_unreflected(view, n)
    assert type(copy) is EndpointView
    assert copy == dataclasses.replace(view, unreflected_dispatches=n)
    assert dispatch_ledger.FAST_COPY  # EndpointView's fields changed: update dispatch_ledger._VIEW_FIELDS
    assert dispatch_ledger.FIELDS_AS_LISTED
    replaced = dispatch_ledger._replace_unreflected(view, n)
    assert replaced == copy
    # The compiled build's copy (a native EndpointView has no slot descriptors): the same record.
    constructed = dispatch_ledger._constructed_unreflected(view, n)
    assert type(constructed) is EndpointView
    assert constructed == copy


def _learned(scorers: Sequence[BacklogTtftScorer], key: str, fit: LinearFit) -> None:
    """``key``'s fit is now ``fit``, kept as ``_learn`` keeps it (the pools, the versions)."""
    for scorer in scorers:
        if key not in scorer.fits:  # a new member (a fit gaining or losing its regression is not)
            scorer._members_version += 1
        scorer.fits[key] = dataclasses.replace(fit)
        scorer._fits_version += 1
        scorer.pools.set(key, fit.regression(min_samples=MIN_FIT_SAMPLES, min_spread=scorer.slope_spread))


def _regressed(intercept: float, slope: float) -> LinearFit:
    """A fit whose regression is ``(intercept, slope)`` (spread wide enough, 20 samples)."""
    return LinearFit(
        mean_x=500.0, mean_y=intercept + slope * 500.0, var_x=200.0**2, cov_xy=slope * 200.0**2, count=20
    )


@_REFERENCES
def test_backlog_kv_twins_follow_the_regressed_set_and_clamp_the_intercept() -> None:
    """An endpoint with samples but no regression takes the slope of its closest-capacity regressed
    candidate (the first one among equally close): when another candidate gains a regression the
    kept twin must go (e1 is closer in order than e2), and an anchored intercept below 0 is 0."""
    fast, reference = BacklogTtftScorer(), ReferenceBacklogTtftScorer()
    both = [fast, reference]
    unregressed = LinearFit(mean_x=50.0, mean_y=0.03, count=5)
    _learned(both, "e0", unregressed)
    _learned(both, "e1", unregressed)
    _learned(both, "e2", _regressed(0.01, 1e-4))
    _learned(both, "e3", _regressed(0.01, 9e-4))  # further in capacity: never the twin
    views = [_kv_view("e0", 27_485), _kv_view("e1", 27_485), _kv_view("e2", 27_485), _kv_view("e3", 40_000)]
    steps = [
        ("e2 is the only alike regressed candidate", None),
        ("e1 gains a regression of its own", ("e1", _regressed(0.01, 4e-4))),
        ("e0's anchored intercept falls below 0", ("e0", LinearFit(mean_x=1000.0, mean_y=0.01, count=5))),
    ]
    models = []
    for why, change in steps:
        if change is not None:
            _learned(both, *change)
        got = fast.predicted(views, tokens=800, now=1.0)
        expected = reference.predicted(views, tokens=800, now=1.0)
        assert [repr(p) for p in got] == [repr(p) for p in expected], why
        assert fast._cycle_models == reference._cycle_models, why
        models.append(fast._cycle_models["e0"])
    assert models[0][1] == 1e-4  # the twin moved from e2 ...
    assert models[1][1] == 4e-4  # ... to e1
    assert models[2][0] == 0.0  # 0.01 - 4e-4 x 1000 < 0: clamped


def test_the_native_sum_and_rows_decide_as_the_generated_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled build's direct native sum and rows (``NATIVE_SUM``), run here as Python, give
    the decisions of the generated kernels: every pick, fallback and weighted score, both with
    every scorer scoring and with one left out (``prefill-admission-scorer`` abstaining)."""
    runs: dict[bool, Recording] = {}
    for native in (False, True):
        monkeypatch.setattr(scheduler_module, "NATIVE_SUM", native)
        scheduler_module._sum_kernel.cache_clear()  # kernels are kept per weights: made anew per setting
        runs[native] = Recording(_default_scheduler(7))
        run_loaded_mixed_fleet(runs[native], seed=3)
    scheduler_module._sum_kernel.cache_clear()
    assert len(runs[True].decisions) == 480
    assert runs[True].decisions == runs[False].decisions
    assert runs[True].scheduler._left_out_columns  # the left-out path ran natively
    admission = "prefill-admission-scorer"
    every = [d for d in runs[True].decisions if d.endpoint and admission in d.scores[d.endpoint]]
    assert every  # and the path with every scorer scoring
