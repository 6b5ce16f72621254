"""Table tests for the flow-control queues: bands, fairness, ordering, capacity, TTL, cancellation."""

from __future__ import annotations

import dataclasses
import functools
import math
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from igw.config.validate import validate_document
from igw.scheduling.flow_control import (
    CRITICAL,
    SHEDDABLE,
    STANDARD,
    BandLimits,
    BatchEstimate,
    CapacityEstimate,
    EndpointLoad,
    Fairness,
    FlowControlError,
    FlowController,
    FlowControlSettings,
    Offer,
    Ordering,
    QueueBytes,
    Shed,
    ShedReason,
    least_wait,
    predicted_wait_s,
    priority_for,
    slot_miss,
    slots_for_wait,
)
from tests.config.cases import base_document

BIG = BandLimits(max_requests=100, max_bytes=1 << 20, ttl_s=30.0)


def _settings(**kw: Any) -> FlowControlSettings:
    kw.setdefault("bands", {CRITICAL: BIG, STANDARD: BIG, SHEDDABLE: BIG})
    return FlowControlSettings(**kw)


def _drain(fc: FlowController, now: float = 0.0) -> list[str]:
    order: list[str] = []
    while (item := fc.peek(now)) is not None:
        fc.take(item, now)
        order.append(item.request_id)
    return order


def _offer(
    fc: FlowController,
    rid: str,
    priority: int = STANDARD,
    tenant: str = "t",
    *,
    size_bytes: int = 10,
    now: float = 0.0,
    client_deadline: float | None = None,
) -> Offer:
    return fc.offer(
        request_id=rid,
        priority=priority,
        tenant=tenant,
        size_bytes=size_bytes,
        now=now,
        client_deadline=client_deadline,
    )


def _take_next(fc: FlowController, now: float) -> None:
    item = fc.peek(now)
    assert item is not None
    fc.take(item, now)


def test_higher_bands_dispatch_first_any_integer_priority() -> None:
    fc = FlowController(_settings())
    for rid, prio in [("s1", SHEDDABLE), ("n1", STANDARD), ("c1", CRITICAL), ("x7", 7), ("n2", STANDARD)]:
        _offer(fc, rid, prio)
    assert fc.depths() == {SHEDDABLE: 1, STANDARD: 2, CRITICAL: 1, 7: 1}
    assert _drain(fc) == ["x7", "c1", "n1", "n2", "s1"]
    assert len(fc) == 0
    assert fc.queued_bytes == 0


@pytest.mark.parametrize(
    ("fairness", "expected"),
    [
        # a's burst of three arrives first; round-robin still lets b and c go second and third
        (Fairness.ROUND_ROBIN, ["a1", "b1", "c1", "a2", "b2", "a3"]),
        (Fairness.GLOBAL, ["a1", "a2", "a3", "b1", "b2", "c1"]),
    ],
)
def test_fairness_across_tenants_within_a_band(fairness: Fairness, expected: list[str]) -> None:
    fc = FlowController(_settings(fairness=fairness))
    for i, (rid, tenant) in enumerate(
        [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("b2", "b"), ("c1", "c")]
    ):
        _offer(fc, rid, tenant=tenant, now=float(i))
    assert _drain(fc) == expected


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [(Ordering.FCFS, ["early", "tight", "late"]), (Ordering.EDF, ["tight", "early", "late"])],
)
def test_fcfs_or_earliest_deadline_first(ordering: Ordering, expected: list[str]) -> None:
    fc = FlowController(_settings(ordering=ordering))
    _offer(fc, "early", now=0.0)
    _offer(fc, "tight", now=1.0, client_deadline=5.0)
    _offer(fc, "late", now=2.0)
    assert _drain(fc, now=2.0) == expected


def test_band_capacity_in_requests_and_bytes() -> None:
    small = BandLimits(max_requests=2, max_bytes=25, ttl_s=30.0)
    fc = FlowController(_settings(bands={STANDARD: small, CRITICAL: BIG}))
    assert _offer(fc, "a").queued
    assert _offer(fc, "b").queued
    full = _offer(fc, "c")
    assert (full.queued, full.reason) == (False, ShedReason.BAND_FULL)
    _take_next(fc, 0.0)
    too_big = _offer(fc, "d", size_bytes=16)
    assert (too_big.queued, too_big.reason) == (False, ShedReason.BAND_FULL)
    assert _offer(fc, "e", size_bytes=15).queued


def test_a_full_band_takes_a_lighter_tenants_arrival_in_place_of_the_heaviest_tenants_newest() -> None:
    small = BandLimits(max_requests=4, max_bytes=1000, ttl_s=30.0)
    fc = FlowController(_settings(bands={STANDARD: small, CRITICAL: BIG}))
    for i in range(4):
        assert _offer(fc, f"big{i}", tenant="big", now=float(i)).queued
    first = _offer(fc, "small0", tenant="small")
    assert first.queued
    assert [(s.request.request_id, s.reason) for s in first.displaced] == [("big3", ShedReason.FAIR_SHARE)]
    assert [s.request.request_id for s in _offer(fc, "small1", tenant="small").displaced] == ["big2"]
    refused = _offer(fc, "small2", tenant="small")  # 2 each: its share is held
    assert (refused.queued, refused.reason) == (False, ShedReason.BAND_FULL)
    assert (_offer(fc, "big4", tenant="big").reason) is ShedReason.BAND_FULL  # no taking turns
    assert _drain(fc) == ["big0", "small0", "big1", "small1"]


def test_fair_share_displacement_frees_enough_bytes_or_nothing() -> None:
    small = BandLimits(max_requests=100, max_bytes=40, ttl_s=30.0)
    fc = FlowController(_settings(bands={STANDARD: small, CRITICAL: BIG}))
    for i in range(4):
        assert _offer(fc, f"big{i}", tenant="big", size_bytes=10).queued
    wide = _offer(fc, "wide", tenant="small", size_bytes=25)
    assert [s.request.request_id for s in wide.displaced] == ["big3", "big2", "big1"]
    assert len(fc) == 2
    assert _offer(fc, "huge", tenant="other", size_bytes=41).reason is ShedReason.BAND_FULL


def test_global_fairness_keeps_first_come_band_capacity() -> None:
    small = BandLimits(max_requests=2, max_bytes=1000, ttl_s=30.0)
    fc = FlowController(_settings(bands={STANDARD: small, CRITICAL: BIG}, fairness=Fairness.GLOBAL))
    assert _offer(fc, "a", tenant="big").queued
    assert _offer(fc, "b", tenant="big").queued
    assert _offer(fc, "c", tenant="small").reason is ShedReason.BAND_FULL


def test_global_capacity_sheds_sheddable_first_newest_first_and_never_upwards() -> None:
    fc = FlowController(_settings(max_requests=4))
    _offer(fc, "s-old", SHEDDABLE, now=0.0)
    _offer(fc, "s-new", SHEDDABLE, now=1.0)
    _offer(fc, "n1", STANDARD, now=2.0)
    _offer(fc, "c1", CRITICAL, now=3.0)
    # a Standard arrival displaces the newest Sheddable
    got = _offer(fc, "n2", STANDARD, now=4.0)
    assert got.queued
    assert [(d.request.request_id, d.reason) for d in got.displaced] == [("s-new", ShedReason.DISPLACED)]
    # a Sheddable arrival has nothing lower to displace: refused
    refused = _offer(fc, "s3", SHEDDABLE, now=5.0)
    assert (refused.queued, refused.reason) == (False, ShedReason.QUEUE_FULL)
    # Critical displaces the last Sheddable, then Standard (newest first); never another Critical
    assert [d.request.request_id for d in _offer(fc, "c2", CRITICAL, now=6.0).displaced] == ["s-old"]
    assert [d.request.request_id for d in _offer(fc, "c3", CRITICAL, now=7.0).displaced] == ["n2"]
    assert [d.request.request_id for d in _offer(fc, "c4", CRITICAL, now=8.0).displaced] == ["n1"]
    last = _offer(fc, "c5", CRITICAL, now=9.0)
    assert (last.queued, last.reason) == (False, ShedReason.QUEUE_FULL)
    assert _drain(fc) == ["c1", "c2", "c3", "c4"]


def test_global_byte_capacity_displaces_enough_lower_work() -> None:
    fc = FlowController(_settings(max_bytes=100))
    for i in range(5):
        _offer(fc, f"s{i}", SHEDDABLE, size_bytes=20, now=float(i))
    got = _offer(fc, "c", CRITICAL, size_bytes=50, now=9.0)
    assert [d.request.request_id for d in got.displaced] == ["s4", "s3", "s2"]
    assert fc.queued_bytes == 90


