"""Fleet metrics as CloudWatch EMF: ``create_global_app(emf_interval_s=...)`` (``igw global serve
--emf-interval``) logs schema-valid documents whose counts follow the router's own counters."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import random
import re
import select
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import orjson
import pytest
import yaml

from igw.gateway.emf import EMF_SCHEMA
from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.emf import FleetEmfReporter
from igw.global_router.emf_metrics import DEFAULT_FLEET_NAMESPACE
from igw.global_router.metrics import FleetMetrics
from igw.global_router.server import ROUTER_KEY, create_global_app
from tests.gateway.fake_model_server import FakeModelServer
from tests.gateway.support import wait_for
from tests.global_router.support import MODEL, global_doc, pipe_stalled, read_to_end
from tests.security.helpers import RedisServer

BURST = 30


def _check(document: dict[str, Any]) -> None:
    jsonschema.validate(document, EMF_SCHEMA)
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == DEFAULT_FLEET_NAMESPACE
    for dimension_set in directive["Dimensions"]:
        assert all(isinstance(document[d], str) and document[d] for d in dimension_set)
    for metric in directive["Metrics"]:
        assert isinstance(document[metric["Name"]], float | int)


def _totals(documents: list[dict[str, Any]]) -> Counter[tuple[str, tuple[tuple[str, str], ...]]]:
    """Sum of every metric over the documents, keyed by metric name and dimension values, each
    document checked first (:func:`_check`)."""
    totals: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()
    for document in documents:
        _check(document)
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        dims = tuple((d, document[d]) for d in directive["Dimensions"][0])
        for metric in directive["Metrics"]:
            totals[metric["Name"], dims] += document[metric["Name"]]
    return totals


def test_reporter_emits_interval_deltas_only() -> None:
    metrics = FleetMetrics()
    reporter = FleetEmfReporter(metrics, clock=lambda: 12.5)
    metrics.decisions.labels("east-a", "east", "same-region").inc(3)
    metrics.ratelimit_hits.labels("team-a", MODEL, "requests").inc()
    metrics.ratelimit_hits.labels("team-b", MODEL, "requests").inc()
    documents = reporter.documents()
    for document in documents:
        assert document["_aws"]["Timestamp"] == 12500
    totals = _totals(documents)
    assert (
        totals["RoutingDecisions", (("Cluster", "east-a"), ("Region", "east"), ("Reason", "same-region"))]
        == 3
    )
    assert totals["ClusterRequests", (("Cluster", "east-a"),)] == 3
    assert totals["RateLimitHits", (("Model", MODEL), ("Limit", "requests"))] == 2  # summed over tenants
    assert len(documents) == 3
    assert reporter.documents() == []  # nothing moved since
    metrics.failovers.labels("east-a", "failures").inc()
    (later,) = reporter.documents()
    assert later["FailoverEvents"] == 1
    assert (later["Cluster"], later["Reason"]) == ("east-a", "failures")


def test_the_s44_counters_are_reported_as_interval_deltas() -> None:
    """Heartbeat store outages, answers whose usage went unread and poll answers naming another
    response reach CloudWatch, where the stack's alarms read (until session s44 only ``/metrics``
    had them, and the reporter read a fixed list of counters, not the table's)."""
    metrics = FleetMetrics()
    reporter = FleetEmfReporter(metrics, clock=lambda: 1.0)
    metrics.heartbeat_source_outages.labels("unreachable").inc(2)
    metrics.answer_usage_unread.labels("east-a", "truncated").inc()
    metrics.usage_misnamed.labels("east-a").inc(3)
    documents = reporter.documents()
    assert _totals(documents) == {
        ("HeartbeatSourceOutages", (("Reason", "unreachable"),)): 2,
        ("AnswerUsageUnread", (("Cluster", "east-a"), ("Reason", "truncated"))): 1,
        ("UsageMisnamed", (("Cluster", "east-a"),)): 3,
    }
    metrics.heartbeat_source_outages.labels("refused").inc()
    (later,) = reporter.documents()
    assert (later["Reason"], later["HeartbeatSourceOutages"]) == ("refused", 1)
    assert reporter.documents() == []


