"""Outlier detection: endpoints that fail the requests sent to them in a row leave scheduling."""

from __future__ import annotations

import random

import pytest

from igw.scheduling.factory import scheduler_from_weights
from igw.scheduling.outliers import OutlierDetector
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.settings import OutlierDetection, RoutingSettings
from igw.scheduling.types import DecisionKind, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ep, req

ENVOY_LIKE = OutlierDetection(consecutive_failures=3, base_ejection_s=10.0, max_ejection_s=25.0)


def detector(settings: OutlierDetection = ENVOY_LIKE) -> tuple[OutlierDetector, list[tuple[str, float, int]]]:
    told: list[tuple[str, float, int]] = []
    return OutlierDetector(settings, on_ejected=lambda k, s, n: told.append((k, s, n))), told


def fail(d: OutlierDetector, key: str, times: int, *, now: float) -> None:
    for _ in range(times):
        d.failed(key, now=now)


def admitted(d: OutlierDetector, keys: list[str], *, now: float) -> list[str]:
    return [e.key for e in d.admit([ep(k) for k in keys], now=now)]


def test_failures_in_a_row_eject_and_the_ejection_ends_by_itself() -> None:
    d, told = detector()
    fail(d, "a", 2, now=1.0)
    assert admitted(d, ["a", "b"], now=1.0) == ["a", "b"]
    d.failed("a", now=1.0)
    assert told == [("a", 10.0, 3)]
    assert admitted(d, ["a", "b"], now=10.9) == ["b"]
    ((key, seconds),) = d.seconds_left({"a", "b"}, 10.0)
    assert key == "a"
    assert seconds == pytest.approx(1.0)
    assert admitted(d, ["a", "b"], now=11.0) == ["a", "b"]
    assert d.ejected == {}
    assert d.seconds_left({"a", "b"}, 11.0) == []


def test_a_complete_answer_breaks_the_run_and_a_client_error_does_not() -> None:
    d, told = detector()
    fail(d, "a", 2, now=0.0)
    d.succeeded("a")
    fail(d, "a", 2, now=0.0)
    assert told == []
    d.failed("a", now=0.0)
    assert [t[0] for t in told] == ["a"]


def test_ejections_in_a_row_last_longer_up_to_the_bound_and_start_again_after_a_long_stay() -> None:
    d, told = detector()
    now = 0.0
    for expected in (10.0, 20.0, 25.0, 25.0):
        fail(d, "a", 3, now=now)
        assert told[-1] == ("a", expected, 3)
        now += expected
        assert admitted(d, ["a", "b"], now=now) == ["a", "b"]  # back when the window ends
    # In for max_ejection_s since it returned: the next ejection is a first one again.
    now += 25.0
    fail(d, "a", 3, now=now)
    assert told[-1] == ("a", 10.0, 3)


def test_failures_of_requests_ending_while_ejected_do_not_count_towards_the_next_ejection() -> None:
    d, told = detector()
    fail(d, "a", 3, now=0.0)
    fail(d, "a", 5, now=5.0)  # sent before the ejection, failing while it lasts
    assert len(told) == 1
    fail(d, "a", 2, now=10.0)  # returned at 10.0: counting from zero again
    assert len(told) == 1
    d.failed("a", now=10.0)
    assert told[-1] == ("a", 20.0, 3)


@pytest.mark.parametrize(
    ("pool", "percent", "ejected", "left_out"),
    [
        pytest.param(4, 50, ["a", "b", "c"], ["b", "c"], id="half-of-four:the-latest-ends-stay-out"),
        pytest.param(4, 100, ["a", "b", "c", "d"], ["b", "c", "d"], id="never-the-whole-pool"),
        pytest.param(1, 100, ["a"], [], id="one-endpoint-pool-keeps-it"),
        pytest.param(10, 0, ["a", "b"], ["b"], id="at-least-one"),
        pytest.param(10, 25, ["a", "b", "c"], ["b", "c"], id="rounded-down"),
    ],
)
def test_at_most_a_share_of_the_pool_is_left_out(
    pool: int, percent: int, ejected: list[str], left_out: list[str]
) -> None:
    d, _ = detector(
        OutlierDetection(consecutive_failures=1, base_ejection_s=10.0, max_ejection_percent=percent)
    )
    for i, key in enumerate(ejected):
        d.failed(key, now=float(i))  # "a" ejected first, so its ejection ends first
    keys = [chr(ord("a") + i) for i in range(pool)]
    assert admitted(d, keys, now=len(ejected)) == [k for k in keys if k not in left_out]
    # What metrics, /readyz and igw top report as ejected is what the picks leave out.
    assert [key for key, _ in d.seconds_left(set(keys), float(len(ejected)))] == sorted(left_out)


def test_turned_off_it_never_ejects() -> None:
    d, told = detector(OutlierDetection(consecutive_failures=0))
    fail(d, "a", 1000, now=0.0)
    assert told == []
    assert d.ejected == {}