def test_ttl_per_band_and_client_deadline_when_shorter() -> None:
    bands = {
        STANDARD: BandLimits(max_requests=10, max_bytes=1000, ttl_s=5.0),
        CRITICAL: BandLimits(max_requests=10, max_bytes=1000, ttl_s=60.0),
    }
    fc = FlowController(_settings(bands=bands))
    _offer(fc, "n", STANDARD, now=0.0)
    _offer(fc, "n-hurry", STANDARD, now=0.0, client_deadline=2.0)
    _offer(fc, "c", CRITICAL, now=0.0)
    assert fc.next_deadline() == 2.0
    assert [s.request.request_id for s in fc.expire(2.0)] == ["n-hurry"]
    assert list(fc.expire(4.9)) == []
    assert [(s.request.request_id, s.reason) for s in fc.expire(5.0)] == [("n", ShedReason.TTL_EXPIRED)]
    assert _drain(fc, 5.0) == ["c"]


def test_expired_requests_are_reported_by_the_next_offer() -> None:
    fc = FlowController(_settings())
    _offer(fc, "old", now=0.0)
    got = _offer(fc, "new", now=31.0)
    assert [(s.request.request_id, s.reason) for s in got.displaced] == [("old", ShedReason.TTL_EXPIRED)]


def test_cancel_leaves_at_once_and_frees_capacity() -> None:
    fc = FlowController(_settings(max_requests=2))
    _offer(fc, "a", tenant="x")
    _offer(fc, "b", tenant="y")
    assert fc.cancel("a") is not None
    assert "a" not in fc
    assert fc.cancel("a") is None
    assert _offer(fc, "c", tenant="x").queued
    assert _drain(fc) == ["b", "c"]


def _shed_ids(shed: tuple[Any, ...]) -> list[tuple[str, ShedReason]]:
    return [(s.request.request_id, s.reason) for s in shed]


def test_reconfigure_sheds_a_band_over_its_lowered_bounds_from_the_heaviest_tenant_newest_first() -> None:
    fc = FlowController(_settings())
    for rid, tenant in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a"), ("b2", "b")]:
        _offer(fc, rid, tenant=tenant, size_bytes=10)
    tight = BandLimits(max_requests=3, max_bytes=1000, ttl_s=30.0)
    shed = fc.reconfigure(
        _settings(bands={CRITICAL: BIG, STANDARD: tight, SHEDDABLE: BIG}), engine_priority=None, now=1.0
    )
    assert _shed_ids(shed) == [("a3", ShedReason.BAND_FULL), ("b2", ShedReason.BAND_FULL)]
    assert (len(fc), fc.queued_bytes) == (3, 30)
    by_bytes = BandLimits(max_requests=100, max_bytes=20, ttl_s=30.0)
    shed = fc.reconfigure(
        _settings(bands={CRITICAL: BIG, STANDARD: by_bytes, SHEDDABLE: BIG}, fairness=Fairness.GLOBAL),
        engine_priority=None,
        now=1.0,
    )
    assert _shed_ids(shed) == [("a2", ShedReason.BAND_FULL)]  # global fairness: the band's newest
    assert _drain(fc, 1.0) == ["a1", "b1"]


def test_reconfigure_sheds_over_the_lowered_queue_bounds_lowest_band_newest_first() -> None:
    fc = FlowController(_settings())
    for rid, prio in [
        ("c1", CRITICAL),
        ("s1", SHEDDABLE),
        ("n1", STANDARD),
        ("s2", SHEDDABLE),
        ("n2", STANDARD),
    ]:
        _offer(fc, rid, prio, size_bytes=10)
    shed = fc.reconfigure(_settings(max_requests=2), engine_priority=None, now=0.0)
    assert _shed_ids(shed) == [
        ("s2", ShedReason.QUEUE_FULL),
        ("s1", ShedReason.QUEUE_FULL),
        ("n2", ShedReason.QUEUE_FULL),
    ]
    shed = fc.reconfigure(_settings(max_bytes=15), engine_priority=None, now=0.0)
    assert _shed_ids(shed) == [("n1", ShedReason.QUEUE_FULL)]  # never a higher band while a lower one is left
    assert _drain(fc) == ["c1"]


def test_reconfigure_recomputes_deadlines_from_the_new_ttl_keeping_the_clients_own() -> None:
    fc = FlowController(_settings())
    _offer(fc, "old", now=0.0)
    _offer(fc, "hurry", now=4.0, client_deadline=8.0)
    _offer(fc, "new", now=4.0)
    short = BandLimits(max_requests=100, max_bytes=1 << 20, ttl_s=5.0)
    shed = fc.reconfigure(
        _settings(bands={CRITICAL: BIG, STANDARD: short, SHEDDABLE: BIG}), engine_priority=None, now=6.0
    )
    assert _shed_ids(shed) == [("old", ShedReason.TTL_EXPIRED)]  # queued 6 s: past the new 5 s at once
    assert fc.next_deadline() == 8.0
    long = BandLimits(max_requests=100, max_bytes=1 << 20, ttl_s=60.0)
    assert (
        fc.reconfigure(
            _settings(bands={CRITICAL: BIG, STANDARD: long, SHEDDABLE: BIG}), engine_priority=None, now=6.0
        )
        == ()
    )
    assert fc.next_deadline() == 8.0  # a raised TTL never lifts the client's deadline
    assert _shed_ids(tuple(fc.expire(8.0))) == [("hurry", ShedReason.TTL_EXPIRED)]
    assert fc.next_deadline() == 64.0  # "new" got the raised TTL from its arrival


def test_reconfigure_reorders_queued_requests_for_the_new_ordering() -> None:
    fc = FlowController(_settings())
    _offer(fc, "late-deadline", now=0.0)
    _offer(fc, "early-deadline", now=1.0, client_deadline=2.0)
    assert fc.reconfigure(_settings(ordering=Ordering.EDF), engine_priority=None, now=1.0) == ()
    assert _drain(fc, 1.0) == ["early-deadline", "late-deadline"]


def test_reconfigure_moves_reclassified_requests_keeping_their_arrival_order_and_age() -> None:
    """A request whose objective's priority a reload changed joins its new band in its arrival
    order (behind an older request there, ahead of a newer one), with the new band's TTL counted
    from its own arrival, and a band it overfills sheds by the usual rule."""
    fc = FlowController(_settings())
    _offer(fc, "older-critical", CRITICAL, now=0.0)
    _offer(fc, "moved", SHEDDABLE, now=1.0)
    _offer(fc, "newer-critical", CRITICAL, now=2.0)
    short = BandLimits(max_requests=2, max_bytes=1 << 20, ttl_s=10.0)
    shed = fc.reconfigure(
        _settings(bands={CRITICAL: short, STANDARD: BIG, SHEDDABLE: BIG}),
        engine_priority=None,
        now=3.0,
        priorities={"moved": CRITICAL, "unknown": STANDARD, "older-critical": CRITICAL},
    )
    assert _shed_ids(shed) == [("newer-critical", ShedReason.BAND_FULL)]  # its band's newest
    assert fc.depths() == {CRITICAL: 2}
    assert fc.next_deadline() == 10.0  # "older-critical": 10 s from its arrival at 0
    assert _shed_ids(tuple(fc.expire(10.0))) == [("older-critical", ShedReason.TTL_EXPIRED)]
    assert fc.next_deadline() == 11.0  # "moved": the new band's 10 s from its arrival at 1, not from 3
    assert fc.queued_bytes == 10
    assert _drain(fc, 10.5) == ["moved"]


def test_a_moved_request_takes_its_arrival_place_in_its_new_band() -> None:
    fc = FlowController(_settings())
    _offer(fc, "first", STANDARD, now=0.0)
    _offer(fc, "moved", SHEDDABLE, now=1.0)
    _offer(fc, "last", STANDARD, now=2.0)
    fc.reconfigure(_settings(), engine_priority=None, now=3.0, priorities={"moved": STANDARD})
    assert _drain(fc, 3.0) == ["first", "moved", "last"]


def test_unnamed_priority_uses_nearest_band_limits() -> None:
    tight = BandLimits(max_requests=1, max_bytes=1000, ttl_s=1.0)
    fc = FlowController(_settings(bands={CRITICAL: BIG, SHEDDABLE: tight}))
    assert _offer(fc, "a", -5).queued
    assert _offer(fc, "b", -5).reason is ShedReason.BAND_FULL
    assert fc.settings.limits_for(0) is tight  # equidistant from 1 and -1: the lower wins