def test_refused_redirects_are_reported_per_cluster() -> None:
    """``igw_global_upstream_redirects_total{cluster}`` reaches CloudWatch as ``UpstreamRedirects``
    by ``Cluster`` (since session s46; before, on ``/metrics`` only), where the stack's alarm reads."""
    metrics = FleetMetrics()
    reporter = FleetEmfReporter(metrics, clock=lambda: 1.0)
    metrics.upstream_redirects.labels("east-a").inc(2)
    metrics.upstream_redirects.labels("west-b").inc()
    documents = reporter.documents()
    assert _totals(documents) == {
        ("UpstreamRedirects", (("Cluster", "east-a"),)): 2,
        ("UpstreamRedirects", (("Cluster", "west-b"),)): 1,
    }
    metrics.upstream_redirects.labels("east-a").inc()
    (later,) = reporter.documents()
    assert (later["Cluster"], later["UpstreamRedirects"]) == ("east-a", 1)
    assert reporter.documents() == []


def test_refused_non_answers_are_reported_per_cluster_and_reason() -> None:
    """``igw_global_upstream_non_answers_total{cluster,reason}`` (a cluster's 204/205/304 or non-JSON
    success to an inference POST, refused with a 502) reaches CloudWatch as ``UpstreamNonAnswers`` by
    ``Cluster``, ``Reason`` (since session s50; before, on ``/metrics`` only), where the stack's
    alarm reads."""
    metrics = FleetMetrics()
    reporter = FleetEmfReporter(metrics, clock=lambda: 1.0)
    metrics.upstream_non_answers.labels("east-a", "bodiless_status").inc(2)
    metrics.upstream_non_answers.labels("west-b", "not_json_object").inc()
    documents = reporter.documents()
    assert _totals(documents) == {
        ("UpstreamNonAnswers", (("Cluster", "east-a"), ("Reason", "bodiless_status"))): 2,
        ("UpstreamNonAnswers", (("Cluster", "west-b"), ("Reason", "not_json_object"))): 1,
    }
    metrics.upstream_non_answers.labels("east-a", "empty_body").inc()
    (later,) = reporter.documents()
    assert (later["Cluster"], later["Reason"], later["UpstreamNonAnswers"]) == ("east-a", "empty_body", 1)
    assert reporter.documents() == []


def test_refused_upstream_auth_and_refused_searches_are_reported() -> None:
    """Since session s47 ``igw_global_upstream_auth_refused_total{cluster}`` (a cluster's 401/407 to a
    caller the router verified, 502 ``upstream_auth_misconfigured``) reaches CloudWatch as
    ``UpstreamAuthRefused`` by ``Cluster``, and ``igw_global_response_searches_refused_total{reason}``
    as ``ResponseSearchesRefused`` by ``Reason``, where the stack's alarms read (before, on
    ``/metrics`` only). The refusals' series at 0 from the start write no document."""
    metrics = FleetMetrics()
    reporter = FleetEmfReporter(metrics, clock=lambda: 1.0)
    assert reporter.documents() == []
    metrics.upstream_auth_refused.labels("east-a").inc(3)
    metrics.searches_refused.labels("scope_busy").inc(25)
    metrics.searches_refused.labels("unfound").inc()
    documents = reporter.documents()
    assert _totals(documents) == {
        ("UpstreamAuthRefused", (("Cluster", "east-a"),)): 3,
        ("ResponseSearchesRefused", (("Reason", "scope_busy"),)): 25,
        ("ResponseSearchesRefused", (("Reason", "unfound"),)): 1,
    }
    metrics.searches_refused.labels("busy").inc()
    (later,) = reporter.documents()
    assert (later["Reason"], later["ResponseSearchesRefused"]) == ("busy", 1)
    assert reporter.documents() == []


