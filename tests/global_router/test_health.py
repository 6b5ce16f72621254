"""Failover detection and slow start on an injected clock."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from igw.global_router.config import ClusterSpec, FailoverSpec
from igw.global_router.fleet import Fleet
from igw.global_router.health import (
    MAX_DRAIN_FACTOR,
    MIN_DRAIN_S,
    RAMP_FLOOR,
    ClusterHealth,
    ejection_seconds,
    record_failure,
)
from igw.global_router.metrics import FleetMetrics
from igw.scheduling.outliers import ejection_bound
from tests.global_router.support import MODEL, beat, global_config

SPEC = FailoverSpec(heartbeat_staleness_s=3.0, failure_threshold=3, ejection_s=5.0, slow_start_s=30.0)


class Clock:
    """The fleet's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def healthy(now: float = 0.0) -> ClusterHealth:
    h = ClusterHealth("a", SPEC)
    h.observe_heartbeat(beat("a", seq=1), now=now)
    assert h.evaluate(now=now, source_up=True) is None  # first availability is not a recovery
    return h


def test_needs_a_heartbeat_before_traffic_unless_configured_otherwise() -> None:
    h = ClusterHealth("a", SPEC)
    assert h.evaluate(now=0, source_up=True) is None
    assert not h.available()
    assert h.drain_reason == "no-heartbeat"
    relaxed = ClusterHealth("a", SPEC, heartbeat_required=False)
    relaxed.evaluate(now=0, source_up=True)
    assert relaxed.available()
    assert relaxed.ramp(now=0) == 1.0


def test_first_heartbeat_gives_full_share_without_ramp() -> None:
    assert healthy().ramp(now=0.0) == 1.0


def test_stale_heartbeat_drains_after_the_staleness_and_not_before() -> None:
    h = healthy()
    h.observe_heartbeat(beat("a", seq=1), now=2.9)  # same seq: not new
    assert h.evaluate(now=3.0, source_up=True) is None
    t = h.evaluate(now=3.01, source_up=True)
    assert t is not None
    assert (t.kind, t.reason) == ("failover", "stale")
    assert h.ramp(now=3.01) == 0.0


def test_store_outage_suspends_staleness() -> None:
    h = healthy()
    assert h.evaluate(now=60.0, source_up=False) is None
    assert h.available()
    assert h.evaluate(now=60.0, source_up=True) is not None  # back: the old heartbeat is stale now


def test_deleted_or_draining_heartbeat_drains_at_once() -> None:
    h = healthy()
    h.observe_heartbeat(None, now=0.5)
    t = h.evaluate(now=0.5, source_up=True)
    assert t is not None
    assert t.reason == "gone"
    h2 = healthy()
    h2.observe_heartbeat(beat("a", seq=2, draining=True), now=0.5)
    t2 = h2.evaluate(now=0.5, source_up=True)
    assert t2 is not None
    assert t2.reason == "draining"


def fleet(
    *names: str, spec: FailoverSpec = SPEC, models: dict[str, tuple[str, ...]] | None = None
) -> tuple[dict[str, ClusterHealth], dict[str, ClusterSpec]]:
    """Healthy clusters ``names`` serving MODEL (or ``models[name]``)."""
    health = {}
    for name in names:
        h = ClusterHealth(name, spec)
        h.observe_heartbeat(beat(name, seq=1), now=0.0)
        h.evaluate(now=0.0, source_up=True)
        health[name] = h
    served = models or {}
    specs = {name: ClusterSpec(name, "east", f"http://{name}", served.get(name, (MODEL,))) for name in names}
    return health, specs


def fail(
    health: dict[str, ClusterHealth],
    specs: dict[str, ClusterSpec],
    name: str,
    n: int,
    *,
    now: float,
    spec: FailoverSpec = SPEC,
) -> list[str | None]:
    return [record_failure(health, specs, name, now=now, spec=spec) for _ in range(n)]


def test_consecutive_failures_eject_for_the_ejection_time_and_success_resets() -> None:
    health, specs = fleet("a", "b")
    h = health["a"]
    fail(health, specs, "a", 2, now=1.0)
    h.record_success()
    fail(health, specs, "a", 2, now=1.0)
    assert h.evaluate(now=1.0, source_up=True) is None  # 2 in a row, not 3
    assert fail(health, specs, "a", 1, now=1.0) == [None]
    t = h.evaluate(now=1.0, source_up=True)
    assert t is not None
    assert t.reason == "failures"
    h.observe_heartbeat(beat("a", seq=2), now=5.9)
    assert h.evaluate(now=5.9, source_up=True) is None
    back = h.evaluate(now=6.0, source_up=True)
    assert back is not None
    assert back.kind == "recovery"