def test_retry_after_from_the_dispatch_rate() -> None:
    fc = FlowController(_settings())
    assert fc.retry_after_s(0.0) == 60  # no evidence of draining yet: the upper bound
    for i in range(10):
        _offer(fc, f"r{i}", now=float(i))
    for t in (0.0, 2.0, 4.0, 6.0, 8.0):
        _take_next(fc, t)
    # 5 dispatches over the 10 s window = 0.5/s; 5 queued + the client itself = 12 s
    assert fc.retry_after_s(10.0) == 12
    assert fc.retry_after_s(10.0, max_s=8) == 8
    assert fc.retry_after_s(18.5) == 60  # the dispatches left the window: no evidence again


def test_retry_after_counts_only_the_queue_ahead_of_the_refused_band() -> None:
    """A refused request waits only behind its own band and those above: lower bands never go
    first. Counting the whole queue told a Critical request behind 2 Critical and 70 Sheddable
    ones to come back in 37 s (the probe over loopback HTTP) where 2 s was the answer."""
    fc = FlowController(_settings())
    for i in range(5):
        _offer(fc, f"done{i}", CRITICAL)
    for t in (-9.0, -7.0, -5.0, -3.0, -1.0):
        _take_next(fc, t)  # 0.5 dispatches/s over the 10 s window up to t=1
    for i in range(70):
        _offer(fc, f"s{i}", SHEDDABLE)
    for i in range(2):
        _offer(fc, f"c{i}", CRITICAL)
    _offer(fc, "n0", STANDARD)
    assert fc.retry_after_s(1.0, priority=CRITICAL) == 6  # 2 ahead + itself at 0.5/s
    assert fc.retry_after_s(1.0, priority=STANDARD) == 8  # the Critical ones and its own band
    assert fc.retry_after_s(1.0, priority=SHEDDABLE, max_s=1000) == 148  # the whole queue
    assert fc.retry_after_s(1.0, max_s=1000) == 148  # no band given: the whole queue, as before


def test_retry_after_leaves_out_higher_bands_sent_straight() -> None:
    """Critical requests sent straight at 10/s take the capacity ahead of a Sheddable request; its
    band drains at the queue's 1/s. Counting them told it 1 s where 10 s was the answer."""
    fc = FlowController(_settings())
    for i in range(10):
        _offer(fc, f"s{i}", SHEDDABLE)
    for i in range(10):
        fc.dispatched(0.1 * i, CRITICAL)
    _take_next(fc, 0.5)  # 1 Sheddable dispatched from the queue in the second
    assert fc.retry_after_s(1.0, priority=SHEDDABLE) == 10  # 9 ahead + itself at 1/s
    assert fc.retry_after_s(1.0, priority=CRITICAL) == 1  # every dispatch is turnover for the top band
    assert fc.retry_after_s(1.0) == 1  # no band given: every dispatch, as before
    fc.dispatched(1.0, SHEDDABLE)  # its own band and those below count
    assert fc.retry_after_s(1.0, priority=SHEDDABLE) == 5
    only_higher = FlowController(_settings())
    _offer(only_higher, "s", SHEDDABLE)
    only_higher.dispatched(0.0, CRITICAL)
    assert only_higher.retry_after_s(0.5, priority=SHEDDABLE) == 60  # no evidence for its band


@pytest.mark.parametrize(
    ("straight", "queued", "ahead", "now", "expected"),
    [
        # 10 dispatched in the last second, 20 ahead: 10/s, 3 s (21 s over the whole window, until s42)
        ((), [0.1 * i for i in range(10)], 20, 1.0, 3),
        # the same turnover sent straight, none queued (told the upper bound 60 s until s42)
        ([0.1 * i for i in range(10)], (), 20, 1.0, 3),
        # half straight, half from the queue: one rate
        ([0.2 * i for i in range(5)], [0.2 * i + 0.1 for i in range(5)], 20, 1.0, 3),
        # a burst in one instant is not thousands a second: the span is at least 1 s
        ((), [0.5] * 4, 7, 0.5, 2),
        # a steady 2/s over the whole window: the window's span
        ((), [0.5 * i for i in range(20)], 9, 10.0, 5),
        # a stall: 10 dispatched in the first second, nothing in the 7 s since: 10 over 8 s
        ((), [0.1 * i for i in range(10)], 20, 8.0, 17),
        # the dispatches left the window: no evidence, the upper bound
        ((), [0.1 * i for i in range(10)], 20, 10.95, 60),
        # bounded below by min_s (1): a fast pool and nothing ahead
        ([0.01 * i for i in range(100)], (), 0, 1.0, 1),
    ],
)
def test_retry_after_rate_table(
    straight: list[float], queued: list[float], ahead: int, now: float, expected: int
) -> None:
    """The estimator on a fake clock: every dispatch counts (queued or sent straight), over the time
    since the oldest in the window (at least 1 s), the queue ahead plus the client at that rate."""
    fc = FlowController(_settings())
    for i in range(len(queued) + ahead):
        _offer(fc, f"q{i}", STANDARD)
    events = sorted([(t, True) for t in straight] + [(t, False) for t in queued])
    for t, sent_straight in events:
        if sent_straight:
            fc.dispatched(t, STANDARD)
        else:
            _take_next(fc, t)
    assert len(fc) == ahead
    assert fc.retry_after_s(now, priority=STANDARD) == expected


@pytest.mark.parametrize(
    ("objective", "expected"),
    [(None, STANDARD), ("Critical", CRITICAL), ("Sheddable", SHEDDABLE), ("chat", 5), ("nope", STANDARD)],
)
def test_objective_names_map_to_priorities(objective: str | None, expected: int) -> None:
    assert priority_for(objective, {"chat": 5}) == expected


@pytest.mark.parametrize(
    ("kw", "path"),
    [
        ({"max_requests": 0}, "flowControl.maxRequests"),
        ({"max_bytes": 0}, "flowControl.maxBytes"),
        ({"bands": {}}, "flowControl.bands"),
        ({"bands": {3: BandLimits(max_requests=1, max_bytes=1, ttl_s=0.0)}}, "flowControl.bands[3].ttl"),
    ],
)
def test_bad_settings_name_the_field(kw: dict[str, Any], path: str) -> None:
    with pytest.raises(FlowControlError, match=path.replace("[", r"\[").replace("]", r"\]")):
        _settings(**kw)


def test_duplicate_request_id_is_refused() -> None:
    fc = FlowController(_settings())
    _offer(fc, "a")
    with pytest.raises(FlowControlError, match="already queued"):
        _offer(fc, "a")


def _flow_doc(flow: dict[str, Any]) -> dict[str, Any]:
    doc = base_document()
    doc["spec"]["extensions"] = {"flowControl": flow}
    return doc


def test_extension_settings_are_read_with_defaults() -> None:
    raw = {
        "maxRequests": 9,
        "fairness": "global",
        "ordering": "edf",
        "pollInterval": "5ms",
        "bands": [{"priority": 3, "ttl": "2s"}],
        "objectives": [{"name": "chat", "priority": 3}],
    }
    assert validate_document(_flow_doc(raw)) == []
    s = FlowControlSettings.from_extension(raw)
    assert (s.max_requests, s.max_bytes, s.fairness, s.ordering) == (
        9,
        128 << 20,
        Fairness.GLOBAL,
        Ordering.EDF,
    )
    assert s.poll_interval_s == pytest.approx(0.005)
    assert s.bands == {3: BandLimits(max_requests=256, max_bytes=64 << 20, ttl_s=2.0)}
    assert s.objectives == {"chat": 3}
    assert FlowControlSettings.from_extension({}).bands == FlowControlSettings().bands
    assert (s.tenant_labels, s.max_tenant_labels) == (frozenset(), 32)


def test_tenant_label_settings_are_read() -> None:
    raw = {"metrics": {"tenantLabels": ["acme", "globex"], "maxTenantLabels": 5}}
    assert validate_document(_flow_doc(raw)) == []
    s = FlowControlSettings.from_extension(raw)
    assert (s.tenant_labels, s.max_tenant_labels) == (frozenset({"acme", "globex"}), 5)


