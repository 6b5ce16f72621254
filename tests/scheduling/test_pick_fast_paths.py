"""The pick's written-out fast paths decide as the general code does.

The weighted sum of a pick where every scorer scored uses the profile's own kernel, made once; a
pick where a scorer was left out (no candidate publishes its signal) or the all-stale fallback uses
the general sum. Scorers written to the bare protocol (a third party's) return plain lists, which
go through the checks (clamp, imputation) before either. The prefill-collision scorer's pending
work is computed inline for each candidate with dispatches; the reference computes it through the
per-endpoint helper.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores, clamp01
from igw.scheduling.plugins.inflight_scorer import InflightScorer
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.plugins.prefill_collision_scorer import PrefillCollisionScorer
from igw.scheduling.scheduler import Profile, Scheduler, WeightedScorer
from igw.scheduling.types import EndpointView, EngineMetrics, RequestOutcome, RoutingRequest
from tests.compiled.tree import REFERENCES_SUBCLASS, skip_compiled
from tests.scheduling.helpers import BareHooks, ep, req
from tests.scheduling.reference import ReferencePrefillCollisionScorer

_VALUE = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 0.5, 1.0, -0.5, 1.5, 0.1]))


class ListedScorer(BareHooks):
    """A third party's scorer: the bare protocol (no PluginHooks), a plain list or vouched scores."""

    type_name = "listed"

    def __init__(self, name: str, signal: str, values: list[float | None], vouched: bool) -> None:
        self.name, self.signal, self.values, self.vouched = name, signal, values, vouched

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        assert len(endpoints) == len(self.values)
        return UnitScores(self.values) if self.vouched else list(self.values)


def _expected_totals(columns: list[tuple[float, list[float | None]]], n: int) -> list[float]:
    """The framework's rule, one column at a time: clamp, impute missing values with the mean of the
    present ones, leave out a column nobody scored, add ``v * w`` in column order from 0.0."""
    totals = [0.0] * n
    for weight, raw in columns:
        present = [clamp01(v) for v in raw if v is not None]
        if not present:
            continue
        mean = sum(present) / len(present)
        values = [mean if v is None else clamp01(v) for v in raw]
        totals = [t + v * weight for t, v in zip(totals, values, strict=True)]
    return totals


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=6),
    data=st.data(),
    weights=st.lists(st.sampled_from([1.0, 2.0, 0.5, 3.0]), min_size=1, max_size=4),
)
def test_totals_are_the_column_by_column_sum_whichever_kernel_adds_them(
    n: int, data: st.DataObject, weights: list[float]
) -> None:
    """Every scorer scoring (the profile's kernel) or one left out (the general sum): the same totals
    as adding the checked columns one at a time; vouched lists skip the checks, plain ones do not."""
    columns: list[tuple[float, list[float | None]]] = []
    scorers: list[WeightedScorer] = []
    for i, weight in enumerate(weights):
        vouched = data.draw(st.booleans())
        if vouched:  # a vouched list holds no None and nothing outside [0, 1]
            values: list[float | None] = data.draw(
                st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=n, max_size=n)
            )
        else:
            values = data.draw(st.lists(_VALUE, min_size=n, max_size=n))
        columns.append((weight, values))
        scorer = ListedScorer(f"s{i}", "signal" if i % 2 else "", values, vouched)
        scorers.append(WeightedScorer(scorer, weight))  # the bare protocol
    profile = Profile(filters=(), scorers=tuple(scorers), picker=MaxScorePicker(max_endpoints=n))
    scheduler = Scheduler(name="t", profile=profile, rng=random.Random(1), compensate_dispatches=False)
    views = [ep(f"e{i}") for i in range(n)]
    decision = scheduler.pick(req(), views, now=0.0)
    expected = _expected_totals(columns, n)
    got = [decision.scores[f"e{i}"]["total"] for i in range(n)]
    assert [repr(t) for t in got] == [repr(t) for t in expected]
    left_out = [i for i, (_, raw) in enumerate(columns) if all(v is None for v in raw)]
    for i in left_out:
        assert all(f"s{i}" not in decision.scores[f"e{j}"] for j in range(n))
        if i % 2:  # a scorer naming its signal says why it was left out
            assert f"s{i}: no candidate publishes signal, not scored" in decision.reason


