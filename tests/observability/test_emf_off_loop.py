"""The CloudWatch EMF interval is built off the event loop (:mod:`igw.gateway.emf`), lines unchanged.

Until session s42 :func:`igw.gateway.emf.emf_context` built and serialised the interval's documents
in the ticker's task: at 1,000 endpoints 30-45 ms of CPU per interval during which no request or
stream of the process moved (``igw perf metrics-page`` measures it). Now the inputs are read on the
loop and the documents are built on a worker thread; these tests hold the lines to what the
synchronous :meth:`~igw.gateway.emf.EmfReporter.lines` gives, and the loop to serving meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from igw.gateway.emf import EmfReporter, emf_context, emf_log, emf_reporter
from igw.gateway.epp_compat import POOL_FAMILIES
from igw.gateway.serving import serve_app
from igw.gateway.telemetry import GatewayMetrics
from igw.perf.metrics_page import fleet_state

BLOCKED_S = 5.0
"""How long a build held by the test waits for its release before it goes on by itself: a build on
the loop (the old ticker) ends the test in this time instead of hanging it."""


async def test_lines_built_off_the_loop_are_those_built_on_it_interval_after_interval() -> None:
    state = fleet_state(120, pools=6, models=9, clock=lambda: 1000.0)
    metrics = state.metrics
    on_loop = emf_reporter(metrics, clock=lambda: 2000.0)
    off_loop = emf_reporter(metrics, clock=lambda: 2000.0)
    for interval in range(3):
        expected = list(on_loop.lines())
        assert any('"Model"' in line for line in expected)
        assert await asyncio.to_thread(off_loop.snapshot()) == expected
        for k in range(interval, 9, 2):  # the next interval's traffic: some models, some errors
            series = metrics.model_series(f"model{k % 6}", f"model{k % 6}")
            series.requests(500 if k % 3 else 200).inc(k + 1)
            series.duration.observe(0.1 * k)
            series.ttft.observe(0.01 * k)


class SlowPools(Collector):
    """A pool collector read only once the test releases it (or after :data:`BLOCKED_S`): an EMF
    build that takes as long as the test wants. ``entered`` is set when a build reads it."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def snapshot(self) -> Collector:
        return self

    def collect(self) -> Iterator[Metric]:
        self.entered.set()
        self.release.wait(BLOCKED_S)
        ready = GaugeMetricFamily(POOL_FAMILIES[3], "Ready pods.", labels=["name"])
        ready.add_metric(["p"], 2.0)
        yield ready


async def test_a_request_is_answered_while_the_emf_interval_is_built() -> None:
    """``/healthz`` sent while the interval's documents are being built is answered before they are
    logged: the build (held by a pool collector that waits for the health answer) no longer blocks
    the event loop. With the documents built in the ticker's task, the health check waited."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0, registry=CollectorRegistry())
    pools = SlowPools()
    reporter = EmfReporter(
        requests=metrics.requests, duration=metrics.duration, ttft=metrics.ttft, pools=pools
    )
    answered: list[str] = []

    class Record(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            answered.append(orjson.loads(record.getMessage()).get("Pool", "?"))

    async def healthz(_request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(emf_context(reporter, interval_s=3600))
    handler, level = Record(), emf_log.level
    emf_log.addHandler(handler)
    emf_log.setLevel(logging.INFO)
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            assert await asyncio.to_thread(pools.entered.wait, BLOCKED_S)
            async with http.get(url + "/healthz") as resp:
                assert resp.status == 200
                answered.append("/healthz")
            pools.release.set()
            for _ in range(int(BLOCKED_S * 100)):
                if "p" in answered:
                    break
                await asyncio.sleep(0.01)
    finally:
        emf_log.removeHandler(handler)
        emf_log.setLevel(level)
    assert answered[:2] == ["/healthz", "p"]