def test_refused_holds_are_reported_without_dimensions() -> None:
    """Since session s45 ``igw_global_ratelimit_holds_refused_total`` (the router's local buckets'
    full hold table refusing a background response's token bound) reaches CloudWatch as
    ``RateLimitHoldsRefused``, one document without dimensions (its counter has no labels), where
    the stack's alarm reads it; before, on ``/metrics`` only."""
    metrics = FleetMetrics()
    reporter = FleetEmfReporter(metrics, clock=lambda: 1.0)
    metrics.ratelimit_holds_refused.inc(2)
    (document,) = reporter.documents()
    _check(document)
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]
    assert _totals([document]) == {("RateLimitHoldsRefused", ()): 2}
    assert reporter.documents() == []
    metrics.ratelimit_holds_refused.inc()
    (later,) = reporter.documents()
    assert later["RateLimitHoldsRefused"] == 1


async def test_router_writes_fleet_documents_on_the_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="igw.emf")
    servers = {name: FakeModelServer(name) for name in ("east-a", "east-b", "west-a")}
    for server in servers.values():
        await server.start()
    doc = global_doc(
        [
            {"name": n, "region": n.split("-")[0], "endpoint": f"http://{s.key}", "models": [MODEL]}
            for n, s in servers.items()
        ],
        failover={"failureThreshold": 2, "ejectionSeconds": 60, "slowStartSeconds": 1},
        heartbeats={"required": False},
        modelRateLimits=[{"tenant": "*", "model": MODEL, "requestsPerSecond": 0.001, "burst": BURST}],
    )
    app = create_global_app(
        parse_global_config(doc), rng=random.Random(3), read_heartbeats=False, emf_interval_s=0.1
    )
    router = app[ROUTER_KEY]
    statuses: Counter[int] = Counter()
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:

            async def send() -> None:
                async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"}) as resp:
                    statuses[resp.status] += 1
                    await resp.read()

            for _ in range(4):
                await send()
            await wait_for(lambda: '"RoutingDecisions"' in caplog.text, within=10, what="a first EMF tick")
            await servers["east-a"].stop()
            while not any(t.kind == "failover" for t in router.fleet.transitions):
                assert sum(statuses.values()) < BURST, "east-a never drained"
                await send()
            while statuses[429] < 2:
                await send()
    finally:
        for server in servers.values():
            await server.stop()
    documents = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.emf"]
    assert len({d["_aws"]["Timestamp"] for d in documents}) >= 2  # more than one interval written
    totals = _totals(documents)
    decisions = {k: v for k, v in totals.items() if k[0] == "RoutingDecisions"}
    assert (
        sum(decisions.values())
        == statuses[200] + totals["ClusterErrors", (("Cluster", "east-a"), ("Cause", "connect"))]
    )
    assert totals["ClusterErrors", (("Cluster", "east-a"), ("Cause", "connect"))] >= 2
    assert totals["FailoverEvents", (("Cluster", "east-a"), ("Reason", "failures"))] == 1
    assert totals["RateLimitHits", (("Model", MODEL), ("Limit", "requests"))] == statuses[429] == 2
    assert set(statuses) == {200, 429}  # the drained cluster's requests were retried elsewhere
    cluster_requests = sum(v for k, v in totals.items() if k[0] == "ClusterRequests")
    assert cluster_requests == sum(decisions.values())


def _router_config(tmp_path: Path, server: FakeModelServer, redis_server: RedisServer) -> Path:
    """A router config file with one cluster, ``server`` in region ``east``, and optional heartbeats
    on ``redis_server``: what each ``igw global serve`` run below is started with."""
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{server.key}", "models": [MODEL]}],
        heartbeats={"required": False, "redis": {"url": redis_server.url, "keyPrefix": "emf:hb:"}},
    )
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(doc))
    return config