def test_a_scorer_left_out_shifts_no_weight_onto_the_next_column() -> None:
    """With the first of three columns unscored, the profile's three-weight kernel must not be used:
    the remaining columns keep their own weights (3 and 1), not the first two (5 and 3)."""
    scorers = (
        WeightedScorer(ListedScorer("none", "x", [None, None], False), 5.0),
        WeightedScorer(ListedScorer("a", "", [1.0, 0.0], True), 3.0),
        WeightedScorer(ListedScorer("b", "", [0.0, 1.0], True), 1.0),
    )
    profile = Profile(filters=(), scorers=scorers, picker=MaxScorePicker(max_endpoints=2))
    scheduler = Scheduler(name="t", profile=profile, rng=random.Random(1), compensate_dispatches=False)
    decision = scheduler.pick(req(), [ep("p"), ep("q")], now=0.0)
    assert decision.scores["p"]["total"] == 3.0
    assert decision.scores["q"]["total"] == 1.0
    assert decision.endpoint == "p"


def _view(key: str, waiting: int, scraped_at: float) -> EndpointView:
    return EndpointView(key=key, metrics=EngineMetrics(waiting=waiting), scraped_at=scraped_at)


@skip_compiled("igw.scheduling.plugins.prefill_collision_scorer", REFERENCES_SUBCLASS)
@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5),  # candidates (may repeat)
            st.lists(st.integers(min_value=-1, max_value=3), min_size=5, max_size=5),  # waiting per position
            st.sampled_from([0.0, 0.004, 0.01]),  # how long before now each candidate was scraped
            st.sampled_from([1, 300, 2000]),  # prompt tokens
            st.booleans(),  # a completion lands (a measured rate) before the pick
        ),
        max_size=40,
    )
)
def test_inline_pending_work_matches_the_per_endpoint_helper(
    steps: list[tuple[list[str], list[int], float, int, bool]],
) -> None:
    """Dispatches a scrape already shows while requests wait there are left out, dispatches after
    it count, worked-off ones are dropped, and a key listed twice is visited once per position."""
    fast, reference = PrefillCollisionScorer(), ReferencePrefillCollisionScorer()
    now = 0.0
    for step, (keys, waiting, age, tokens, complete) in enumerate(steps):
        now += 0.003
        if complete:
            outcome = RequestOutcome(
                request_id=str(step),
                endpoint=keys[0],
                ok=True,
                ttft_s=0.02 + 0.01 * (step % 3),
                prompt_tokens=600,
            )
            for plugin in (fast, reference):
                plugin.on_complete(outcome, now=now)
        views = [_view(k, waiting[i], now - age) for i, k in enumerate(keys)]
        request = RoutingRequest(
            request_id=str(step), model="m", base_model="m", prefix_text="", prompt_tokens=tokens
        )
        scores = []
        for plugin in (fast, reference):
            ctx = CycleContext(request=request, now=now, rng=random.Random(0))
            scores.append([repr(s) for s in plugin.score(ctx, views)])
            plugin.on_picked(ctx, views[step % len(views)])
        assert scores[0] == scores[1]
        assert {k: list(q) for k, q in fast.recent.items()} == {
            k: list(q) for k, q in reference.recent.items()
        }


def test_the_all_stale_fallback_is_not_summed_with_the_profiles_weights() -> None:
    """A one-scorer profile weighted 3 and the all-stale fallback (one scorer weighted 1): the
    fallback's totals are its own scores, not three times them."""
    scorers = (WeightedScorer(ListedScorer("a", "", [1.0, 0.0], True), 3.0),)
    profile = Profile(filters=(), scorers=scorers, picker=MaxScorePicker(max_endpoints=2))
    scheduler = Scheduler(name="t", profile=profile, rng=random.Random(1), compensate_dispatches=False)
    stale = [ep("p", scraped_at=None, inflight=3), ep("q", scraped_at=None, inflight=1)]
    decision = scheduler.pick(req(), stale, now=100.0)
    assert decision.endpoint == "q"
    assert "stale or failing metrics" in decision.reason
    own = InflightScorer().score(CycleContext(request=req(), now=100.0, rng=random.Random(1)), stale)
    assert [decision.scores[k]["total"] for k in ("p", "q")] == [0.0 + clamp01(v or 0.0) for v in own]


def _general_rows_scheduler(scheduler: Scheduler) -> Scheduler:
    """``scheduler`` made to build its decisions' score rows by the general loop (the code the
    generated row kernels replace): no profile row kernel, left-out kernels without one."""
    left_out_kernel = scheduler._left_out_kernel

    def general(positions: tuple[int, ...]) -> tuple[object, None]:
        return left_out_kernel(positions)[0], None

    scheduler._profile_rows = None
    scheduler._left_out_kernels = {}
    scheduler._left_out_kernel = general  # type: ignore[method-assign,assignment]  # this instance only
    return scheduler


