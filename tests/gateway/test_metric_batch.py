"""Batched per-request metrics: what is exported equals prometheus_client's own counting, for
every reader, with nothing lost between reads."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from igw.gateway.metric_batch import FoldingCounter, FoldingHistogram, MetricBatch, PendingObservations
from igw.gateway.telemetry import TTFT_BUCKETS, GatewayMetrics

# Every bound exactly, just above and below each, below the first, above the last, zero, negative.
VALUES = [
    *TTFT_BUCKETS,
    *(b * 1.0000001 for b in TTFT_BUCKETS),
    *(b * 0.9999999 for b in TTFT_BUCKETS),
    0.0,
    -1.0,
    1e-9,
    1e6,
    math.inf,
]


def _exposition(batched: bool, *, many: bool = False, values: list[float] = VALUES) -> bytes:
    registry = CollectorRegistry()
    children: dict[str, tuple[Any, Any]]
    if batched:
        batch = MetricBatch()
        fhist = FoldingHistogram("h", "h", ["model"], buckets=TTFT_BUCKETS, registry=registry)
        fcount = FoldingCounter("c", "c", ["model"], registry=registry)
        fhist.folds = fcount.folds = batch.fold
        children = {
            m: (batch.pending(fhist, fhist.labels(m)), batch.pending(fcount, fcount.labels(m))) for m in "ab"
        }
    else:
        hist = Histogram("h", "h", ["model"], buckets=TTFT_BUCKETS, registry=registry)
        count = Counter("c", "c", ["model"], registry=registry)
        children = {m: (hist.labels(m), count.labels(m)) for m in "ab"}
    for h, c in children.values():
        if many:  # a stream's gaps, observed at its end in one call
            h.observe_many(values)
        for i, value in enumerate(values):
            if not many:
                h.observe(value)
            c.inc(i % 3)
    return b"\n".join(line for line in generate_latest(registry).splitlines() if b"_created" not in line)


def test_the_exposition_equals_prometheus_clients_own_counting() -> None:
    assert _exposition(batched=True) == _exposition(batched=False)


@pytest.mark.parametrize(
    "values",
    [VALUES, VALUES * 3, [*VALUES, math.nan], [0.004] * 1000],
    ids=["every-bound", "every-bound-sorted", "with-nan", "long-stream"],
)
def test_observing_many_at_once_counts_as_prometheus_client_counts_each(values: list[float]) -> None:
    """``observe_many`` (a stream's inter-token gaps, observed once the stream ended): each value in
    the bucket prometheus_client's ``observe`` puts it in - a value on a bound in that bound's bucket -
    and the same sum, whether it sorts them (many) or observes them one by one (a few, a NaN)."""
    assert _exposition(batched=True, many=True, values=values) == _exposition(batched=False, values=values)


def test_every_reader_sees_updates_made_before_it_read() -> None:
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    requests = metrics.child(metrics.requests, "m", "m", "200")
    ttft = metrics.child(metrics.ttft, "m", "m")
    for _ in range(3):
        requests.inc()
        ttft.observe(0.03)
    registry = metrics.registry
    assert (
        registry.get_sample_value("igw_requests_total", {"model": "m", "requested_model": "m", "code": "200"})
        == 3
    )
    assert (
        registry.get_sample_value(
            "igw_time_to_first_token_seconds_count", {"model": "m", "requested_model": "m"}
        )
        == 3
    )
    requests.inc(2)  # read directly from the family, as the EMF reporter and the heartbeat do
    samples = {s.name: s.value for family in metrics.requests.collect() for s in family.samples}
    assert samples["igw_requests_total"] == 5
    epp = {s.name: s.value for family in metrics.epp.collect() for s in family.samples}
    assert epp["inference_objective_request_total"] == 5
    ttft.observe(0.5)
    text = generate_latest(registry).decode()
    assert 'igw_time_to_first_token_seconds_bucket{le="0.5",model="m",requested_model="m"} 4.0' in text
    assert 'igw_time_to_first_token_seconds_sum{model="m",requested_model="m"} 0.59' in text


def test_a_fold_hands_over_each_update_once() -> None:
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    picks = metrics.child(metrics.picks, "s", "pod")
    picks.inc()
    metrics.fold()
    metrics.fold()
    picks.inc()
    value = metrics.registry.get_sample_value(
        "igw_endpoint_picks_total", {"scheduler": "s", "endpoint": "pod"}
    )
    assert value == 2


def test_negative_increments_are_refused_as_prometheus_client_does() -> None:
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    with pytest.raises(ValueError, match="non-negative"):
        metrics.child(metrics.tokens, "m", "in").inc(-1)


def test_a_histogram_layout_it_cannot_fold_into_is_refused() -> None:
    class Child:
        _buckets = ()

    with pytest.raises(TypeError, match="layout"):
        PendingObservations(Child(), (1.0, math.inf))
