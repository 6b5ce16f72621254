"""CloudWatch EMF: documents valid per the specification's structure, interval deltas, quantiles, and
``igw serve --emf-interval`` writing them to stdout."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from igw import launch
from igw.config.loader import load_gateway_config
from igw.gateway import app as app_module
from igw.gateway.emf import emf_reporter, quantile
from igw.gateway.emf_metrics import DEFAULT_NAMESPACE
from igw.gateway.endpoints import EndpointState
from igw.gateway.guards import Principal
from igw.gateway.inference import STATE_KEY
from igw.gateway.serving import serve_app
from igw.gateway.telemetry import GatewayMetrics
from igw.scheduling.types import EngineMetrics
from igw.security.factory import RequestGuardFactory
from igw.security.ratelimit import local
from tests.gateway.support import config_doc, scheduler
from tests.observability.emf_check import check_emf, one_completion
from tests.observability.live_gateway import MODEL, serving_gateway


def test_quantile_interpolates_inside_the_bucket() -> None:
    buckets = [(0.1, 50.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.1)
    assert quantile(0.75, buckets) == pytest.approx(0.55)
    assert quantile(0.99, [(0.1, 0.0), (float("inf"), 0.0)]) is None
    assert quantile(0.99, [(0.1, 0.0), (float("inf"), 4.0)]) == 0.1  # past the last finite bound


def test_documents_report_interval_deltas_per_model() -> None:
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    reporter = emf_reporter(metrics)
    # The 503 was sent to "m" by a canary rewrite of "alias": the model's series are summed.
    for code, seconds, requested in (("200", 0.02, "m"), ("200", 0.03, "m"), ("503", 2.0, "alias")):
        metrics.requests.labels("m", requested, code).inc()
        metrics.duration.labels("m", requested).observe(seconds)
    metrics.ttft.labels("m", "m").observe(0.05)
    (doc,) = reporter.documents()
    check_emf(doc)
    assert doc["Model"] == "m"
    assert doc["Requests"] == 3
    assert doc["ErrorRate"] == pytest.approx(100 / 3)
    assert 1000 < doc["LatencyP99"] <= 2500  # the 503's 2 s lies in the (1, 2.5] bucket
    assert 40 < doc["TtftP99"] <= 60
    assert doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == DEFAULT_NAMESPACE
    assert reporter.documents() == []  # nothing new in this interval
    metrics.requests.labels("m", "m", "200").inc()
    metrics.duration.labels("m", "m").observe(0.02)
    (later,) = reporter.documents()
    assert later["Requests"] == 1
    assert later["ErrorRate"] == 0
    assert "TtftP99" not in later
    assert [m["Name"] for m in later["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == [
        "Requests",
        "ErrorRate",
        "LatencyP99",
    ]


async def test_serve_writes_emf_lines_for_models_and_pools(tmp_path: Path) -> None:
    lines: list[str] = []
    await one_completion(serving_gateway(tmp_path, "--emf-interval", "0.2", stdout=lines))
    documents = [orjson.loads(line) for line in lines if '"_aws"' in line]
    for document in documents:
        check_emf(document)
    models = [d for d in documents if "Model" in d]
    assert sum(d["Requests"] for d in models) == 1
    pools = [d for d in documents if d.get("Pool") == MODEL]
    assert pools
    assert pools[-1]["ReadyPods"] == 2
    assert pools[-1]["EjectedPods"] == 0
    assert 0 <= pools[-1]["KvCacheAverage"] <= 100


def test_the_pool_document_counts_the_endpoints_outlier_detection_left_out() -> None:
    states = [
        EndpointState(key, {}, metrics=EngineMetrics(waiting=0, kv_usage=0.5), scraped_at=1.0)
        for key in ("a:1", "b:1", "c:1")
    ]
    ejected = [("p", "a:1", 12.0), ("p", "b:1", 3.0)]
    metrics = GatewayMetrics(
        lister=lambda: [("p", st) for st in states], clock=lambda: 1.5, ejections=lambda: ejected
    )
    (pool,) = [d for d in emf_reporter(metrics).documents() if d.get("Pool") == "p"]
    check_emf(pool)
    assert (pool["ReadyPods"], pool["EjectedPods"]) == (3, 2)
    ejected.clear()
    (pool,) = [d for d in emf_reporter(metrics).documents() if d.get("Pool") == "p"]
    assert pool["EjectedPods"] == 0


def test_the_pool_document_counts_the_intervals_retries() -> None:
    states = [EndpointState("a:1", {}, metrics=EngineMetrics(waiting=0), scraped_at=1.0)]
    metrics = GatewayMetrics(lister=lambda: [("p", st) for st in states], clock=lambda: 1.5)
    reporter = emf_reporter(metrics)
    (pool,) = [d for d in reporter.documents() if d.get("Pool") == "p"]
    check_emf(pool)
    assert pool["Retries"] == 0
    for cause, times in (("unavailable", 2), ("connect-failure", 1)):
        for _ in range(times):
            metrics.child(metrics.retries, "p", cause).inc()
    metrics.child(metrics.retries, "other", "unavailable").inc()  # another pool's
    (pool,) = [d for d in reporter.documents() if d.get("Pool") == "p"]
    assert pool["Retries"] == 3  # every cause, this pool's, this interval's
    (pool,) = [d for d in reporter.documents() if d.get("Pool") == "p"]
    assert pool["Retries"] == 0


def test_the_replicas_heartbeat_writes_and_misnamed_usage_are_reported_as_deltas() -> None:
    """``igw_heartbeat_writes_total{result}`` and ``igw_usage_misnamed_total`` reach CloudWatch too
    (since session s44 they were on ``/metrics`` only): the interval's delta, one document per result
    that moved, and one without dimensions for the misnamed usage; nothing once they stop moving.
    The writes carry the cluster the heartbeats name (since session s45: before, ``Result`` alone,
    the clusters of one account and region summed into one series, and the CDK app's alarm on the
    share that failed read one failing cluster among nine healthy ones as 10%, not 100%)."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    reporter = emf_reporter(metrics, heartbeat_cluster="east-a")
    metrics.heartbeat_writes.labels("ok").inc(3)
    metrics.heartbeat_writes.labels("unreachable").inc(2)
    metrics.usage_misnamed.inc()
    documents = reporter.documents()
    for document in documents:
        check_emf(document)
    written = [d for d in documents if "HeartbeatWrites" in d]
    writes = {(d["Cluster"], d["Result"]): d["HeartbeatWrites"] for d in written}
    assert writes == {("east-a", "ok"): 3, ("east-a", "unreachable"): 2}
    assert {tuple(d["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) for d in written} == {
        ("Cluster", "Result")
    }
    (misnamed,) = [d for d in documents if "UsageMisnamed" in d]
    assert misnamed["UsageMisnamed"] == 1
    assert misnamed["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]
    metrics.heartbeat_writes.labels("refused").inc()
    (later,) = reporter.documents()
    assert (later["Result"], later["HeartbeatWrites"]) == ("refused", 1)
    assert reporter.documents() == []


def test_heartbeat_prunes_and_refused_holds_are_reported_as_deltas() -> None:
    """Since session s45 ``igw_heartbeat_prunes_total{result}`` and ``igw_ratelimit_holds_refused_total``
    reach CloudWatch too (before, on ``/metrics`` only): ``HeartbeatPrunes`` in the per-(cluster,
    result) document beside the writes, which names only the metrics that moved, and
    ``RateLimitHoldsRefused`` in the replica's document without dimensions. The holds' counter is
    ``igw.security``'s, registered by the guard factory on the gateway's registry and handed over."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    security = RequestGuardFactory(registry=metrics.registry)._metrics
    reporter = emf_reporter(
        metrics, heartbeat_cluster="east-a", holds_refused=security.ratelimit_holds_refused
    )
    metrics.heartbeat_writes.labels("ok").inc(2)
    metrics.heartbeat_prunes.labels("ok").inc()
    metrics.heartbeat_prunes.labels("refused").inc(3)
    security.ratelimit_holds_refused.inc(2)
    documents = reporter.documents()
    for document in documents:
        check_emf(document)
    by_result = {d["Result"]: d for d in documents if "Result" in d}
    assert (by_result["ok"]["HeartbeatWrites"], by_result["ok"]["HeartbeatPrunes"]) == (2, 1)
    refused = by_result["refused"]
    assert (refused["Cluster"], refused["HeartbeatPrunes"], "HeartbeatWrites" in refused) == (
        "east-a",
        3,
        False,
    )
    assert [m["Name"] for m in refused["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["HeartbeatPrunes"]
    (replica,) = [d for d in documents if "RateLimitHoldsRefused" in d]
    assert (replica["RateLimitHoldsRefused"], "UsageMisnamed" in replica) == (2, False)
    assert replica["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]
    security.ratelimit_holds_refused.inc()
    metrics.usage_misnamed.inc()
    (later,) = reporter.documents()
    assert (later["RateLimitHoldsRefused"], later["UsageMisnamed"]) == (1, 1)
    assert reporter.documents() == []


def test_answers_with_their_usage_unread_are_reported_per_model_and_reason() -> None:
    """``igw_answer_usage_unread_total{model,reason}`` reaches CloudWatch as ``AnswerUsageUnread``
    (since session s44; before, on ``/metrics`` only): a document per (model, reason) that moved, of
    its own, so an interval in which the model answered no request still reports it (the model's
    document is not written then), and the model's document is the same with or without it."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    reporter = emf_reporter(metrics)
    for reason, times in (("truncated", 2), ("coded_stream", 1)):
        for _ in range(times):
            metrics.child(metrics.answer_usage_unread, "m", reason).inc()
    metrics.child(metrics.answer_usage_unread, "other", "truncated").inc()
    documents = reporter.documents()
    for document in documents:
        check_emf(document)
    assert [d for d in documents if "Requests" in d] == []  # no request answered this interval
    unread = {(d["Model"], d["Reason"]): d["AnswerUsageUnread"] for d in documents}
    assert unread == {("m", "truncated"): 2, ("m", "coded_stream"): 1, ("other", "truncated"): 1}
    (one,) = [d for d in documents if d["Model"] == "other"]
    assert one["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Model", "Reason"]]
    metrics.requests.labels("m", "m", "502").inc()
    metrics.child(metrics.answer_usage_unread, "m", "truncated").inc()
    model, later = reporter.documents()
    assert (model["Model"], model["Requests"], model["ErrorRate"]) == ("m", 1, 100)
    assert "AnswerUsageUnread" not in model
    assert (later["Model"], later["Reason"], later["AnswerUsageUnread"]) == ("m", "truncated", 1)
    assert reporter.documents() == []


def test_refused_redirects_are_reported_per_model() -> None:
    """``igw_upstream_redirects_total{model}`` (a pod's 3xx, refused with a 502) reaches CloudWatch
    as ``UpstreamRedirects`` by ``Model`` (since session s46; before, on ``/metrics`` only), in a
    document of its own per model that moved (not the model's: a redirected attempt may be a
    retried one), the interval's delta, nothing once it stops moving."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    reporter = emf_reporter(metrics)
    for name, times in (("m", 2), ("other", 1)):
        for _ in range(times):
            metrics.child(metrics.upstream_redirects, name).inc()
    documents = reporter.documents()
    for document in documents:
        check_emf(document)
    assert {d["Model"]: d["UpstreamRedirects"] for d in documents} == {"m": 2, "other": 1}
    assert [d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for d in documents] == [[["Model"]]] * 2
    metrics.requests.labels("m", "m", "502").inc()
    metrics.child(metrics.upstream_redirects, "m").inc()
    model, later = reporter.documents()
    assert (model["Model"], model["Requests"], "UpstreamRedirects" in model) == ("m", 1, False)
    assert (later["Model"], later["UpstreamRedirects"]) == ("m", 1)
    assert reporter.documents() == []


def test_refused_non_answers_are_reported_per_model_and_reason() -> None:
    """``igw_upstream_non_answers_total{model,reason}`` (a pod's 204/205/304 or non-JSON success to an
    inference POST, refused with a 502) reaches CloudWatch as ``UpstreamNonAnswers`` by ``Model``,
    ``Reason`` (since session s50; before, on ``/metrics`` only), in a document of its own per
    (model, reason) that moved (not the model's: a refused attempt may be a retried one), the
    interval's delta, nothing once it stops moving."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    reporter = emf_reporter(metrics)
    for name, reason, times in (
        ("m", "bodiless_status", 2),
        ("m", "not_json_object", 1),
        ("other", "empty_body", 1),
    ):
        for _ in range(times):
            metrics.child(metrics.upstream_non_answers, name, reason).inc()
    documents = reporter.documents()
    for document in documents:
        check_emf(document)
    assert {(d["Model"], d["Reason"]): d["UpstreamNonAnswers"] for d in documents} == {
        ("m", "bodiless_status"): 2,
        ("m", "not_json_object"): 1,
        ("other", "empty_body"): 1,
    }
    assert [d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for d in documents] == [[["Model", "Reason"]]] * 3
    metrics.requests.labels("m", "m", "502").inc()
    metrics.child(metrics.upstream_non_answers, "m", "empty_body").inc()
    model, later = reporter.documents()
    assert (model["Model"], model["Requests"], "UpstreamNonAnswers" in model) == ("m", 1, False)
    assert (later["Model"], later["Reason"], later["UpstreamNonAnswers"]) == ("m", "empty_body", 1)
    assert reporter.documents() == []


def test_refused_searches_are_reported_per_reason() -> None:
    """``igw_response_searches_refused_total{reason}`` (since session s47: tier 1 counted none of its
    refused searches for stored responses) reaches CloudWatch as ``ResponseSearchesRefused`` by
    ``Reason``, a document per reason that moved, as tier 2's; the series at 0 from the start write
    none."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    reporter = emf_reporter(metrics)
    assert reporter.documents() == []
    metrics.searches_refused.labels("scope_busy").inc(25)
    metrics.searches_refused.labels("unfound").inc(2)
    documents = reporter.documents()
    for document in documents:
        check_emf(document)
    assert {d["Reason"]: d["ResponseSearchesRefused"] for d in documents} == {"scope_busy": 25, "unfound": 2}
    assert [d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] for d in documents] == [[["Reason"]]] * 2
    metrics.searches_refused.labels("busy").inc()
    (later,) = reporter.documents()
    assert (later["Reason"], later["ResponseSearchesRefused"]) == ("busy", 1)
    assert reporter.documents() == []


async def test_holds_refused_by_the_launched_guard_reach_the_emf_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The wiring ``igw serve`` builds (:func:`igw.launch._serve`: the guard factory, its counter of
    refused holds, ``create_app``) reports holds its guard's local buckets refused as
    ``RateLimitHoldsRefused``. Since session s46 the counter is handed from the factory to the
    reporter; before, the reporter looked it up in prometheus_client's private registry index, and
    would have lost it silently had that index changed."""
    monkeypatch.setattr(local, "MAX_HELD", 1)
    doc = config_doc([scheduler("pool", MODEL)])
    doc["spec"]["extensions"]["rateLimits"] = {"default": {"tokensPerMinute": 600}}
    config_path = tmp_path / "igwc.yaml"
    config_path.write_text(yaml.safe_dump(doc))
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(yaml.safe_dump({"schedulers": {"pool": []}}))
    built: list[web.Application] = []

    def capture(*args: Any, **kwargs: Any) -> web.Application:
        built.append(app_module.create_app(*args, **kwargs))
        raise ValueError("captured")  # stops _serve before it listens: the test serves the app

    monkeypatch.setattr(launch, "create_app", capture)
    options = launch.LaunchOptions(
        config_path=str(config_path), endpoints_file=str(endpoints), reload=False, emf_interval_s=3600.0
    )
    with pytest.raises(launch.LaunchError, match="captured"):
        await launch._serve(load_gateway_config(config_path), options, CollectorRegistry())
    (app,) = built
    with caplog.at_level(logging.INFO, logger="igw.emf"):
        async with serve_app(app, host="127.0.0.1", port=0):
            guard = app[STATE_KEY].guard
            for tenant in ("a", "b", "c"):  # one hold kept, two refused: the table holds one
                await guard.account(
                    Principal(tenant=tenant),
                    model=MODEL,
                    prompt_tokens=1,
                    completion_tokens=0,
                    reserved_tokens=10,
                    reservation=f"r_{tenant}",
                )
    documents = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.emf"]
    for document in documents:
        check_emf(document)
    assert sum(d.get("RateLimitHoldsRefused", 0) for d in documents) == 2