def test_schema_rejects_bad_flow_control_naming_the_field() -> None:
    problems = validate_document(_flow_doc({"ordering": "lifo", "bands": [{"priority": 1, "ttl": "soon"}]}))
    paths = {p.path for p in problems}
    assert {"spec.extensions.flowControl.ordering", "spec.extensions.flowControl.bands[0].ttl"} <= paths


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"bands": [{"priority": 1}, {"priority": 1}]}, "spec.extensions.flowControl.bands[1].priority"),
        (
            {"objectives": [{"name": "a", "priority": 1}, {"name": "a", "priority": 2}]},
            "spec.extensions.flowControl.objectives[1].name",
        ),
    ],
)
def test_duplicates_are_refused_naming_the_entry(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(FlowControlError, match=path.replace("[", r"\[").replace("]", r"\]")):
        FlowControlSettings.from_extension(raw)


@pytest.mark.parametrize(
    ("objective", "model", "tenant", "expected"),
    [
        ("chat", "batch-model", "vip", 5),  # a known objective header wins
        (None, "batch-model", "vip", -3),  # else the model's objective
        ("nope", "batch-model", None, -3),  # an unknown objective counts as absent
        (None, "other", "vip", 2),  # else the tenant's
        (None, "other", "someone", STANDARD),
        ("nope", "other", "someone", STANDARD),  # an unknown objective and nothing else: Standard
    ],
)
def test_priority_by_objective_then_model_then_tenant(
    objective: str | None, model: str, tenant: str | None, expected: int
) -> None:
    raw = {
        "objectives": [
            {"name": "chat", "priority": 5},
            {"name": "batch", "priority": -3, "models": ["batch-model"]},
            {"name": "gold", "priority": 2, "tenants": ["vip"]},
        ]
    }
    assert validate_document(_flow_doc(raw)) == []
    s = FlowControlSettings.from_extension(raw)
    got = priority_for(
        objective,
        s.objectives,
        model=model,
        tenant=tenant,
        by_model=s.model_priorities,
        by_tenant=s.tenant_priorities,
    )
    assert got == expected


def test_a_model_in_two_objectives_is_refused() -> None:
    raw = {
        "objectives": [
            {"name": "a", "priority": 1, "models": ["m"]},
            {"name": "b", "priority": 2, "models": ["m"]},
        ]
    }
    with pytest.raises(FlowControlError, match=r"objectives\[1\]\.models\[0\]: 'm' already has"):
        FlowControlSettings.from_extension(raw)


def _headroom_settings() -> FlowControlSettings:
    return _settings(
        bands={
            CRITICAL: BIG,
            STANDARD: BandLimits(max_requests=100, max_bytes=1 << 20, ttl_s=30.0, dispatch_below=0.9),
            SHEDDABLE: BandLimits(max_requests=100, max_bytes=1 << 20, ttl_s=30.0, dispatch_below=0.75),
        }
    )


@pytest.mark.parametrize(
    ("priority", "utilisation", "admitted"),
    [
        (CRITICAL, 0.0, True),
        (CRITICAL, 0.99, True),  # Critical may use the whole pool
        (CRITICAL, 1.0, False),  # but not a saturated one
        (STANDARD, 0.89, True),
        (STANDARD, 0.9, False),  # the top tenth is kept for Critical
        (SHEDDABLE, 0.74, True),
        (SHEDDABLE, 0.75, False),
        (SHEDDABLE, 0.8, False),
        (-7, 0.74, True),  # an unnamed priority uses the nearest band's threshold (Sheddable)
        (-7, 0.8, False),
    ],
)
def test_band_headroom_admits_below_its_threshold(priority: int, utilisation: float, admitted: bool) -> None:
    assert FlowController(_headroom_settings()).admits(priority, utilisation) is admitted


def test_peek_with_utilisation_holds_lower_bands_back_and_never_lets_them_overtake() -> None:
    fc = FlowController(_headroom_settings())
    _offer(fc, "s", SHEDDABLE)
    _offer(fc, "n", STANDARD)
    assert fc.peek(0.0, utilisation=0.95) is None  # Standard waits while the pool is past 0.9
    item = fc.peek(0.0, utilisation=0.8)
    assert item is not None
    assert item.request_id == "n"
    fc.take(item, 0.0)
    assert fc.peek(0.0, utilisation=0.8) is None  # Sheddable still holds back at 0.8
    item = fc.peek(0.0, utilisation=0.5)
    assert item is not None
    assert item.request_id == "s"
    _offer(fc, "c", CRITICAL)
    item = fc.peek(0.0, utilisation=0.97)
    assert item is not None
    assert item.request_id == "c"
    assert fc.peek(0.0) is item  # without a utilisation the headroom rule is not applied


def test_queued_at_or_above_counts_the_work_an_arrival_must_not_overtake() -> None:
    fc = FlowController(_headroom_settings())
    _offer(fc, "s", SHEDDABLE)
    _offer(fc, "n1", STANDARD)
    _offer(fc, "n2", STANDARD)
    assert (fc.queued_at_or_above(CRITICAL), fc.queued_at_or_above(STANDARD)) == (0, 2)
    assert fc.queued_at_or_above(SHEDDABLE) == 3


def test_default_bands_keep_a_tenth_of_the_pool_for_critical() -> None:
    fc = FlowController(FlowControlSettings())
    assert fc.admits(CRITICAL, 0.95)
    assert not fc.admits(STANDARD, 0.9)
    assert not fc.admits(SHEDDABLE, 0.9)
    assert fc.admits(SHEDDABLE, 0.85)


def test_listed_bands_default_to_no_headroom_and_read_dispatch_below() -> None:
    raw = {"bands": [{"priority": 1}, {"priority": 0, "dispatchBelow": 0.8}]}
    assert validate_document(_flow_doc(raw)) == []
    s = FlowControlSettings.from_extension(raw)
    assert (s.bands[1].dispatch_below, s.bands[0].dispatch_below) == (1.0, 0.8)


@pytest.mark.parametrize("bad", [0, 0.005, 1.5, -0.1])
def test_schema_rejects_dispatch_below_outside_the_unit_interval(bad: float) -> None:
    problems = validate_document(_flow_doc({"bands": [{"priority": 0, "dispatchBelow": bad}]}))
    assert "spec.extensions.flowControl.bands[0].dispatchBelow" in {p.path for p in problems}


def test_a_lower_band_with_more_room_than_a_higher_one_is_refused_naming_the_entry() -> None:
    raw = {"bands": [{"priority": 0, "dispatchBelow": 0.9}, {"priority": 1, "dispatchBelow": 0.8}]}
    with pytest.raises(FlowControlError, match=r"spec\.extensions\.flowControl\.bands\[1\]\.dispatchBelow"):
        FlowControlSettings.from_extension(raw)
    with pytest.raises(FlowControlError, match=r"flowControl\.bands\[0\]\.dispatchBelow"):
        _settings(
            bands={
                CRITICAL: BandLimits(max_requests=1, max_bytes=1, ttl_s=1.0, dispatch_below=0.5),
                STANDARD: BandLimits(max_requests=1, max_bytes=1, ttl_s=1.0, dispatch_below=0.6),
            }
        )
    with pytest.raises(FlowControlError, match=r"flowControl\.bands\[0\]\.dispatchBelow must be in"):
        _settings(bands={STANDARD: BandLimits(max_requests=1, max_bytes=1, ttl_s=1.0, dispatch_below=0.0)})


def _queue_place_settings() -> FlowControlSettings:
    return _settings(
        bands={
            CRITICAL: BIG,
            STANDARD: BandLimits(
                max_requests=100, max_bytes=1 << 20, ttl_s=30.0, max_endpoint_queue=2, keep_slots=1
            ),
            SHEDDABLE: BandLimits(
                max_requests=100, max_bytes=1 << 20, ttl_s=30.0, max_endpoint_queue=1, keep_slots=2
            ),
        }
    )


@pytest.mark.parametrize(
    ("priority", "waiting", "occupancy", "batch", "admitted"),
    [
        (CRITICAL, 500, 508, 8, True),  # no per-endpoint limit: saturation alone stops Critical
        (STANDARD, 1, 1, None, True),
        (STANDARD, 2, 10, None, False),  # two waiting: the next queue place is kept for Critical
        (STANDARD, 0, 6, 8, True),
        (STANDARD, 0, 7, 8, False),  # one of the 8 batch slots stays free for Critical
        (STANDARD, 0, 7, None, True),  # batch size unknown: the slot rule does not apply
        (SHEDDABLE, 0, 5, 8, True),
        (SHEDDABLE, 0, 6, 8, False),  # Sheddable keeps two
        (SHEDDABLE, 1, 1, None, False),
        (-5, 0, 6, 8, False),  # an unnamed priority uses the nearest band's limits (Sheddable)
        (3, 99, 200, 8, True),  # above Critical: Critical's (none)
    ],
)
def test_endpoint_places_admit_below_the_band_limits(
    priority: int, waiting: int, occupancy: int, batch: int | None, admitted: bool
) -> None:
    load = EndpointLoad(waiting=waiting, occupancy=occupancy, batch=batch)
    assert FlowController(_queue_place_settings()).admits_to(priority, load) is admitted


def test_default_bands_keep_a_queue_place_and_a_batch_slot_at_each_endpoint_for_critical() -> None:
    fc = FlowController(FlowControlSettings())
    assert fc.admits_to(CRITICAL, EndpointLoad(waiting=40, occupancy=48, batch=8))
    for band in (STANDARD, SHEDDABLE):
        assert [fc.admits_to(band, EndpointLoad(waiting=n, occupancy=n)) for n in (0, 1, 2)] == [
            True,
            True,
            False,
        ]
        assert [fc.admits_to(band, EndpointLoad(waiting=0, occupancy=n, batch=8)) for n in (6, 7)] == [
            True,
            False,
        ]


@pytest.mark.parametrize(
    ("scrapes", "learned"),
    [
        ([(0, 5)], None),  # no queue: the batch is at least 5, not 5
        ([(None, 5)], None),
        ([(3, 8)], None),  # one queued scrape may be a burst between two engine steps
        ([(3, 8), (2, 8)], 8),  # the queue lasted a scrape interval: the batch is full at 8
        ([(19, 1), (0, 20)], None),  # a burst arriving between steps, admitted at the next one
        ([(19, 1), (0, 20), (3, 8)], None),  # queued scrapes must be consecutive
        ([(19, 1), (12, 8)], 8),  # two queued scrapes: the larger running count
        ([(3, 8), (2, 8), (0, 3)], 8),  # remembered
        ([(3, 8), (2, 8), (2, 6), (2, 6)], 8),  # a smaller full batch (long sequences) keeps it
        ([(3, 8), (2, 8), (0, 12)], 12),  # running more than the learned batch raises it
        ([(2, 0), (2, 0)], None),
    ],
)
def test_batch_size_is_learned_from_a_queue_that_lasts(
    scrapes: list[tuple[int | None, int]], learned: int | None
) -> None:
    estimate = BatchEstimate()
    for waiting, running in scrapes:
        estimate = estimate.after_scrape(waiting=waiting, running=running)
    assert estimate.batch == learned


@pytest.mark.parametrize(
    ("batch", "occupancy", "admitted"), [(1, 0, True), (1, 1, False), (2, 0, True), (2, 1, False)]
)
def test_kept_slots_never_take_the_whole_batch(batch: int, occupancy: int, admitted: bool) -> None:
    # However small the batch (or a mistaken estimate of it), every band may use one slot: with the
    # whole batch kept, a lower band would wait at an idle endpoint until its TTL passed.
    fc = FlowController(FlowControlSettings())
    assert fc.admits_to(STANDARD, EndpointLoad(waiting=0, occupancy=occupancy, batch=batch)) is admitted


def _erlang_b(kept: int, offered: float) -> float:
    """Erlang's B formula written out: (a^k / k!) / sum_i (a^i / i!)."""
    terms = [offered**i / math.factorial(i) for i in range(kept + 1)]
    return terms[-1] / sum(terms)


@pytest.mark.parametrize(
    ("kept", "offered", "miss"),
    [
        (0, 2.4, 1.0),  # nothing kept: every higher-band arrival waits for a completion
        (1, 2.4, 2.4 / 3.4),
        (4, 2.4, _erlang_b(4, 2.4)),
        (7, 2.4, _erlang_b(7, 2.4)),
        (60, 40.0, _erlang_b(60, 40.0)),  # the recursion stays exact where factorials are large
        (1, 0.0, 0.0),  # no higher-band traffic
    ],
)
def test_slot_miss_is_erlangs_loss_chance_for_the_kept_slots(kept: int, offered: float, miss: float) -> None:
    assert slot_miss(kept, offered) == pytest.approx(miss)


def test_kept_slots_come_back_only_with_the_higher_bands_own_completions() -> None:
    # Critical keeps 2.4 slots of an 8-sequence pod busy on average: with half the batch kept, a
    # Critical arrival still finds them all busy 14 % of the time (the live benchmark's Critical
    # requests found the batch full), where a chain in which every completion of the pod freed a
    # kept slot put it under 1 %.
    assert slot_miss(4, 2.4) == pytest.approx(0.14, abs=0.01)
    assert [slot_miss(k, 2.4) for k in range(9)] == sorted(
        (slot_miss(k, 2.4) for k in range(9)), reverse=True
    )


@pytest.mark.parametrize(
    ("higher_rate", "completion_rate", "pool_rate", "batch", "wait_s", "most", "kept"),
    [
        # An 8-sequence pod finishing 37.7 requests/s, Critical at 30 % of that (2.4 slots busy):
        # a 25 ms tail under 1 % needs 6 kept slots, 15 ms needs 7, 100 ms needs 3.
        (11.4, 37.7, 37.7, 8, 0.025, 7, 6),
        (11.4, 37.7, 37.7, 8, 0.015, 7, 7),
        (11.4, 37.7, 37.7, 8, 0.100, 7, 3),
        (11.4, 37.7, 37.7, 8, 0.025, 4, 4),  # capped
        (183.0, 610.0, 610.0, 128, 0.015, 64, 0),  # a 128-sequence pod completes so often none is needed
        (22.8, 37.7, 75.4, 8, 0.025, 7, 6),  # two pods: each sees half the higher-band arrivals
        (0.0, 37.7, 37.7, 8, 0.025, 4, 0),  # no higher-band traffic
        (11.4, 0.0, 0.0, 8, 0.025, 4, 0),  # no completion measured yet
    ],
)
def test_slots_for_wait_from_the_higher_bands_arrival_rate_and_the_completion_rate(
    higher_rate: float,
    completion_rate: float,
    pool_rate: float,
    batch: int,
    wait_s: float,
    most: int,
    kept: int,
) -> None:
    got = slots_for_wait(
        higher_rate=higher_rate,
        completion_rate=completion_rate,
        pool_completion_rate=pool_rate,
        batch=batch,
        wait_s=wait_s,
        most=most,
    )
    assert got == kept


@pytest.mark.parametrize(
    ("share", "batch", "most"),
    [(0.5, 8, 4), (0.75, 8, 6), (0.875, 8, 7), (1.0, 8, 7), (0.0, 8, 0), (0.5, 1, 0), (0.5, 128, 64)],
)
def test_max_kept_share_caps_what_slot_wait_keeps_and_never_the_whole_batch(
    share: float, batch: int, most: int
) -> None:
    settings = FlowControlSettings(max_kept_share=share)
    assert settings.most_kept(batch) == most
    fc = FlowController(settings)
    for i in range(114):  # Critical at 11.4 requests/s
        fc.arrived(CRITICAL, i / 11.4)
    rate = 37.7 * batch / 8
    load = EndpointLoad(waiting=0, occupancy=0, batch=batch, completion_rate=rate, pool_completion_rate=rate)
    assert fc.slots_kept(STANDARD, load, now=10.0) <= max(most, 1)  # keepSlots 1 stays


def test_max_kept_share_is_read_from_the_extension_and_refused_outside_zero_to_one() -> None:
    assert FlowControlSettings().max_kept_share == 0.5
    assert validate_document(_flow_doc({"maxKeptShare": 0.75})) == []
    assert FlowControlSettings.from_extension({"maxKeptShare": 0.75}).max_kept_share == 0.75
    for bad in (1.5, -0.1):
        problems = validate_document(_flow_doc({"maxKeptShare": bad}))
        assert "spec.extensions.flowControl.maxKeptShare" in {p.path for p in problems}
    with pytest.raises(FlowControlError, match=r"flowControl\.maxKeptShare must be between 0 and 1, got 1.5"):
        FlowControlSettings(max_kept_share=1.5)


def test_default_standard_keeps_the_slots_measured_critical_traffic_needs_and_sheddable_at_least_those() -> (
    None
):
    fc = FlowController(FlowControlSettings())
    pod = functools.partial(EndpointLoad, batch=8, completion_rate=37.7, pool_completion_rate=37.7)
    assert fc.slots_kept(STANDARD, pod(waiting=0, occupancy=4), now=0.0) == 1  # no Critical yet
    for i in range(114):  # Critical at 11.4 requests/s over the last 10 s
        fc.arrived(CRITICAL, i / 11.4)
    now = 114 / 11.4
    assert fc.arrival_rate_above(STANDARD, now) == pytest.approx(11.4, rel=0.02)
    # The default 15 ms tail at 30 % of the pod's completions needs half the batch (the cap).
    assert fc.slots_kept(STANDARD, pod(waiting=0, occupancy=4), now=now) == 4
    assert fc.slots_kept(SHEDDABLE, pod(waiting=0, occupancy=4), now=now) == 4
    assert fc.slots_kept(CRITICAL, pod(waiting=0, occupancy=4), now=now) == 0
    assert [fc.admits_to(STANDARD, pod(waiting=0, occupancy=n), now=now) for n in (3, 4)] == [
        True,
        False,
    ]
    # A pod that completes four times as fast (shorter sequences) gets its kept slots back sooner.
    faster = functools.partial(pod, completion_rate=150.0, pool_completion_rate=150.0)
    assert fc.slots_kept(STANDARD, faster(waiting=0, occupancy=4), now=now) == 3
    unmeasured = EndpointLoad(waiting=0, occupancy=4, batch=8)  # no completion rates yet
    assert fc.slots_kept(STANDARD, unmeasured, now=now) == 4  # the most it may: the safe side
    assert not fc.admits_to(STANDARD, unmeasured, now=now)
    assert fc.slots_kept(STANDARD, unmeasured, now=now + 11) == 1  # no Critical traffic: keepSlots
    assert fc.slots_kept(STANDARD, pod(waiting=0, occupancy=4), now=now + 11) == 1  # gone quiet
    assert fc.arrival_rate_above(CRITICAL, now) == 0.0


@pytest.mark.parametrize(
    ("critical_arrivals", "batch", "kept"),
    [
        (0, 8, 1),  # no Critical traffic seen: keepSlots alone
        (1, 8, 4),  # Critical traffic, no completion rate: half the batch
        (1, 2, 1),  # half of a batch of 2 is keepSlots already
        (5, 128, 64),
    ],
)
def test_before_the_completion_rate_is_known_slot_wait_keeps_the_most_it_may_once_higher_bands_arrive(
    critical_arrivals: int, batch: int, kept: int
) -> None:
    fc = FlowController(FlowControlSettings())
    for i in range(critical_arrivals):
        fc.arrived(CRITICAL, i * 0.01)
    load = EndpointLoad(waiting=0, occupancy=0, batch=batch)
    assert fc.slots_kept(STANDARD, load, now=0.1) == kept
    assert fc.slots_kept(SHEDDABLE, load, now=0.1) == kept  # at least what Standard keeps
    assert fc.slots_kept(CRITICAL, load, now=0.1) == 0
    fixed = dataclasses.replace(
        FlowControlSettings(),
        bands={p: dataclasses.replace(b, slot_wait_s=None) for p, b in FlowControlSettings().bands.items()},
    )
    fixed_fc = FlowController(fixed)
    fixed_fc.arrived(CRITICAL, 0.0)
    assert fixed_fc.slots_kept(STANDARD, load, now=0.1) == 1  # without slotWait: keepSlots only


def test_slot_wait_is_read_from_the_extension_and_must_be_positive() -> None:
    raw = {"bands": [{"priority": 1}, {"priority": 0, "slotWait": "40ms"}]}
    assert validate_document(_flow_doc(raw)) == []
    s = FlowControlSettings.from_extension(raw)
    assert s.bands[1].slot_wait_s is None
    assert s.bands[0].slot_wait_s == pytest.approx(0.04)
    assert FlowControlSettings().bands[STANDARD].slot_wait_s == pytest.approx(0.015)
    assert FlowControlSettings().bands[SHEDDABLE].slot_wait_s is None
    problems = validate_document(_flow_doc({"bands": [{"priority": 0, "slotWait": "soon"}]}))
    assert "spec.extensions.flowControl.bands[0].slotWait" in {p.path for p in problems}
    with pytest.raises(FlowControlError, match=r"bands\[0\]\.slotWait must be positive"):
        BandLimits(max_requests=1, max_bytes=1, ttl_s=1.0, slot_wait_s=0.0).check("bands[0]")


def test_per_endpoint_limits_are_read_from_the_extension_and_absent_means_none() -> None:
    raw = {"bands": [{"priority": 1}, {"priority": 0, "maxEndpointQueue": 3, "keepSlots": 2}]}
    assert validate_document(_flow_doc(raw)) == []
    s = FlowControlSettings.from_extension(raw)
    assert (s.bands[1].max_endpoint_queue, s.bands[0].max_endpoint_queue) == (None, 3)
    assert (s.bands[1].keep_slots, s.bands[0].keep_slots) == (0, 2)


@pytest.mark.parametrize(("field", "bad"), [("maxEndpointQueue", 0), ("keepSlots", -1)])
def test_schema_rejects_per_endpoint_limits_out_of_range(field: str, bad: int) -> None:
    problems = validate_document(_flow_doc({"bands": [{"priority": 0, field: bad}]}))
    assert f"spec.extensions.flowControl.bands[0].{field}" in {p.path for p in problems}


def test_a_lower_band_keeping_fewer_places_than_a_higher_one_is_refused_naming_the_entry() -> None:
    raw = {"bands": [{"priority": 0}, {"priority": 1, "maxEndpointQueue": 2}]}  # 0 has no limit
    with pytest.raises(
        FlowControlError, match=r"spec\.extensions\.flowControl\.bands\[1\]\.maxEndpointQueue: 2 is below"
    ):
        FlowControlSettings.from_extension(raw)
    raw = {"bands": [{"priority": 0, "keepSlots": 1}, {"priority": 1, "keepSlots": 2}]}
    with pytest.raises(FlowControlError, match=r"flowControl\.bands\[1\]\.keepSlots: 2 is above"):
        FlowControlSettings.from_extension(raw)
    small = functools.partial(BandLimits, max_requests=1, max_bytes=1, ttl_s=1.0)
    with pytest.raises(FlowControlError, match=r"flowControl\.bands\[-1\]\.maxEndpointQueue \(3\) is above"):
        _settings(
            bands={
                STANDARD: small(max_endpoint_queue=2),
                SHEDDABLE: small(max_endpoint_queue=3),
            }
        )
    with pytest.raises(FlowControlError, match=r"flowControl\.bands\[-1\]\.keepSlots \(0\) is below"):
        _settings(bands={STANDARD: small(keep_slots=1), SHEDDABLE: small()})
    with pytest.raises(FlowControlError, match=r"bands\[0\]\.maxEndpointQueue must be at least 1"):
        _settings(bands={STANDARD: small(max_endpoint_queue=0)})
    with pytest.raises(FlowControlError, match=r"bands\[0\]\.keepSlots must be at least 0"):
        _settings(bands={STANDARD: small(keep_slots=-1)})


@pytest.mark.parametrize(
    ("scrapes", "prior", "size"),
    [
        ([], None, None),  # nothing known, nothing assumed: no slot is kept
        ([], 8, 8),  # the configured max_num_seqs, before the first scrape
        ([(0, 5)], 8, 8),  # 5 running says nothing against the prior
        ([(0, 10)], 8, 10),  # a pod seen running 10 can run 10: a prior of 8 is too small
        ([(1, 6), (1, 6)], 8, 6),  # seen full at 6 (a queue in two scrapes): the scrapes win
        ([(1, 6), (1, 6)], None, 6),
        ([(1, 6), (1, 6), (0, 9)], 8, 9),  # the learned batch is raised as before
    ],
)
def test_the_assumed_batch_covers_the_time_before_the_endpoint_is_seen_full(
    scrapes: list[tuple[int, int]], prior: int | None, size: int | None
) -> None:
    estimate = BatchEstimate()
    for waiting, running in scrapes:
        estimate = estimate.after_scrape(waiting=waiting, running=running)
    assert estimate.size(prior) == size


def test_assumed_batch_is_read_from_the_extension_and_must_be_positive() -> None:
    assert FlowControlSettings().assumed_batch is None
    assert validate_document(_flow_doc({"assumedBatch": 8})) == []
    assert FlowControlSettings.from_extension({"assumedBatch": 8}).assumed_batch == 8
    problems = validate_document(_flow_doc({"assumedBatch": 0}))
    assert "spec.extensions.flowControl.assumedBatch" in {p.path for p in problems}
    with pytest.raises(FlowControlError, match=r"flowControl\.assumedBatch must be at least 1, got 0"):
        FlowControlSettings(assumed_batch=0)


@pytest.mark.parametrize(
    ("steps", "now", "rate", "batch", "capacity"),
    [
        # Half the batch busy for 10 s while 20 completed per second: each slot completes 5/s, so
        # the full batch of 8 would complete 40/s.
        ([(0.0, 4), (10.0, 4)], 10.0, 20.0, 8, 40.0),
        ([(0.0, 8)], 10.0, 40.0, 8, 40.0),  # full all along: the counted rate is the capacity
        ([(0.0, 0), (5.0, 4)], 15.0, 20.0, 8, 40.0),  # the window starts with the first busy slot
        ([(0.0, 8), (30.0, 2)], 60.0, 10.0, 8, 40.0),  # only the last 30 s count
        ([(0.0, 8), (20.0, 2)], 40.0, 20.0, 8, 40.0),  # a step reaching back past the window is cut
        ([(0.0, 2), (5.0, 6), (10.0, 4)], 10.0, 20.0, 8, 40.0),  # mean busy 4 over the steps
        ([(0.0, 1)], 0.5, 10.0, 8, 10.0),  # under a busy slot-second: the counted rate as it is
        ([(0.0, 4)], 10.0, None, 8, None),  # nothing completed yet
        ([(0.0, 4)], 10.0, 20.0, None, 20.0),  # batch unknown
        ([(0.0, 12)], 10.0, 40.0, 8, 40.0),  # occupancy past the batch: never below the count
    ],
)
def test_capacity_is_the_counted_rate_over_the_time_averaged_busy_slots(
    steps: list[tuple[float, int]], now: float, rate: float | None, batch: int | None, capacity: float | None
) -> None:
    estimate = CapacityEstimate(window_s=30.0)
    for at, busy in steps:
        estimate.observe(at, busy)
    got = estimate.capacity(now, completion_rate=rate, batch=batch)
    assert got == (None if capacity is None else pytest.approx(capacity))


def test_thirty_seconds_of_observations_at_ten_thousand_a_second_keep_the_capacity_estimate_small() -> None:
    """Flow control observes every endpoint's busy slots on every arrival: one entry per step held
    300k entries (29 MB) per endpoint for the 30 s window at 10k requests/s until session s42. The
    busy slot-seconds are summed per slot of the window, and the estimate stays that of the steps."""
    estimate = CapacityEstimate(window_s=30.0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(300_000):
            estimate.observe(i / 10_000, 4 + i % 3)  # 4, 5, 6 busy in turn: 5 on average
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 64 * 1024, held
    assert estimate.mean_busy(30.0) == pytest.approx(5.0, rel=1e-3)
    assert estimate.capacity(30.0, completion_rate=20.0, batch=8) == pytest.approx(32.0, rel=1e-3)
    # Ten seconds later, with 8 busy meanwhile, the window holds 20 s of 5 and 10 s of 8.
    estimate.observe(30.0, 8)
    assert estimate.mean_busy(40.0) == pytest.approx(6.0, rel=0.01)


def test_capacity_keeps_fewer_slots_than_the_rate_of_a_held_back_pod() -> None:
    # An 8-sequence pod held at half its batch completes 18.85/s; counted like that, Critical at
    # 11.4/s looks like 60 % of the pod and the cap is kept. Its capacity is 37.7/s (30 %).
    estimate = CapacityEstimate()
    estimate.observe(0.0, 4)
    capacity = estimate.capacity(10.0, completion_rate=18.85, batch=8)
    assert capacity is not None
    assert capacity == pytest.approx(37.7)
    kept = [
        slots_for_wait(
            higher_rate=11.4, completion_rate=r, pool_completion_rate=r, batch=8, wait_s=0.025, most=7
        )
        for r in (18.85, capacity)
    ]
    assert kept == [7, 6]


@pytest.mark.parametrize(
    ("waiting", "occupancy", "batch", "rate", "wait"),
    [
        (0, 6, 8, 40.0, 0.0),  # a free slot: no wait
        (0, 8, 8, 40.0, 0.025),  # full: the next completion, at 40/s
        (2, 10, 8, 40.0, 0.075),  # two queued ahead, then the next completion
        (0, 8, 8, None, math.inf),  # full, completion rate unknown
        (3, 3, None, 20.0, 0.2),  # batch unknown: the scraped queue stands for those ahead
        (0, 3, None, 20.0, 0.0),
    ],
)
def test_predicted_wait_is_the_requests_ahead_at_the_completion_rate(
    waiting: int, occupancy: int, batch: int | None, rate: float | None, wait: float
) -> None:
    load = EndpointLoad(waiting=waiting, occupancy=occupancy, batch=batch, completion_rate=rate)
    assert predicted_wait_s(load) == pytest.approx(wait)


def _at(occupancy: int, rate: float | None = 40.0) -> EndpointLoad:
    return EndpointLoad(waiting=max(0, occupancy - 8), occupancy=occupancy, batch=8, completion_rate=rate)


@pytest.mark.parametrize(
    ("loads", "moved_to"),
    [
        ({"a": _at(8), "b": _at(5)}, "b"),  # the pick is full, a fallback has a free slot
        ({"a": _at(5), "b": _at(2)}, None),  # the pick has a free slot: the scheduler's choice stands
        ({"a": _at(10), "b": _at(9), "c": _at(9)}, "b"),  # shorter wait; on a tie the better ranked
        ({"a": _at(9), "b": _at(9, rate=80.0)}, "b"),  # the same queue at a faster endpoint
        ({"a": _at(8, rate=None), "b": _at(9, rate=None)}, None),  # rates unknown: fewer ahead wins
        ({"a": _at(9, rate=None), "b": _at(8, rate=None)}, "b"),
        ({"b": _at(5)}, None),  # the pick has no load (no fresh scrape): nothing to compare
        ({"a": _at(8)}, None),  # no other candidate with a load
    ],
)
def test_least_wait_moves_a_pick_only_to_a_strictly_shorter_predicted_wait(
    loads: dict[str, EndpointLoad], moved_to: str | None
) -> None:
    assert least_wait(("a", "b", "c"), loads) == moved_to


def test_only_the_top_band_is_steered() -> None:
    fc = FlowController(FlowControlSettings())
    assert [fc.steers(p) for p in (CRITICAL, 5, STANDARD, SHEDDABLE)] == [True, True, False, False]


def test_ten_seconds_at_ten_thousand_a_second_keep_the_rate_records_small_and_the_estimates() -> None:
    """The dispatch and arrival records behind ``Retry-After`` and ``slotWait`` count per band in
    short time slots, not one timestamp per request: 10 s at 10k requests/s (every request sent
    straight, every one counted as an arrival) held 200k timestamps (about 5 MB) until session s42.
    The estimates stay those of the exact record."""
    fc = FlowController(_settings())
    for i in range(40):
        _offer(fc, f"q{i}", STANDARD)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100_000):
            now = i / 10_000
            fc.arrived(CRITICAL, now)
            fc.dispatched(now, CRITICAL if i % 2 else STANDARD)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 256 * 1024, held
    now = 10.0
    assert fc.retry_after_s(now, priority=CRITICAL) == 1  # 10k/s of turnover, nothing ahead
    assert fc.retry_after_s(now, priority=STANDARD, max_s=1000) == 1  # 41 at 5k/s
    assert fc.arrival_rate_above(STANDARD, now) == pytest.approx(10_000, rel=0.01)
    assert fc.retry_after_s(now + 9.5, priority=STANDARD) == 1  # the last half second still counts
    assert fc.retry_after_s(now + 10.5, priority=STANDARD) == 60  # all left the window


def _pools(n: int, max_bytes: int = 100) -> list[FlowController]:
    shared = QueueBytes()
    settings = _settings(max_bytes=max_bytes)
    return [FlowController(settings, shared_bytes=shared) for _ in range(n)]


def test_a_flooded_pool_gives_up_its_newest_lowest_band_request_to_a_pool_within_its_share() -> None:
    """One pool flooded with large prompts held the whole shared ``maxBytes`` and every other
    pool's arrivals were refused ``queue_full`` (until session s48)."""
    a, b = _pools(2)
    for i in range(5):
        assert _offer(a, f"a{i}", CRITICAL, size_bytes=10).queued
    for i in range(5):
        assert _offer(a, f"s{i}", SHEDDABLE, size_bytes=10).queued
    assert a.shared_bytes.held == 100
    offer = _offer(b, "b0", SHEDDABLE, size_bytes=15)
    assert offer.queued
    assert offer.displaced == ()
    gone = [(other is a, s.request.request_id, s.reason) for other, s in offer.displaced_elsewhere]
    assert gone == [(True, "s4", ShedReason.POOL_SHARE), (True, "s3", ShedReason.POOL_SHARE)]
    assert (a.queued_bytes, b.queued_bytes, a.shared_bytes.held) == (80, 15, 95)
    # b fills up to its share (50) at a's expense; past it, b is refused as before
    for i in range(1, 4):
        assert _offer(b, f"b{i}", STANDARD, size_bytes=10).queued
    assert (a.queued_bytes, b.queued_bytes) == (50, 45)
    refused = _offer(b, "b4", SHEDDABLE, size_bytes=10)  # nothing lower of its own to displace
    assert (refused.queued, refused.reason, refused.displaced_elsewhere) == (False, ShedReason.QUEUE_FULL, ())
    assert refused.wait_bytes == 5
    # and a, now within its share, takes nothing back from b
    assert not _offer(a, "a9", CRITICAL, size_bytes=10).queued


def _reload(pools: list[FlowController], max_bytes: int, now: float) -> list[tuple[FlowController, Shed]]:
    """Apply a lowered ``maxBytes`` as :meth:`FlowGates.configure` does: each queue, then the total."""
    settings = _settings(max_bytes=max_bytes)
    shed = [(fc, s) for fc in pools for s in fc.reconfigure(settings, engine_priority=None, now=now)]
    return shed + list(pools[0].shared_bytes.fit(max_bytes))


def _within_share_lost(
    held: dict[int, int], shed: list[tuple[FlowController, Shed]], max_bytes: int
) -> list[str]:
    """The requests in ``shed`` (in order) taken from a pool within its share of ``max_bytes`` while
    another pool held more than its share; ``held``: each pool's bytes before (by ``id``)."""
    wrong: list[str] = []
    for fc, s in shed:
        share = max_bytes / sum(1 for b in held.values() if b > 0)
        if held[id(fc)] <= share and any(b > share for b in held.values()):
            wrong.append(s.request.request_id)
        held[id(fc)] -= s.request.size_bytes
    return wrong


def test_a_lowered_max_bytes_sheds_the_pool_most_over_its_share_first() -> None:
    """A reload lowering ``maxBytes`` shed the lowest band newest first across every pool: two light
    pools, each holding its share (20 of 60), lost all their requests while a flooded pool kept
    three times its own (until session s49)."""
    a, b, flood = pools = _pools(3)
    for i in range(2):
        assert _offer(a, f"a{i}", SHEDDABLE, size_bytes=10).queued
        assert _offer(b, f"b{i}", SHEDDABLE, size_bytes=10).queued
    for i in range(6):
        assert _offer(flood, f"f{i}", CRITICAL if i < 3 else STANDARD, size_bytes=10).queued
    held = {id(p): p.queued_bytes for p in pools}
    shed = _reload(pools, 60, now=1.0)
    # the flood's Standard band, newest first, then its Critical one; a and b untouched
    assert [(fc is flood, s.request.request_id, s.reason) for fc, s in shed] == [
        (True, rid, ShedReason.QUEUE_FULL) for rid in ["f5", "f4", "f3", "f2"]
    ]
    assert (a.queued_bytes, b.queued_bytes, flood.queued_bytes, a.shared_bytes.held) == (20, 20, 20, 60)
    assert _within_share_lost(held, shed, 60) == []


@pytest.mark.parametrize(("b_priority", "expected"), [(STANDARD, ["a0"]), (SHEDDABLE, ["b1"])])
def test_a_lowered_max_bytes_sheds_pools_holding_as_much_lowest_band_first(
    b_priority: int, expected: list[str]
) -> None:
    """Between pools holding as many bytes: the lower band's request goes first, then the later
    arrival (b's requests arrived after a's)."""
    a, b = _pools(2)
    assert _offer(a, "a0", SHEDDABLE, size_bytes=20).queued
    assert _offer(b, "b0", b_priority, size_bytes=10, now=1.0).queued
    assert _offer(b, "b1", b_priority, size_bytes=10, now=1.0).queued
    shed = _reload([a, b], 30, now=1.0)
    assert [s.request.request_id for _, s in shed] == expected


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from(["offer", "offer", "offer", "take", "cancel", "reload"]),
            st.sampled_from([SHEDDABLE, STANDARD, CRITICAL]),
            st.integers(1, 60),
        ),
        max_size=80,
    )
)
def test_pools_sharing_max_bytes_never_hold_more_than_it(ops: list[tuple[int, str, int, int]]) -> None:
    """Arrivals, dispatches, cancellations and reloads lowering ``maxBytes`` (to ``40 + size``):
    the pools never hold more than it together, and neither an arrival nor a reload takes a
    request from a pool within its share while another pool is over its own."""
    pools = _pools(3)
    shared = pools[0].shared_bytes
    max_bytes = 100
    for step, (which, op, priority, size) in enumerate(ops):
        fc = pools[which]
        if op == "reload":
            lowered = min(max_bytes, 40 + size)
            held = {id(p): p.queued_bytes for p in pools}
            shed = _reload(pools, lowered, now=0.0)  # nothing expires: only the bounds shed
            assert _within_share_lost(held, shed, lowered) == []
            max_bytes = lowered
        elif op == "offer":
            share = max_bytes / (1 + sum(1 for p in pools if p is not fc and len(p)))
            over = {id(p) for p in pools if p is not fc and p.queued_bytes > share}
            within = fc.queued_bytes + size <= share
            offer = _offer(fc, f"r{step}", priority, size_bytes=size)
            # only for an arrival that stays within its share, only from pools over theirs
            assert not offer.displaced_elsewhere or within
            assert {id(o) for o, _ in offer.displaced_elsewhere} <= over
        elif op == "take":
            item = fc.peek(float(step))
            if item is not None:
                fc.take(item, float(step))
        elif len(fc):
            fc.cancel(fc.queued()[0].request_id)
        assert shared.held == sum(p.queued_bytes for p in pools) <= max_bytes