async def _serving_url(proc: asyncio.subprocess.Process) -> str:
    """The URL an ``igw global serve`` subprocess says (on stderr) it serves at, once it does; fails
    the test if the process exits first."""
    assert proc.stderr is not None
    url = ""
    while not url:
        line = (await asyncio.wait_for(proc.stderr.readline(), timeout=60)).decode()
        assert line, "igw global serve exited before serving"
        found = re.search(r"serving \d+ cluster\(s\) at (http://\S+)", line)
        url = found.group(1) if found else ""
    return url


async def test_global_serve_writes_emf_lines_on_stdout(tmp_path: Path, redis_server: RedisServer) -> None:
    """``igw global serve --emf-interval``: bare EMF lines on stdout, the last interval flushed at stop."""
    server = FakeModelServer("east-a")
    await server.start()
    config = _router_config(tmp_path, server, redis_server)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config),
        "--host", "127.0.0.1", "--port", "0", "--drain-seconds", "0", "--emf-interval", "30",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        url = await _serving_url(proc)
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"}) as resp:
                    assert resp.status == 200, await resp.text()
        proc.send_signal(signal.SIGTERM)
        stdout, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await server.stop()
    assert proc.returncode == 0
    lines = [orjson.loads(line) for line in stdout.decode().splitlines() if line.strip()]
    # every stdout line is an EMF document (the interval outlives the run) or an access-log line,
    # which share stdout as at tier 1
    documents = [line for line in lines if "_aws" in line]
    accessed = [line for line in lines if "_aws" not in line]
    assert [(line["path"], line["status"]) for line in accessed] == [("/v1/completions", 200)] * 3
    totals = _totals(documents)
    assert (
        totals["RoutingDecisions", (("Cluster", "east-a"), ("Region", "east"), ("Reason", "same-region"))]
        == 3
    )
    assert totals["ClusterRequests", (("Cluster", "east-a"),)] == 3


async def test_global_serve_answers_while_its_stdout_is_not_read(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """A log shipper that stops reading stdout (a full pipe) must not stall the router: its EMF lines
    wait for the writer thread, bounded, while requests keep being answered; once the pipe is read
    again they come out, and SIGTERM still ends the process with code 0. Until s42 each line was
    written on the event loop, so the first line past a full pipe blocked every request."""
    server = FakeModelServer("east-a")
    await server.start()
    config = _router_config(tmp_path, server, redis_server)
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4 * select.PIPE_BUF)  # a small pipe: it fills at once
    full = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) - select.PIPE_BUF  # what a blocked writer left
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config),
        "--host", "127.0.0.1", "--port", "0", "--drain-seconds", "0", "--emf-interval", "0.01",
        stdout=write_end, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    os.close(write_end)
    drained: asyncio.Future[bytes] | None = None
    try:
        url = await _serving_url(proc)
        answered = 0
        full_since: float | None = None
        loop = asyncio.get_running_loop()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
            # Until the pipe is full (its writer blocked), then 2 s more: hundreds of intervals' lines.
            while full_since is None or loop.time() - full_since < 2:
                async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"}) as resp:
                    assert resp.status == 200, await resp.text()
                answered += 1
                if full_since is None and pipe_stalled(read_end, full=full, pid=proc.pid, fd=1):
                    full_since = loop.time()
                assert answered < 20_000, "the router's stdout never filled"
        assert pipe_stalled(read_end, full=full, pid=proc.pid, fd=1)
        drained = asyncio.ensure_future(asyncio.to_thread(read_to_end, read_end))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
        stdout = await asyncio.wait_for(drained, timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if drained is None:
            os.close(read_end)
        await server.stop()
    lines = [orjson.loads(line) for line in stdout.decode().splitlines()]
    documents = [line for line in lines if "_aws" in line]  # the rest: access-log lines
    assert _totals(documents)["ClusterRequests", (("Cluster", "east-a"),)] == answered
