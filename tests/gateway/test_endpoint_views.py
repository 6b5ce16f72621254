"""``EndpointPool.views()`` keeps its views between requests and replaces only the changed ones.

The oracle is the straightforward build (a new :class:`EndpointView` per endpoint from its state, on
every call); the kept list must equal it after any mix of field writes (the scraper's, the proxy's,
discovery's) and membership changes.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from igw.gateway import endpoints
from igw.gateway.endpoints import VIEW_FIELDS, DiscoveredEndpoint, EndpointPool, EndpointState
from igw.scheduling.types import EndpointView, EngineMetrics
from tests.compiled.tree import compiled, skip_compiled


def built_from_scratch(pool: EndpointPool) -> list[EndpointView]:
    return [
        EndpointView(
            key=s.key,
            metrics=s.metrics,
            scraped_at=s.scraped_at,
            scrape_failing=s.scrape_failing,
            inflight=s.inflight,
            inflight_tokens=s.inflight_tokens,
            labels=s.labels,
            max_model_len=s.max_model_len,
        )
        for s in pool.states.values()
    ]


_KEYS = [f"10.0.0.{i}:8000" for i in range(6)]
_WRITES = st.one_of(
    st.tuples(st.just("metrics"), st.builds(EngineMetrics, waiting=st.integers(0, 3))),
    st.tuples(st.just("scraped_at"), st.floats(0.0, 10.0)),
    st.tuples(st.just("scrape_failing"), st.booleans()),
    st.tuples(st.just("inflight"), st.integers(0, 5)),
    st.tuples(st.just("inflight_tokens"), st.integers(0, 5000)),
    st.tuples(st.just("max_model_len"), st.one_of(st.none(), st.integers(100, 9000))),
    st.tuples(st.just("last_error"), st.one_of(st.none(), st.just("timeout"))),  # not in the view
    st.tuples(st.just("picks"), st.integers(0, 9)),  # not in the view
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(_KEYS), _WRITES),
        st.tuples(st.just("dispatch"), st.sampled_from(_KEYS), st.integers(1, 900)),
        st.tuples(
            st.just("discover"),
            st.lists(st.sampled_from(_KEYS), unique=True),
            st.sampled_from(["decode", "prefill"]),
        ),
        st.tuples(st.just("views"), st.none(), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS)
def test_kept_views_equal_a_from_scratch_build(ops: list[tuple[str, object, object]]) -> None:
    pool = EndpointPool()
    pool.replace([DiscoveredEndpoint(k, {"role": "decode"}) for k in _KEYS[:4]])
    for op, key, arg in ops:
        state = pool.states.get(str(key))
        if op == "write" and state is not None:
            name, value = cast("tuple[str, object]", arg)
            setattr(state, name, value)
        elif op == "dispatch" and state is not None:
            state.dispatched(int(arg))  # type: ignore[call-overload]
            state.completed(int(arg) // 2)  # type: ignore[call-overload]
        elif op == "discover":
            pool.replace([DiscoveredEndpoint(k, {"role": str(arg)}) for k in key])  # type: ignore[attr-defined]
        assert pool.views() == built_from_scratch(pool)


def test_unchanged_endpoints_keep_their_view_object_and_the_list_is_the_callers() -> None:
    pool = EndpointPool()
    pool.replace([DiscoveredEndpoint(k) for k in _KEYS[:3]])
    first = pool.views()
    pool.states[_KEYS[1]].dispatched(100)
    second = pool.views()
    assert first[0] is second[0]
    assert first[2] is second[2]
    assert first[1] is not second[1]
    assert second[1].inflight == 1
    second.clear()  # the caller's own list: the pool's is untouched
    assert len(pool.views()) == 3


def test_discovery_reporting_the_same_pool_again_keeps_every_view() -> None:
    """Discovery reports the whole pool on every pod event: an endpoint whose labels did not change
    keeps its view (it made every request after a pod event rebuild every view); one whose labels
    changed gets a new one, with them."""
    pool = EndpointPool()

    def report(prefill: str | None = None) -> list[DiscoveredEndpoint]:
        return [
            DiscoveredEndpoint(k, {"role": "prefill" if k == prefill else "decode"}, pod=f"ns/{k}")
            for k in _KEYS[:3]
        ]

    pool.replace(report())
    first = pool.views()
    pool.replace(report())
    second = pool.views()
    assert all(a is b for a, b in zip(first, second, strict=True))
    pool.replace(report(prefill=_KEYS[1]))
    third = pool.views()
    assert [a is b for a, b in zip(second, third, strict=True)] == [True, False, True]
    assert third[1].labels == {"role": "prefill"}
    assert third == built_from_scratch(pool)


def test_a_removed_state_no_longer_reports_to_the_pool() -> None:
    pool = EndpointPool()
    pool.replace([DiscoveredEndpoint(k) for k in _KEYS[:2]])
    gone = pool.states[_KEYS[0]]
    pool.views()
    pool.replace([DiscoveredEndpoint(_KEYS[1])])
    gone.inflight = 7  # a request that was in flight to the removed endpoint completes late
    assert pool.views() == built_from_scratch(pool)
    assert gone.on_view_change is None


def test_view_fields_are_exactly_what_a_view_carries_from_the_state() -> None:
    carried = {f.name for f in dataclasses.fields(EndpointView)} - {"unreflected_dispatches"}
    assert carried == VIEW_FIELDS
    state = EndpointState(key=_KEYS[0], labels={})
    assert all(hasattr(state, name) for name in VIEW_FIELDS)


def test_a_dispatch_and_a_completion_each_tell_the_pool_once() -> None:
    """Per forwarded request: the in-flight fields change together, so the cached view is dropped and
    the pool told once per call (each field written through ``__setattr__`` told it per field)."""
    state = EndpointState(key=_KEYS[0], labels={})
    heard: list[str] = []
    state.on_view_change = heard.append
    before = state.view()
    state.dispatched(300)
    assert heard == [_KEYS[0]]
    during = state.view()
    assert during is not before
    assert (during.inflight, during.inflight_tokens, state.picks) == (1, 300, 1)
    state.completed(300)
    assert heard == [_KEYS[0], _KEYS[0]]
    after = state.view()
    assert after is not during
    assert (after.inflight, after.inflight_tokens, state.picks) == (0, 0, 1)


def test_a_view_made_by_slot_writes_is_the_constructors_field_for_field() -> None:
    """``new_view`` writes the slots positionally (``endpoints._view``): with every field distinct, a
    field order that no longer matches ``EndpointView``'s would put a value in the wrong field."""
    metrics = EngineMetrics(waiting=2)
    labels = {"gpu": "h100"}
    state = EndpointState(key=_KEYS[0], labels=labels, metrics=metrics, scraped_at=2.5)
    state.scrape_failing = True
    state.max_model_len = 4096
    state.dispatched(300)
    state.dispatched(200)
    made = state.new_view()
    built = EndpointView(
        key=_KEYS[0],
        metrics=metrics,
        scraped_at=2.5,
        scrape_failing=True,
        inflight=2,
        inflight_tokens=500,
        labels=labels,
        max_model_len=4096,
    )
    assert type(made) is EndpointView
    for f in dataclasses.fields(EndpointView):
        assert getattr(made, f.name) == getattr(built, f.name), f.name
        assert type(getattr(made, f.name)) is type(getattr(built, f.name)), f.name
    # the slot writes in use on the sources (see slot_init); a compiled EndpointView is its own constructor
    assert (endpoints._view is EndpointView) == compiled("igw.scheduling.values")


