"""A ``/metrics`` render held as long as a test wants, and the probe that the event loop keeps
answering meanwhile: shared by tier 1's (``tests/observability/test_metrics_page_render.py``) and
the global router's (``tests/global_router/test_metrics_off_loop.py``) off-loop render tests."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from igw.gateway.serving import serve_app

BLOCKED_S = 5.0
"""How long a render blocked by a test waits for its release before it goes on by itself: a render
that stalls the loop (the old handler) ends the test in this time instead of hanging it."""


class SlowGauge:
    """A gauge of ``registry`` whose value is read only once the test releases it (or after
    :data:`BLOCKED_S`): a render that takes as long as the test wants. ``entered`` is set when a
    render reads it, ``reads`` counts the reads."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.reads = 0
        Gauge("igw_test_slow", "A gauge read slowly.", registry=registry).set_function(self._read)

    def _read(self) -> float:
        self.reads += 1
        self.entered.set()
        self.release.wait(BLOCKED_S)
        return 1.0

    async def read_started(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, BLOCKED_S)


async def answered_during_a_render(app: web.Application, slow: SlowGauge) -> list[str]:
    """Serve ``app`` on loopback, GET ``/metrics`` and, once its render reads ``slow``, GET
    ``/healthz``; then release the render. Each answer must be a 200. Returns the paths in the order
    their answers came: ``/healthz`` first only when the render does not block the event loop."""
    answered: list[str] = []
    async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:

        async def get(path: str) -> None:
            async with http.get(url + path) as resp:
                await resp.read()
                assert resp.status == 200
            answered.append(path)

        scrape = asyncio.ensure_future(get("/metrics"))
        await slow.read_started()
        await get("/healthz")
        slow.release.set()
        await scrape
    return answered