@skip_compiled(
    "igw.scheduling.scheduler",
    "the compiled pick makes its rows with _native_rows_of, not the kernels this test swaps on the "
    "instance (whose attributes are read-only there); _native_rows_of is checked against the kernel below",
)
@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.sampled_from(["e0", "e1", "e2"]), min_size=1, max_size=5),
    data=st.data(),
    named=st.lists(
        st.tuples(st.sampled_from(["a", "b", "total", "a"]), st.sampled_from([1.0, 2.0, 0.5, -0.0])),
        min_size=1,
        max_size=4,
    ),
)
def test_score_rows_are_what_the_general_loop_builds(
    keys: list[str], data: st.DataObject, named: list[tuple[str, float]]
) -> None:
    """The generated row kernels (every scorer scoring, or some left out) give the decision's
    ``scores`` of the loop they replace: the same rows, keys and names in the same order, a name
    equal to ``total`` or listed twice and a key listed twice resolved alike, NaN columns clamped."""
    n = len(keys)
    value = st.one_of(_VALUE, st.just(float("nan")))
    scorers = []
    for i, (name, weight) in enumerate(named):
        vouched = data.draw(st.booleans(), label=f"vouched {i}")
        values: list[float | None] = data.draw(
            st.lists(st.sampled_from([0.0, 0.25, 1.0]) if vouched else value, min_size=n, max_size=n),
            label=f"values {i}",
        )
        scorers.append(WeightedScorer(ListedScorer(name, "", values, vouched), weight))
    decisions = []
    for general in (False, True):
        profile = Profile(filters=(), scorers=tuple(scorers), picker=MaxScorePicker(max_endpoints=3))
        scheduler = Scheduler(name="t", profile=profile, rng=random.Random(1), compensate_dispatches=False)
        if general:
            scheduler = _general_rows_scheduler(scheduler)
        decision = scheduler.pick(req(), [ep(k) for k in keys], now=0.0)
        decisions.append(
            [(k, [(name, repr(v)) for name, v in row.items()]) for k, row in decision.scores.items()]
        )
    assert decisions[0] == decisions[1]


class _Learning(PluginHooks):
    """A scorer that learns from outcomes only (``on_picked`` is PluginHooks' no-op)."""

    type_name = "learning"
    signal = ""

    def __init__(self, name: str, heard: list[tuple[str, str]]) -> None:
        self.name, self.heard = name, heard

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        return UnitScores([1.0] * len(endpoints))

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        self.heard.append((self.name, outcome.request_id))


class _Quiet(_Learning):
    """Inherits ``on_complete`` from a class that overrides it: still called."""


class _Bare(ListedScorer):
    """A third party's scorer (bare protocol): every hook is called, no-op or not."""

    def __init__(self, name: str, heard: list[tuple[str, str]]) -> None:
        super().__init__(name, "", [1.0, 1.0], True)
        self.heard = heard

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        self.heard.append((self.name, outcome.request_id))


def test_outcomes_reach_every_plugin_with_an_on_complete_of_its_own_in_profile_order() -> None:
    """Plugins whose ``on_complete`` is only PluginHooks' no-op are skipped; every other plugin
    (its own override, an inherited one, the bare protocol) hears each outcome, in profile order."""
    heard: list[tuple[str, str]] = []
    scorers = (
        WeightedScorer(_Learning("first", heard), 1.0),
        WeightedScorer(InflightScorer(), 1.0),  # no on_complete of its own
        WeightedScorer(_Bare("bare", heard), 1.0),
        WeightedScorer(_Quiet("inherited", heard), 1.0),
    )
    profile = Profile(filters=(), scorers=scorers, picker=MaxScorePicker(max_endpoints=2))
    scheduler = Scheduler(name="t", profile=profile, rng=random.Random(1), compensate_dispatches=False)
    for rid in ("r1", "r2"):
        scheduler.on_complete(RequestOutcome(request_id=rid, endpoint="p", ok=True, ttft_s=0.1), now=1.0)
    assert heard == [(name, rid) for rid in ("r1", "r2") for name in ("first", "bare", "inherited")]
    assert all(type(p) is not InflightScorer for p in scheduler._on_complete)


class _FirstTokens(_Learning):
    """Learns from first tokens too (its own ``on_first_token``)."""

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        self.heard.append((self.name + " first", outcome.request_id))


class _BareFirst(_Bare):
    """A third party's scorer (bare protocol) with an ``on_first_token``: always called."""

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        self.heard.append((self.name + " first", outcome.request_id))