def largest_from_the_states(pool: EndpointPool) -> int | None:
    """``largest_context`` as it was computed before session s50: a pass over the states."""
    lengths = [s.max_model_len for s in pool.states.values()]
    if not lengths or None in lengths:
        return None
    return max(n for n in lengths if n is not None)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, scrapes=st.lists(st.one_of(st.none(), st.integers(100, 9000)), max_size=6))
def test_the_kept_largest_context_equals_a_pass_over_the_states(
    ops: list[tuple[str, object, object]], scrapes: list[int | None]
) -> None:
    """Asked before or after ``views()``, after any mix of writes (a scrape's ``take_scrape`` too)
    and membership changes, the kept answer is the one a pass over the states gives."""
    pool = EndpointPool()
    assert pool.largest_context() is None  # no endpoints
    pool.replace([DiscoveredEndpoint(k, {"role": "decode"}) for k in _KEYS[:4]])
    for i, (op, key, arg) in enumerate(ops):
        state = pool.states.get(str(key))
        if op == "write" and state is not None:
            name, value = cast("tuple[str, object]", arg)
            setattr(state, name, value)
        elif op == "dispatch" and state is not None:
            state.dispatched(int(arg))  # type: ignore[call-overload]
            if scrapes:
                length = scrapes[i % len(scrapes)]
                state.take_scrape(None, None, 1.0, False, None, frozenset(), length)
        elif op == "discover":
            pool.replace([DiscoveredEndpoint(k, {"role": str(arg)}) for k in key])  # type: ignore[attr-defined]
        elif op == "views":
            pool.views()
        assert pool.largest_context() == largest_from_the_states(pool)
    assert pool.views() == built_from_scratch(pool)


@skip_compiled("igw.gateway.endpoints", "it counts reads of an interpreted property")
def test_the_largest_context_is_not_a_pass_over_the_states_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every request asks the pool's largest context before its pick: with the lengths unchanged it
    reads no endpoint's state (a pass over 1,000 states cost about 60 µs per request)."""
    pool = EndpointPool()
    keys = [f"10.0.{i // 250}.{i % 250}:8000" for i in range(1000)]
    pool.replace([DiscoveredEndpoint(k) for k in keys])
    for i, state in enumerate(pool.states.values()):
        state.max_model_len = 4096 + i
    assert pool.largest_context() == 4096 + 999
    reads: list[int] = []
    kept = EndpointState.max_model_len

    def counted(state: EndpointState) -> int | None:
        reads.append(1)
        return cast("int | None", kept.fget(state))  # type: ignore[attr-defined]

    monkeypatch.setattr(EndpointState, "max_model_len", property(counted, kept.fset))  # type: ignore[attr-defined]
    pool.states[keys[7]].dispatched(100)  # a request in flight: one view replaced, no length moved
    assert pool.largest_context() == 4096 + 999
    assert len(reads) == 0
    pool.states[keys[999]].max_model_len = 100  # a length moved: the answer follows
    assert pool.largest_context() == 4096 + 998
