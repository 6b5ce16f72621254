"""The request observer updates each model's series through one cached lookup per request
(igw.gateway.telemetry.ModelSeries): the exposed samples are the ones per-update lookups gave."""

from __future__ import annotations

from aiohttp import web

from igw.gateway.observer import RequestObserver
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.upstream import ExchangeResult
from igw.scheduling.types import DecisionKind, RoutingDecision


def _request(metrics: GatewayMetrics, *, status: int, streamed: bool, requested: str | None = None) -> None:
    obs = RequestObserver(metrics, request_id="r", method="POST", path="/v1/completions")
    if requested is not None:
        obs.rewritten(requested, named=True)
    obs.routed(model="m", scheduler="s", stream=streamed, base_model="b", configured=True)
    result = ExchangeResult(
        answer=web.Response(status=status),
        status=status,
        ok=status < 500,
        streamed=streamed,
        ttft_s=0.02 if streamed else None,
        gaps=[0.01, 0.03] if streamed else [],
        usage={"prompt_tokens": 5, "completion_tokens": 3},
    )
    obs.exchanged(result, prompt_tokens=5, completion_tokens=3)
    obs.finish(result.answer)


def test_each_models_series_gets_every_update_of_its_requests() -> None:
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    _request(metrics, status=200, streamed=False)
    _request(metrics, status=200, streamed=True)
    _request(metrics, status=500, streamed=False)
    _request(metrics, status=200, streamed=False, requested="m-canary")
    assert metrics.model_series("m", "m") is metrics.model_series("m", "m")  # one lookup object per pair
    sample = metrics.registry.get_sample_value
    assert sample("igw_requests_total", {"model": "m", "requested_model": "m", "code": "200"}) == 2
    assert sample("igw_requests_total", {"model": "m", "requested_model": "m", "code": "500"}) == 1
    assert sample("igw_requests_total", {"model": "m", "requested_model": "m-canary", "code": "200"}) == 1
    assert sample("igw_request_duration_seconds_count", {"model": "m", "requested_model": "m"}) == 3
    assert sample("igw_request_duration_seconds_count", {"model": "m", "requested_model": "m-canary"}) == 1
    assert sample("igw_time_to_first_token_seconds_count", {"model": "m", "requested_model": "m"}) == 1
    assert sample("igw_time_to_first_token_seconds_sum", {"model": "m", "requested_model": "m"}) == 0.02
    assert sample("igw_inter_token_latency_seconds_count", {"model": "m"}) == 2
    assert sample("igw_tokens_total", {"model": "m", "direction": "in"}) == 20
    assert sample("igw_tokens_total", {"model": "m", "direction": "out"}) == 12
    # a series no request updated is not exposed (the canary pair never streamed)
    assert (
        sample("igw_time_to_first_token_seconds_count", {"model": "m", "requested_model": "m-canary"}) is None
    )
    quiet = GatewayMetrics(lister=list, clock=lambda: 0.0)
    quiet.model_series("m", "m")  # looked up, never updated
    labels = {"model": "m", "requested_model": "m"}
    assert quiet.registry.get_sample_value("igw_request_duration_seconds_count", labels) is None
    assert quiet.registry.get_sample_value("igw_time_to_first_token_seconds_count", labels) is None


def test_decisions_and_picks_are_counted_per_scheduler_and_endpoint() -> None:
    """The decision histogram and the picks counter are looked up by name (``decision_child``,
    ``picks_child``): each scheduler's and endpoint's updates land in their own series."""
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    decision = RoutingDecision(kind=DecisionKind.PICKED, endpoint="e1")
    for scheduler, endpoint, elapsed in (
        ("s1", "e1", 1e-4),
        ("s1", "e2", 2e-4),
        ("s2", "e1", 3e-4),
        ("s1", "e1", 4e-4),
    ):
        obs = RequestObserver(metrics, request_id="r", method="POST", path="/v1/completions")
        obs.decided(scheduler, decision, elapsed)
        obs.attempt(1, endpoint, scheduler=scheduler)
    assert metrics.decision_child("s1") is metrics.child(metrics.decision, "s1")
    assert metrics.picks_child("s1", "e2") is metrics.child(metrics.picks, "s1", "e2")
    sample = metrics.registry.get_sample_value
    assert sample("igw_scheduler_decision_seconds_count", {"scheduler": "s1"}) == 3
    assert sample("igw_scheduler_decision_seconds_sum", {"scheduler": "s2"}) == 3e-4
    assert sample("igw_endpoint_picks_total", {"scheduler": "s1", "endpoint": "e1"}) == 2
    assert sample("igw_endpoint_picks_total", {"scheduler": "s1", "endpoint": "e2"}) == 1
    assert sample("igw_endpoint_picks_total", {"scheduler": "s2", "endpoint": "e1"}) == 1


def test_the_timings_are_kept_as_measured_and_rounded_in_the_line() -> None:
    """The observer stores each timing unrounded (no ``round`` call on the request's path); the
    access line carries it rounded: ``decision_us`` to 1 decimal, the milliseconds to 3."""
    metrics = GatewayMetrics(lister=list, clock=lambda: 0.0)
    obs = RequestObserver(metrics, request_id="r", method="POST", path="/v1/completions")
    obs.routed(model="m", scheduler="s", stream=True, base_model="b", configured=True)
    obs.decided("s", RoutingDecision(kind=DecisionKind.PICKED, endpoint="e:1"), 41.2649e-6)
    obs.waited(0.0123456789, "dispatched")
    result = ExchangeResult(
        answer=web.Response(status=200), status=200, ok=True, streamed=True, ttft_s=0.00123456789
    )
    obs.exchanged(result, prompt_tokens=5, completion_tokens=3)
    obs.finish(result.answer)
    record = obs.record
    assert record.decision_us == 41.2649e-6 * 1e6
    assert record.queue_ms == 0.0123456789 * 1000
    assert record.ttft_ms == 0.00123456789 * 1000
    assert record.duration_ms is not None
    line = record.line_fields()
    assert (line["decision_us"], line["queue_ms"], line["ttft_ms"]) == (41.3, 12.346, 1.235)
    assert line["duration_ms"] == round(record.duration_ms, 3)