def test_a_failure_taken_back_shortens_the_row() -> None:
    health, specs = fleet("a", "b")
    fail(health, specs, "a", 2, now=0.0)
    health["a"].take_back_failure()
    fail(health, specs, "a", 1, now=0.0)
    assert not health["a"].ejected(now=0.0)  # 2 in a row, not 3
    fail(health, specs, "a", 1, now=0.0)
    assert health["a"].ejected(now=0.0)
    health["b"].take_back_failure()  # nothing in a row: stays at none
    assert health["b"].consecutive_failures == 0


def test_at_most_max_ejection_percent_of_the_clusters_are_out_for_failures() -> None:
    health, specs = fleet("a", "b", "c", "d")
    assert fail(health, specs, "a", 3, now=0.0)[-1] is None
    assert fail(health, specs, "b", 3, now=0.0)[-1] is None  # 2 of 4: within 50 %
    refused = fail(health, specs, "c", 3, now=0.0)[-1]
    assert refused == "2 of 4 clusters are out for failures already (failover.maxEjectionPercent 50)"
    assert not health["c"].ejected(now=0.0)
    assert health["c"].consecutive_failures == 0  # counted afresh: the next row asks again
    assert fail(health, specs, "c", 3, now=5.0)[-1] is None  # a and b are back: c may go
    assert health["c"].ejected(now=5.0)


@pytest.mark.parametrize(
    ("names", "percent", "ejectable"), [(("a",), 100, 0), (("a", "b"), 0, 1), (("a", "b", "c"), 100, 2)]
)
def test_the_bound_is_at_least_one_and_never_every_cluster(
    names: tuple[str, ...], percent: int, ejectable: int
) -> None:
    spec = replace(SPEC, max_ejection_percent=percent)
    health, specs = fleet(*names, spec=spec)
    assert ejection_bound(len(names), percent) == ejectable
    for name in names:
        fail(health, specs, name, 3, now=0.0, spec=spec)
    assert sum(h.ejected(now=0.0) for h in health.values()) == ejectable


def test_the_last_available_cluster_serving_a_model_is_never_drained_for_failures() -> None:
    health, specs = fleet("a", "b", "c", models={"a": (MODEL, "rare"), "b": (MODEL,), "c": (MODEL,)})
    assert fail(health, specs, "a", 3, now=0.0)[-1] == "it is the last available cluster serving model 'rare'"
    health2, specs2 = fleet("a", "b", spec=replace(SPEC, max_ejection_percent=100))
    health2["b"].evaluate(now=4.0, source_up=True)  # b's heartbeat went stale: drained
    assert not health2["b"].available()
    assert (
        fail(health2, specs2, "a", 3, now=4.0)[-1] == "it is the last available cluster serving model 'llama'"
    )
    assert not health2["a"].ejected(now=4.0)


def test_slow_start_ramps_linearly_from_the_floor_to_full() -> None:
    h = healthy()
    h.evaluate(now=4.0, source_up=True)  # stale
    assert not h.available()
    h.observe_heartbeat(beat("a", seq=2), now=10.0)
    t = h.evaluate(now=10.0, source_up=True)
    assert t is not None
    assert t.kind == "recovery"
    assert h.ramp(now=10.0) == pytest.approx(RAMP_FLOOR)
    assert h.ramp(now=25.0) == pytest.approx(RAMP_FLOOR + (1 - RAMP_FLOOR) / 2)
    assert h.ramp(now=40.0) == 1.0


def test_zero_slow_start_window_means_full_share_on_return() -> None:
    h = ClusterHealth("a", FailoverSpec(slow_start_s=0.0))
    h.observe_heartbeat(beat("a", seq=1), now=0)
    h.evaluate(now=0, source_up=True)
    h.observe_heartbeat(None, now=1)
    h.evaluate(now=1, source_up=True)
    h.observe_heartbeat(beat("a", seq=2), now=2)
    h.evaluate(now=2, source_up=True)
    assert h.ramp(now=2) == 1.0


