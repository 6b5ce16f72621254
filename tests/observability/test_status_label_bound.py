"""The ``code`` label of the request series is bounded although model servers choose the status.

A pod's error status is relayed to the client as it is, so a broken or hostile pod answering every
number from 400 to 599 made 200 ``igw_requests_total`` series per model (and as many of
``inference_objective_request_error_total`` and ``igw_model_rewrite_requests_total``). Registered
statuses keep their number; the others are counted under their class (``5xx``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from igw.gateway.model_rewrite import Split
from igw.gateway.rewrite_metrics import RewriteMetrics
from igw.gateway.telemetry import CLIENT_CLOSED, REGISTERED_STATUSES, GatewayMetrics, status_label

CAP = len(REGISTERED_STATUSES) + 5  # every registered status (499 too), and the classes 1xx..5xx


def _codes(registry: CollectorRegistry, sample: str) -> set[str]:
    return {s.labels["code"] for f in registry.collect() for s in f.samples if s.name == sample}


def test_distinct_upstream_statuses_make_a_bounded_set_of_series() -> None:
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    series = metrics.model_series("m", "m")
    for status in range(100, 600):
        series.requests(status).inc()
    codes = _codes(metrics.registry, "igw_requests_total")
    assert len(codes) <= CAP, len(codes)
    assert {"200", "429", "503", "4xx", "5xx"} <= codes
    errors = {
        s.labels["error_code"]
        for f in metrics.registry.collect()
        for s in f.samples
        if s.name == "inference_objective_request_error_total"
    }
    assert len(errors) <= CAP, len(errors)


def test_rewrite_series_take_the_same_bounded_code() -> None:
    registry = CollectorRegistry()
    rewrites = RewriteMetrics(registry)
    for status in range(400, 600):
        rewrites.on_finish(Split("r", "t", named=True))(status, 0.1)
    assert len(_codes(registry, "igw_model_rewrite_requests_total")) <= CAP


def test_registered_statuses_keep_their_number() -> None:
    assert status_label(503) == "503"
    assert status_label(599) == "5xx"
    assert status_label(456) == "4xx"


def test_the_gateway_s_own_client_closed_status_keeps_its_number() -> None:
    """499 is not a registered HTTP status, but the gateway records it for every request whose client
    left (alerts and dashboards read ``code="499"``); folding it into ``4xx`` lost the series."""
    assert status_label(CLIENT_CLOSED) == "499"