def test_first_tokens_reach_every_plugin_with_an_on_first_token_of_its_own_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plugins whose ``on_first_token`` is only PluginHooks' no-op (an interpreted call per plugin
    per stream in the compiled build) are not called; the others hear each first token, in profile
    order. PluginHooks' no-op is replaced by a recording one after the scheduler is built: a plugin
    still called through it would be heard."""
    heard: list[tuple[str, str]] = []
    scorers = (
        WeightedScorer(_FirstTokens("first", heard), 1.0),
        WeightedScorer(InflightScorer(), 1.0),  # no on_first_token of its own
        WeightedScorer(_Learning("outcomes only", heard), 1.0),  # on_complete only
        WeightedScorer(_BareFirst("bare", heard), 1.0),
    )
    profile = Profile(filters=(), scorers=scorers, picker=MaxScorePicker(max_endpoints=2))
    scheduler = Scheduler(name="t", profile=profile, rng=random.Random(1), compensate_dispatches=False)

    def recorded(self: PluginHooks, outcome: RequestOutcome, *, now: float) -> None:
        heard.append((type(self).__name__ + " no-op", outcome.request_id))

    monkeypatch.setattr(PluginHooks, "on_first_token", recorded)
    for rid in ("r1", "r2"):
        scheduler.on_first_token(RequestOutcome(request_id=rid, endpoint="p", ok=True, ttft_s=0.1), now=1.0)
    assert heard == [(name, rid) for rid in ("r1", "r2") for name in ("first first", "bare first")]


@skip_compiled(
    "igw.scheduling.scheduler",
    "_sum_kernel hands out the native sum itself there, so the comparison would be with itself; "
    "tests/compiled compares the compiled decisions with the pure ones",
)
def test_the_native_weighted_sum_gives_the_generated_kernel_s_floats() -> None:
    """The loops the compiled build runs (``_native_weighted_sum``) add exactly what the generated
    comprehension adds, special floats and a weight of 1.0 included, and refuse columns of
    different lengths as it does; run interpreted here, compiled by ``tests/compiled`` (whose DES
    decisions are made with it)."""
    from igw.scheduling.scheduler import NATIVE_SUM, _native_weighted_sum, _sum_kernel

    assert not NATIVE_SUM  # this test process runs the sources
    rng = random.Random(3)
    special = [0.0, -0.0, 1.0, 0.1, 1e-300, 1e300, math.inf, -math.inf, math.nan, 7]
    for _ in range(3_000):
        weights = tuple(rng.choice((1.0, 2.0, 0.5, 3.0, 16.0, 0.1, 1e-3)) for _ in range(rng.randint(1, 8)))
        n = rng.randint(0, 12)
        columns = [
            [rng.choice(special) if rng.random() < 0.2 else rng.random() for _ in range(n)] for _ in weights
        ]
        expected = _sum_kernel(weights)(*columns)
        assert [repr(t) for t in _native_weighted_sum(weights, *columns)] == [repr(t) for t in expected]
    with pytest.raises(ValueError, match="different lengths"):
        _native_weighted_sum((1.0, 2.0), [0.5, 0.5], [0.5])
    with pytest.raises(ValueError, match=r"shorter|longer"):
        _sum_kernel((1.0, 2.0))([0.5, 0.5], [0.5])


def test_the_native_score_rows_are_the_generated_kernel_s_rows() -> None:
    """The loops the compiled build runs for a decision's score rows (``_native_rows_of``) give
    the generated kernel's dict: the same keys in the same order (rank order; a repeated candidate
    key or scorer name keeps its first position and takes its last value) and the same floats,
    special ones included; run interpreted here, and by ``tests/compiled`` against the compiled
    build (where the generated kernel stays interpreted and the loops are native)."""
    from igw.scheduling.scheduler import _native_rows_of, _rows_kernel

    rng = random.Random(4)
    special = [0.0, -0.0, 1.0, 0.1, 1e-300, 1e300, math.inf, -math.inf, math.nan]

    def shown(rows: dict[str, dict[str, float]]) -> list[tuple[str, list[tuple[str, str]]]]:
        return [(key, [(name, repr(v)) for name, v in row.items()]) for key, row in rows.items()]

    for _ in range(2_000):
        count = rng.randint(1, 6)
        names = tuple(rng.choice(("a", "b", "c", "d", "total", "e")) for _ in range(count))
        weights = tuple(rng.choice((1.0, 2.0, 0.5, 3.0, 0.1, 1e-3, -1.0)) for _ in range(count))
        n = rng.randint(1, 8)
        candidates = [ep(rng.choice(("p", "q", "r", "s", "t", "u", "v", "w"))) for _ in range(n)]
        ranked = rng.sample(range(n), rng.randint(1, n))
        totals = [rng.choice(special) if rng.random() < 0.2 else rng.random() for _ in range(n)]
        columns = [
            [rng.choice(special) if rng.random() < 0.2 else rng.random() for _ in range(n)] for _ in names
        ]
        expected = _rows_kernel(names, weights)(candidates, ranked, totals, *columns)
        assert shown(_native_rows_of(names, weights, candidates, ranked, totals, columns)) == shown(expected)