def test_a_malformed_heartbeat_drains_at_once_and_a_good_one_brings_it_back_with_slow_start() -> None:
    h = healthy()
    h.observe_heartbeat(None, now=0.5, malformed=True)
    t = h.evaluate(now=0.5, source_up=True)
    assert t is not None
    assert (t.kind, t.reason) == ("failover", "malformed")
    assert h.ramp(now=0.5) == 0.0
    assert h.evaluate(now=0.6, source_up=False) is None  # a store outage does not bring it back
    assert h.drain_reason == "malformed"
    h.observe_heartbeat(beat("a", seq=2), now=1.0)
    t = h.evaluate(now=1.0, source_up=True)
    assert t is not None
    assert t.kind == "recovery"
    assert RAMP_FLOOR <= h.ramp(now=1.0) < 1.0


def test_a_cluster_whose_first_heartbeat_is_malformed_is_drained_even_when_heartbeats_are_optional() -> None:
    relaxed = ClusterHealth("a", SPEC, heartbeat_required=False)
    relaxed.observe_heartbeat(None, now=0.0, malformed=True)
    relaxed.evaluate(now=0.0, source_up=True)
    assert relaxed.drain_reason == "malformed"


def test_a_refused_connection_drains_its_cluster_whatever_the_bound() -> None:
    health, specs = fleet("a", "b", "c")
    fail(health, specs, "a", 3, now=0.0)
    assert fail(health, specs, "b", 3, now=0.0)[-1] is not None  # answered failures: bounded
    for _ in range(3):  # b and c down at once (connections refused): both fail over
        assert record_failure(health, specs, "b", now=0.0, spec=SPEC, unreachable=True) is None
        assert record_failure(health, specs, "c", now=0.0, spec=SPEC, unreachable=True) is None
    assert all(h.ejected(now=0.0) for h in health.values())


def test_failed_answers_drain_a_cluster_for_their_model_only() -> None:
    """One model's failed answers at a cluster (its engine crashing there) eject the cluster for
    that model: its other models stay. Until session s39 every failure counted against the whole
    cluster: three failed answers of one model drained it for every model."""
    health, specs = fleet("a", "b", models={"a": (MODEL, "bad"), "b": (MODEL, "bad")})
    for _ in range(2):
        assert record_failure(health, specs, "a", now=0.0, spec=SPEC, model="bad") is None
    health["a"].record_success(MODEL)  # another model's success: the row of "bad" goes on
    assert record_failure(health, specs, "a", now=0.0, spec=SPEC, model="bad") is None
    assert health["a"].ejected(now=0.0, model="bad")
    assert not health["a"].ejected(now=0.0, model=MODEL)
    assert not health["a"].ejected(now=0.0)
    assert health["a"].evaluate(now=0.0, source_up=True) is None  # no failover of the cluster
    assert health["a"].available()
    assert health["a"].ejected_models(now=0.0) == ["bad"]
    assert health["a"].ejected_models(now=5.0) == []  # ejection_s later: back for "bad"


@pytest.mark.parametrize(
    ("retry_after_s", "out_for_s"),
    [
        (None, SPEC.ejection_s),  # no Retry-After (or none readable): ejectionSeconds
        (30.0, 30.0),  # the cluster's word, longer than ejectionSeconds
        (2.0, 2.0),  # and shorter
        (0.0, MIN_DRAIN_S),  # never nothing
        (999_999_999.0, SPEC.ejection_s * MAX_DRAIN_FACTOR),  # never for ever
        (float("inf"), SPEC.ejection_s * MAX_DRAIN_FACTOR),
        (float("nan"), SPEC.ejection_s),
    ],
)
def test_a_503_s_retry_after_sets_how_long_its_model_is_drained_within_bounds(
    retry_after_s: float | None, out_for_s: float
) -> None:
    """The failed answer completing a model's ejection is a 503 saying when to come back: the
    cluster is out for that model that long, within [1 s, 10 x ejectionSeconds]. Until session s50
    it was out ``ejectionSeconds`` (5 s) whatever it said, ``Retry-After: 30`` included."""
    assert ejection_seconds(SPEC, retry_after_s) == out_for_s
    health, specs = fleet("a", "b")
    for _ in range(SPEC.failure_threshold):
        assert (
            record_failure(health, specs, "a", now=10.0, spec=SPEC, model=MODEL, retry_after_s=retry_after_s)
            is None
        )
    assert health["a"].model_ejection_ends(MODEL) == 10.0 + out_for_s
    assert health["a"].ejected(now=10.0 + out_for_s - 0.01, model=MODEL)
    assert not health["a"].ejected(now=10.0 + out_for_s, model=MODEL)
    assert not health["a"].ejected(now=10.0)  # the cluster itself: never


