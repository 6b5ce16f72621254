"""Tier-1 answers that misbehave, as the router sees them over real HTTP on loopback.

Clusters here are small aiohttp apps (one frozen, one healthy); the router routes on configuration
alone (``heartbeats.required: false``, no heartbeat reader), since what is probed is the request
path, not the heartbeats (``test_router_e2e.py`` has the fleet with real Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.upstream import proxy_session
from igw.gateway.upstream_client import UpstreamPool
from igw.global_router import server
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.support import wait_for
from tests.global_router.support import MODEL, global_doc

SLOW_MODEL = "slow"


@contextlib.asynccontextmanager
async def _router(clusters: list[dict[str, Any]], **spec: Any) -> AsyncIterator[str]:
    """A router for ``clusters`` (no heartbeats needed), served on loopback; yields its URL."""
    doc = global_doc(clusters, heartbeats={"required": False}, **spec)
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        yield url


async def test_a_frozen_cluster_holding_connections_does_not_starve_other_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster that takes requests and never answers holds a connection per request until
    ``requestTimeoutSeconds``. With every cluster's connections in one pool, enough such requests
    took every slot, and requests for a model only a healthy cluster serves waited for a free one:
    one bad cluster stalled the whole router. Pools are per cluster now. The pool's limit is made 4
    here (1024 in production) so that a handful of requests fill it."""

    def small_pool(limit: int = 4, **kw: Any) -> UpstreamPool:
        return proxy_session(4, **kw)

    monkeypatch.setattr(server, "proxy_session", small_pool)
    held = 0
    release = asyncio.Event()

    async def frozen(request: web.Request) -> web.Response:
        nonlocal held
        held += 1
        await release.wait()
        return web.json_response({"error": {"message": "too late"}}, status=500)

    async def healthy(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"choices": [{"text": "ok"}]})

    frozen_app, healthy_app = web.Application(), web.Application()
    frozen_app.router.add_post("/v1/completions", frozen)
    healthy_app.router.add_post("/v1/completions", healthy)
    async with contextlib.AsyncExitStack() as stack:
        frozen_url = await stack.enter_async_context(serve_app(frozen_app, host="127.0.0.1", port=0))
        healthy_url = await stack.enter_async_context(serve_app(healthy_app, host="127.0.0.1", port=0))
        clusters = [
            {"name": "frozen", "region": "east", "endpoint": frozen_url, "models": [SLOW_MODEL]},
            {"name": "healthy", "region": "east", "endpoint": healthy_url, "models": [MODEL]},
        ]
        url = await stack.enter_async_context(_router(clusters, upstream={"requestTimeoutSeconds": 120}))
        http = await stack.enter_async_context(aiohttp.ClientSession())

        async def ask(model: str) -> int:
            body = {"model": model, "prompt": "hello"}
            async with http.post(url + "/v1/completions", json=body) as resp:
                await resp.read()
                return resp.status

        stuck = [asyncio.create_task(ask(SLOW_MODEL)) for _ in range(6)]
        try:
            await wait_for(lambda: held >= 4, within=30, what="the frozen cluster holding 4 connections")
            started = time.monotonic()
            statuses = await asyncio.wait_for(asyncio.gather(*(ask(MODEL) for _ in range(10))), timeout=20)
            assert statuses == [200] * 10
            assert time.monotonic() - started < 20
        finally:
            release.set()
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)


def _streaming_cluster(events: int) -> web.Application:
    """A cluster that streams ``events`` completion events, one every 0.1 s, then ``[DONE]``."""

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(events):
            await response.write(b'data: {"choices": [{"text": "t%d"}]}\n\n' % i)
            await asyncio.sleep(0.1)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    return app


@pytest.mark.parametrize(
    ("events", "ends_with_error"), [(5, False), (10_000, True)], ids=["short", "endless"]
)
async def test_a_stream_in_flight_at_shutdown_finishes_or_ends_with_a_clean_error(
    events: int, ends_with_error: bool
) -> None:
    """A stream in flight when the router stops (SIGTERM, drain over: ``serve_app`` exits) gets the
    stream grace to finish; one that does not finish within it ends with a terminal SSE error event
    ``shutting_down`` and ``[DONE]`` (a complete chunked response a client can retry on). Until
    session s38 the router counted no request in flight: the listener's 1 s shutdown timeout cut
    every stream short, a chunked body without its last chunk (``TransferEncodingError`` at the
    client), however soon it would have ended."""
    async with contextlib.AsyncExitStack() as stack:
        cluster_url = await stack.enter_async_context(
            serve_app(_streaming_cluster(events), host="127.0.0.1", port=0)
        )
        clusters = [{"name": "c", "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        listener = serve_app(app, host="127.0.0.1", port=0, limits=ServerLimits(stream_grace_s=2.0))
        url = await listener.__aenter__()
        http = await stack.enter_async_context(aiohttp.ClientSession())
        body = {"model": MODEL, "prompt": "hello", "stream": True}
        async with http.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
            first = await resp.content.readline()
            assert first.startswith(b"data: ")
            stopping = asyncio.create_task(listener.__aexit__(None, None, None))
            received = first + await asyncio.wait_for(resp.content.read(), timeout=30)
        await asyncio.wait_for(stopping, timeout=30)
        assert received.endswith(b"data: [DONE]\n\n")
        assert (b'"code":"shutting_down"' in received) is ends_with_error
        if not ends_with_error:
            assert received.count(b'"choices"') == events