def test_endpoints_that_leave_the_pool_take_their_history() -> None:
    d, told = detector()
    fail(d, "a", 3, now=0.0)
    fail(d, "b", 2, now=0.0)
    d.forget(["a", "b"])
    assert d.ejected == {}
    d.failed("b", now=0.0)
    assert len(told) == 1  # b's two earlier failures are gone


def test_a_rebuilt_scheduler_keeps_the_ejections_and_counts() -> None:
    old, _ = detector()
    fail(old, "a", 3, now=0.0)
    fail(old, "b", 2, now=0.0)
    new, told = detector()
    new.adopt(old)
    assert admitted(new, ["a", "b", "c"], now=1.0) == ["b", "c"]
    new.failed("b", now=1.0)
    assert told == [("b", 10.0, 3)]
    old.failed("c", now=1.0)  # a request still ending on the old scheduler counts on the new one
    fail(new, "c", 2, now=1.0)
    assert told[-1][0] == "c"


# ---- in the scheduler ---------------------------------------------------------------------------


def scheduler(consecutive: int = 2) -> Scheduler:
    routing = RoutingSettings(
        outlier_detection=OutlierDetection(consecutive_failures=consecutive, base_ejection_s=5)
    )
    return scheduler_from_weights({"queue": 1}, routing=routing, rng=random.Random(1))


def outcome(key: str, *, ok: bool, pod_fault: bool = False) -> RequestOutcome:
    return RequestOutcome(request_id="r", endpoint=key, ok=ok, pod_fault=pod_fault)


def test_the_scheduler_routes_around_an_endpoint_that_fails_at_once() -> None:
    s = scheduler()
    pool = [ep("broken", waiting=0), ep("busy", waiting=3)]
    assert s.pick(req(), pool, now=0.0).endpoint == "broken"  # it looks idle
    s.on_complete(outcome("broken", ok=False, pod_fault=True), now=0.1)
    s.on_complete(outcome("broken", ok=False, pod_fault=True), now=0.2)
    d = s.pick(req(), pool, now=0.3)
    assert (d.kind, d.endpoint, d.fallbacks) == (DecisionKind.PICKED, "busy", ())
    assert d.removed == {"broken": "ejected: failed requests in a row"}
    assert s.pick(req(), pool, now=5.2).endpoint == "broken"  # its window ended


def test_refused_connections_count_and_client_errors_do_not() -> None:
    s = scheduler()
    pool = [ep("a", waiting=0), ep("b", waiting=3)]
    for _ in range(5):
        s.on_complete(outcome("a", ok=False), now=0.0)  # a 4xx, a client gone: not the pod's
    assert s.pick(req(), pool, now=0.0).endpoint == "a"
    s.on_connect_failed("a", now=0.0)
    s.on_connect_failed("a", now=0.0)
    assert s.pick(req(), pool, now=0.0).endpoint == "b"


def test_with_every_endpoint_failing_one_stays_in() -> None:
    s = scheduler()
    pool = [ep("a"), ep("b")]
    for key in ("a", "b"):
        for _ in range(2):
            s.on_complete(outcome(key, ok=False, pod_fault=True), now=0.0)
    d = s.pick(req(), pool, now=0.0)
    assert d.kind is DecisionKind.PICKED
    assert d.endpoint is not None
    assert len(d.removed) == 1


def test_the_pool_utilisation_leaves_an_ejected_endpoint_out() -> None:
    s = scheduler()
    pool = [ep("idle-broken", waiting=0), ep("full", waiting=100)]
    before = s.utilisation(pool, now=0.0)
    s.on_connect_failed("idle-broken", now=0.0)
    s.on_connect_failed("idle-broken", now=0.0)
    assert before == pytest.approx(0.5)
    assert s.utilisation(pool, now=0.0) == pytest.approx(1.0)


# ---- across the workers of a group --------------------------------------------------------------


def test_an_ejection_travels_to_the_other_workers_as_a_note() -> None:
    """With ``igw serve --workers N`` each worker counts its own requests' failures; without the note
    each of N workers needed its own run of failures before it stopped sending to the pod."""
    a, b = scheduler(consecutive=2), scheduler(consecutive=2)
    a.share_picks()
    b.share_picks()
    pool = [ep("broken", waiting=0), ep("busy", waiting=3)]
    a.on_complete(outcome("broken", ok=False, pod_fault=True), now=1.0)
    a.on_complete(outcome("broken", ok=False, pod_fault=True), now=1.0)
    assert a.pick_notes is not None
    notes = a.pick_notes.drain()
    assert notes == [(1.0, "@outlier-detection", "broken", [6.0, 1])]
    counts = b.learn_picks(notes, now=1.1)
    assert counts.learned == 1
    assert b.pick(req(), pool, now=1.2).endpoint == "busy"
    ((key, seconds),) = b.outliers.seconds_left({"broken", "busy"}, 1.2)
    assert key == "broken"
    assert seconds == pytest.approx(4.8)
    # The next ejection in a row is the second at either worker: twice as long.
    b.on_complete(outcome("broken", ok=False, pod_fault=True), now=6.5)
    b.on_complete(outcome("broken", ok=False, pod_fault=True), now=6.5)
    assert b.pick_notes is not None
    ejections = [n for n in b.pick_notes.drain() if n[1] == "@outlier-detection"]
    assert ejections == [(6.5, "@outlier-detection", "broken", [16.5, 2])]