def test_a_503_s_retry_after_floor_is_ejection_seconds_when_that_is_shorter() -> None:
    spec = replace(SPEC, ejection_s=0.5)
    assert ejection_seconds(spec, 0.0) == 0.5  # the floor is ejectionSeconds when that is shorter
    assert ejection_seconds(spec, 3.0) == 3.0
    assert ejection_seconds(spec, 60.0) == 0.5 * MAX_DRAIN_FACTOR


def test_a_model_s_success_resets_its_row_and_a_take_back_shortens_it() -> None:
    health, specs = fleet("a", "b")
    for _ in range(2):
        record_failure(health, specs, "a", now=0.0, spec=SPEC, model=MODEL)
    health["a"].record_success(MODEL)
    for _ in range(2):
        record_failure(health, specs, "a", now=0.0, spec=SPEC, model=MODEL)
    health["a"].take_back_failure(MODEL)
    record_failure(health, specs, "a", now=0.0, spec=SPEC, model=MODEL)
    assert not health["a"].ejected(now=0.0, model=MODEL)  # 2 in a row
    record_failure(health, specs, "a", now=0.0, spec=SPEC, model=MODEL)
    assert health["a"].ejected(now=0.0, model=MODEL)


def test_a_model_s_ejections_are_bounded_among_the_clusters_serving_it() -> None:
    models = {"a": (MODEL, "rare"), "b": (MODEL, "rare"), "c": (MODEL,), "d": (MODEL,)}
    health, specs = fleet("a", "b", "c", "d", models=models)
    assert fail_model(health, specs, "a", "rare") is None  # 1 of the 2 serving "rare"
    assert fail_model(health, specs, "b", "rare") == (
        "1 of 2 clusters serving model 'rare' are out for its failures already "
        "(failover.maxEjectionPercent 50)"
    )
    assert fail_model(health, specs, "b", MODEL) is None  # another model: a bound of its own
    assert fail_model(health, specs, "c", MODEL) is None  # 2 of 4 serving llama
    assert fail_model(health, specs, "d", MODEL) is not None
    health2, specs2 = fleet("a", "b", spec=replace(SPEC, max_ejection_percent=100))
    health2["b"].evaluate(now=4.0, source_up=True)  # b's heartbeat went stale: drained
    last = fail_model(health2, specs2, "a", MODEL, now=4.0)
    assert last == "it is the last available cluster serving model 'llama'"


def test_connect_failures_still_drain_the_whole_cluster() -> None:
    health, specs = fleet("a", "b", models={"a": (MODEL, "other"), "b": (MODEL, "other")})
    for _ in range(3):
        record_failure(health, specs, "a", now=0.0, spec=SPEC, unreachable=True, model=MODEL)
    assert health["a"].ejected(now=0.0)
    assert health["a"].ejected(now=0.0, model="other")
    t = health["a"].evaluate(now=0.0, source_up=True)
    assert t is not None
    assert (t.kind, t.reason) == ("failover", "failures")


def fail_model(
    health: dict[str, ClusterHealth],
    specs: dict[str, ClusterSpec],
    name: str,
    model: str,
    *,
    now: float = 0.0,
) -> str | None:
    """``failure_threshold`` failed answers for ``model`` at ``name``: the last one's refusal, if any."""
    return [record_failure(health, specs, name, now=now, spec=SPEC, model=model) for _ in range(3)][-1]