def test_bytes_leaving_by_ttl_do_not_count_as_drain_for_retry_after() -> None:
    """A TTL exit frees bytes but is not service: a pool whose queue only expires (nothing
    dispatched) tells a refusal by the shared bytes ``maxSeconds``, as a stalled queue does, and
    one that dispatched too is told its dispatches' drain alone."""
    a, b = _pools(2)
    for i in range(5):
        assert _offer(a, f"old{i}", size_bytes=10, now=0.0).queued  # expire at 30 s
    for i in range(5):
        assert _offer(a, f"new{i}", size_bytes=10, now=25.0).queued
    assert not _offer(a, "x", size_bytes=10, now=29.0).queued  # full: 100 bytes
    assert [s.reason for s in a.expire(30.0)] == [ShedReason.TTL_EXPIRED] * 5
    for i in range(5):
        assert _offer(a, f"more{i}", size_bytes=10, now=30.0).queued  # the overload refills them
    refused = _offer(b, "b0", size_bytes=60, now=30.0)  # past its share (50): refused
    assert (refused.queued, refused.wait_bytes) == (False, 60)
    assert b.retry_after_s(30.0, wait_bytes=refused.wait_bytes) == 60
    _take_next(a, 30.0)  # one dispatch a second of 10-byte requests: 10 bytes a second
    assert b.retry_after_s(31.0, wait_bytes=20) == 2


def test_retry_after_of_a_refusal_by_the_shared_bytes_counts_the_other_pools_drain() -> None:
    """A light pool's arrival refused because another pool's queue held the budget was told 1 s (its
    own queue empty, its requests sent straight at 10/s) while that queue drained 2 bytes a second:
    40 bytes had to leave, 20 s (until session s48)."""
    a, b = _pools(2)
    for i in range(10):
        assert _offer(a, f"a{i}", size_bytes=10).queued
    _take_next(a, 0.0)
    _take_next(a, 9.0)  # a: 8 queued, 80 bytes, 2 dispatches over 10 s: 2 bytes/s
    for i in range(2):
        assert _offer(b, f"b{i}", size_bytes=10, now=9.5).queued
    for i in range(10):
        b.dispatched(9.0 + i / 10, STANDARD)
    refused = _offer(b, "big", size_bytes=40, now=10.0)  # b would hold 60, past its share of 50
    assert (refused.queued, refused.reason, refused.wait_bytes) == (False, ShedReason.QUEUE_FULL, 40)
    assert b.retry_after_s(10.0, priority=STANDARD) == 1  # its own queue alone
    assert b.retry_after_s(10.0, priority=STANDARD, wait_bytes=refused.wait_bytes) == 20