@pytest.mark.parametrize("note", [[1.0], ["x", 1], [float("inf"), 1], [5.0, 0], [5.0, 1.5], "5"])
def test_a_malformed_ejection_note_is_counted_and_changes_nothing(note: object) -> None:
    s = scheduler()
    counts = s.learn_picks([(0.0, "@outlier-detection", "a", note)], now=0.0)
    assert counts.malformed == 1
    assert s.outliers.ejected == {}


def test_picks_are_not_noted_by_outlier_detection() -> None:
    s = scheduler()
    s.share_picks()
    s.pick(req(), [ep("a"), ep("b")], now=0.0)
    assert s.pick_notes is not None
    assert {name for _, name, _, _ in s.pick_notes.drain()} == {"@dispatch-ledger"}


# ---- a request that fails on two pods is the request's fault (session s33) ---------------------------


def test_a_request_failing_on_a_second_pod_is_its_own_fault_and_the_first_pods_failure_is_taken_back() -> (
    None
):
    d, told = detector()
    d.failed("a", now=0.0)
    d.failed("a", now=0.0, digest=7)
    assert d.request_faults.failed_at(7, now=1.0) == {"a"}
    d.failed("b", now=1.0, digest=7)  # the same body fails elsewhere: the body is at fault
    assert d.request_faults.failed_at(7, now=1.0) == {"a", "b"}
    for key in ("a", "b", "c", "a", "a", "a"):  # its later failures count nowhere
        d.failed(key, now=2.0, digest=7)
    assert told == []
    d.failed("a", now=3.0)  # a's run: its failure before the poison request's, and this one
    assert told == []  # the poison request's failure on a was taken back (else 3 in a row)
    d.failed("a", now=3.0)
    assert [t[0] for t in told] == ["a"]
    fail(d, "b", 2, now=3.0)
    assert [t[0] for t in told] == ["a"]  # b's failure of the poison request was never counted


def test_a_request_taken_for_the_fault_is_told_once_with_its_endpoints() -> None:
    d, _ = detector()
    faults: list[frozenset[str]] = []
    d.on_request_fault = faults.append
    d.failed("a", now=0.0, digest=7)
    d.failed("a", now=0.0, digest=7)
    assert faults == []
    d.failed("b", now=0.0, digest=7)
    d.failed("c", now=0.0, digest=7)
    assert faults == [frozenset({"a", "b"})]


def test_distinct_failing_requests_and_one_body_on_the_only_pod_still_eject() -> None:
    d, told = detector()
    for digest in (1, 2, 3):  # a pod failing every request: each body counts once
        d.failed("a", now=0.0, digest=digest)
    assert [t[0] for t in told] == ["a"]
    d2, told2 = detector()
    for _ in range(3):  # one body over and over with nowhere else to go (a fixed prompt)
        d2.failed("a", now=0.0, digest=9)
    assert [t[0] for t in told2] == ["a"]


def avoiding(*keys: str) -> RoutingRequest:
    return RoutingRequest(
        request_id="r2",
        model="base",
        base_model="base",
        prefix_text="",
        prompt_tokens=1,
        avoid=frozenset(keys),
    )


def test_the_pick_avoids_the_pods_the_request_failed_on_while_another_can_take_it() -> None:
    s = scheduler(consecutive=5)
    pool = [ep("idle", waiting=0), ep("busy", waiting=3)]
    assert s.pick(req(), pool, now=0.0).endpoint == "idle"
    d = s.pick(avoiding("idle"), pool, now=0.0)
    assert d.endpoint == "busy"
    assert d.removed == {"idle": "this request failed there moments ago"}
    everywhere = avoiding("idle", "busy")
    assert s.pick(everywhere, pool, now=0.0).endpoint == "idle"  # nowhere else: it is picked as before


def test_the_scheduler_passes_the_outcomes_digest_to_outlier_detection() -> None:
    s = scheduler(consecutive=2)
    pool = [ep("a", waiting=0), ep("b", waiting=3)]
    for key in ("a", "b", "a", "b"):
        s.on_complete(
            RequestOutcome(request_id="r", endpoint=key, ok=False, pod_fault=True, request_digest=5), now=0.0
        )
    assert s.outliers.ejected == {}
    assert s.outliers.request_faults.failed_at(5, now=0.0) == {"a", "b"}
    s.on_complete(RequestOutcome(request_id="r", endpoint="a", ok=False, pod_fault=True), now=0.0)
    s.on_complete(RequestOutcome(request_id="r", endpoint="a", ok=False, pod_fault=True), now=0.0)
    assert s.pick(req(), pool, now=0.0).endpoint == "b"  # failures without a digest count as before