def test_a_model_back_after_its_ejection_slow_starts_and_is_reported_as_a_recovery() -> None:
    """A cluster drained for one model's failed answers takes that model's traffic back gradually
    when its ejection ends (the cluster's own slow start, for that model only), and the fleet counts
    and logs the return. Until session s39 the model came back at full share the moment the
    ejection ended (east-a first in 1498 of 3000 plans of two clusters, straight away), with no
    recovery event, while a whole cluster's return ramped."""
    clock = Clock()
    registry = CollectorRegistry()
    fleet = Fleet(
        global_config(heartbeats={"required": False}),
        region="east",
        clock=clock,
        rng=random.Random(1),
        metrics=FleetMetrics(registry),
        reader=None,
    )
    for _ in range(SPEC.failure_threshold):
        fleet.record_outcome("east-a", ok=False, model=MODEL)
    assert fleet.health["east-a"].ejected_models(now=clock.now) == [MODEL]
    clock.now += 5.0  # the configured ejectionSeconds (5)
    fleet.evaluate()
    assert [(t.kind, t.cluster, t.model) for t in fleet.transitions] == [
        ("failover", "east-a", MODEL),
        ("recovery", "east-a", MODEL),
    ]
    assert registry.get_sample_value("igw_global_recovery_events_total", {"cluster": "east-a"}) == 1
    health = fleet.health["east-a"]
    window = fleet.config.failover.slow_start_s
    assert health.ramp(now=clock.now, model=MODEL) == pytest.approx(RAMP_FLOOR)
    assert health.ramp(now=clock.now) == 1.0  # its other models: full share all along
    shares = Counter(fleet.plan(MODEL)[0].cluster.name for _ in range(3000))
    assert shares["east-a"] / 3000 < 0.1  # east-a's share at the floor: ~RAMP_FLOOR / (1 + 1) of first picks
    clock.now += window / 2
    assert health.ramp(now=clock.now, model=MODEL) == pytest.approx(RAMP_FLOOR + (1 - RAMP_FLOOR) / 2)
    clock.now += window / 2
    fleet.evaluate()
    assert health.ramp(now=clock.now, model=MODEL) == 1.0
    assert len(fleet.transitions) == 2  # reported once


def test_repeated_drains_of_a_model_grow_up_to_ten_times_and_start_again_after_a_healthy_period() -> None:
    """A cluster that keeps failing one model (503s without ``Retry-After``) is out for it
    ``ejectionSeconds`` x its drains in a row, at most 10 x; back for that long, the next drain is
    the first again. Until session s50 each drain lasted ``ejectionSeconds`` (5 s): three more
    requests were spent on it every 5 s, however long it had been failing."""
    health, specs = fleet("a", "b", models={"a": (MODEL, "other"), "b": (MODEL, "other")})
    now = 0.0
    lengths = []
    for _ in range(MAX_DRAIN_FACTOR + 2):
        for _ in range(SPEC.failure_threshold):
            assert record_failure(health, specs, "a", now=now, spec=SPEC, model=MODEL) is None
        ends = health["a"].model_ejection_ends(MODEL)
        assert ends is not None
        lengths.append(ends - now)
        now = ends + 1.0  # back for a second, then failing again
    assert (
        lengths
        == [SPEC.ejection_s * n for n in range(1, MAX_DRAIN_FACTOR + 1)]
        + [SPEC.ejection_s * MAX_DRAIN_FACTOR] * 2
    )
    # A 503's Retry-After sets the one it completes, and counts in the row.
    for _ in range(SPEC.failure_threshold):
        record_failure(health, specs, "a", now=now, spec=SPEC, model=MODEL, retry_after_s=2.0)
    assert health["a"].model_ejection_ends(MODEL) == now + 2.0
    # Back long enough (10 x ejectionSeconds after its last drain ended): the next is the first again.
    now += 2.0 + SPEC.ejection_s * MAX_DRAIN_FACTOR
    for _ in range(SPEC.failure_threshold):
        record_failure(health, specs, "a", now=now, spec=SPEC, model=MODEL)
    assert health["a"].model_ejection_ends(MODEL) == now + SPEC.ejection_s
    # Another model's row is its own.
    for _ in range(SPEC.failure_threshold):
        record_failure(health, specs, "a", now=now, spec=SPEC, model="other")
    assert health["a"].model_ejection_ends("other") == now + SPEC.ejection_s


def test_a_drain_made_again_while_the_model_is_out_does_not_lengthen_the_row() -> None:
    """Requests sent before a drain that fail late may complete another while the model is still
    out: it restarts that drain at the same length, not the next one's."""
    health, specs = fleet("a", "b", "c", "d")
    for _ in range(SPEC.failure_threshold):
        record_failure(health, specs, "a", now=0.0, spec=SPEC, model=MODEL)
    for _ in range(SPEC.failure_threshold):
        record_failure(health, specs, "a", now=1.0, spec=SPEC, model=MODEL)
    assert health["a"].model_ejection_ends(MODEL) == 1.0 + SPEC.ejection_s
    for _ in range(SPEC.failure_threshold):
        record_failure(health, specs, "a", now=7.0, spec=SPEC, model=MODEL)
    assert health["a"].model_ejection_ends(MODEL) == 7.0 + 2 * SPEC.ejection_s
