"""Tier-1 answers that misbehave, as the router sees them over real HTTP on loopback.

Clusters here are small aiohttp apps (one frozen, one healthy); the router routes on configuration
alone (``heartbeats.required: false``, no heartbeat reader), since what is probed is the request
path, not the heartbeats (``test_router_e2e.py`` has the fleet with real Redis); the last test reads
a lying heartbeat from a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio as redis_asyncio
from aiohttp import web

from igw.gateway.errors import gateway_error
from igw.gateway.heartbeat_message import PoolLoad
from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.upstream import proxy_session
from igw.gateway.upstream_client import UpstreamPool
from igw.global_router import server
from igw.global_router.config import parse_global_config
from igw.global_router.heartbeats import HeartbeatReader
from igw.global_router.server import create_global_app
from tests.gateway.support import wait_for
from tests.global_router.support import MODEL, beat, global_doc, reading_fleet
from tests.security.helpers import RedisServer

SLOW_MODEL = "slow"


@contextlib.asynccontextmanager
async def _router(clusters: list[dict[str, Any]], **spec: Any) -> AsyncIterator[str]:
    """A router for ``clusters`` (no heartbeats needed), served on loopback; yields its URL."""
    doc = global_doc(clusters, heartbeats={"required": False}, **spec)
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        yield url


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _serve_cluster(stack: contextlib.AsyncExitStack, answer: Handler) -> str:
    """A cluster that answers ``POST /v1/completions`` with ``answer``, served on loopback until
    ``stack`` closes; its URL."""
    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    return await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))


async def _answer_ok(request: web.Request) -> web.Response:
    """A healthy cluster's completion."""
    await request.read()
    return web.json_response({"choices": [{"text": "ok"}]})


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

    async with contextlib.AsyncExitStack() as stack:
        frozen_url = await _serve_cluster(stack, frozen)
        healthy_url = await _serve_cluster(stack, _answer_ok)
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
    """A cluster that streams ``events`` completion events, one every 0.1 s, then ``[DONE]``; a
    stored response's replay opens with an event naming that response (the router holds a replay
    until one does, since session s46)."""

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        response_id = request.match_info.get("response_id")
        if response_id is not None:
            named = {"type": "response.in_progress", "response": {"id": response_id, "object": "response"}}
            await response.write(b"data: " + orjson.dumps(named) + b"\n\n")
        for i in range(events):
            await response.write(b'data: {"choices": [{"text": "t%d"}]}\n\n' % i)
            await asyncio.sleep(0.1)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    app.router.add_get("/v1/responses/{response_id}", stream)  # a resumed background response
    return app


@pytest.mark.parametrize("route", ["inference", "stored-response"])
@pytest.mark.parametrize(
    ("events", "ends_with_error"), [(30, False), (10_000, True)], ids=["short", "endless"]
)
async def test_a_stream_in_flight_at_shutdown_finishes_or_ends_with_a_clean_error(
    events: int, ends_with_error: bool, route: str
) -> None:
    """A stream in flight when the router stops (SIGTERM, drain over: ``serve_app`` exits) gets the
    stream grace to finish; one that does not finish within it ends with a terminal SSE error event
    ``shutting_down`` and ``[DONE]`` (a complete chunked response a client can retry on). Until
    session s38 the router counted no request in flight: the listener's 1 s shutdown timeout cut
    every stream short, a chunked body without its last chunk (``TransferEncodingError`` at the
    client), however soon it would have ended; until session s40 it still did so to a stored
    response's (``GET /v1/responses/{id}?stream=true``, a background response's events resumed)."""
    async with contextlib.AsyncExitStack() as stack:
        cluster_url = await stack.enter_async_context(
            serve_app(_streaming_cluster(events), host="127.0.0.1", port=0)
        )
        clusters = [{"name": "c", "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        # the grace (5 s) longer than the short stream (3 s), which outlasts the listener's own stop (~2 s)
        listener = serve_app(app, host="127.0.0.1", port=0, limits=ServerLimits(stream_grace_s=5.0))
        url = await listener.__aenter__()
        http = await stack.enter_async_context(aiohttp.ClientSession())
        body = {"model": MODEL, "prompt": "hello", "stream": True}
        asking = (
            http.post(url + "/v1/completions", json=body)
            if route == "inference"
            else http.get(url + "/v1/responses/resp_background?stream=true")
        )
        async with asking as resp:
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


async def test_a_heartbeat_listing_models_its_cluster_is_not_configured_for_keeps_none_of_them(
    redis_server: RedisServer,
) -> None:
    """A heartbeat (real Redis, the tier-1 format) listing 5 000 models and 90 pools besides the one
    its cluster is configured for (about what a gateway at its configuration's limits publishes):
    the router keeps only the configured one. Until session s38 it kept the whole list, bounded by
    nothing but the writer, and every request's plan scanned it (a cluster is never routed a model
    it is not configured for, so none of it was of any use). A document larger in shape than any
    gateway publishes is not parsed at all since session s43
    (``test_a_heartbeat_larger_than_any_gateway_publishes_is_not_parsed``)."""
    config = parse_global_config(
        global_doc(heartbeats={"redis": {"url": redis_server.url, "keyPrefix": "lies:"}})
    )
    reader = HeartbeatReader(
        url=redis_server.url, key_prefix="lies:", clusters=[c.name for c in config.clusters], staleness_s=30
    )
    fleet = reading_fleet(config, reader)
    made_up = tuple(f"made-up-{i}" for i in range(5_000))
    pools = {name: PoolLoad(model=name, endpoints_total=1, endpoints_fresh=1, saturation=0, queue_depth=0)
             for name in made_up[:90]}  # fmt: skip
    pools["llama-pool"] = PoolLoad(
        model=MODEL, endpoints_total=2, endpoints_fresh=2, saturation=0, queue_depth=0
    )
    liar = dataclasses.replace(beat("east-a", models=(*made_up, MODEL)), pools=pools)
    client = redis_asyncio.Redis.from_url(redis_server.url)
    try:
        for name in ("east-a", "east-b", "west-a"):
            document = liar if name == "east-a" else beat(name)
            await client.hset(f"lies:{name}", "replica-1", document.encode())
        await fleet.poll_once()
        kept = fleet.health["east-a"].heartbeat
        assert kept is not None
        assert kept.models == (MODEL,)
        assert list(kept.pools) == ["llama-pool"]
        assert fleet.health["east-a"].available()
        assert "east-a" in {choice.cluster.name for choice in fleet.plan(MODEL)}
        assert fleet.plan("made-up-1") == []
    finally:
        await client.aclose()  # type: ignore[attr-defined]
        await fleet.stop()


async def test_a_cluster_configured_for_an_adapter_keeps_the_pool_serving_it(
    redis_server: RedisServer,
) -> None:
    """Cluster ``east-a`` is configured for the adapter ``sql-lora`` only; its gateway's heartbeat
    (real Redis) has the pool of the base model listing that adapter and 1000 others. The router
    keeps that pool with the configured adapter alone, and routes ``sql-lora`` on its figures (full
    here: the cluster goes last though the cluster-wide figures are idle). Until session s40 pools
    named no adapter and the pool was dropped as not configured: the adapter routed on the
    cluster's figures."""
    clusters = [
        {"name": "east-a", "region": "east", "endpoint": "http://127.0.0.1:1", "models": ["sql-lora"]},
        {"name": "east-b", "region": "east", "endpoint": "http://127.0.0.1:2", "models": ["sql-lora"]},
    ]
    config = parse_global_config(
        global_doc(clusters, heartbeats={"redis": {"url": redis_server.url, "keyPrefix": "lora:"}})
    )
    reader = HeartbeatReader(url=redis_server.url, key_prefix="lora:", clusters=["east-a", "east-b"])
    fleet = reading_fleet(config, reader)
    others = tuple(f"made-up-{i}" for i in range(1000))
    full = PoolLoad(model=MODEL, endpoints_total=2, endpoints_fresh=2, saturation=1.0, queue_depth=9,
                    adapters=("sql-lora", *others))  # fmt: skip
    roomy = dataclasses.replace(full, saturation=0.0, queue_depth=0)
    client = redis_asyncio.Redis.from_url(redis_server.url)
    try:
        for name, pool in (("east-a", full), ("east-b", roomy)):
            document = dataclasses.replace(
                beat(name, saturation=0.1 if name == "east-a" else 0.9, models=(MODEL, "sql-lora", *others)),
                pools={"base-pool": pool},
            )
            await client.hset(f"lora:{name}", "replica-1", document.encode())
        await fleet.poll_once()
        kept = fleet.health["east-a"].heartbeat
        assert kept is not None
        assert kept.models == ("sql-lora",)
        assert kept.pools["base-pool"].adapters == ("sql-lora",)
        for _ in range(20):
            assert [(c.cluster.name, c.reason) for c in fleet.plan("sql-lora")] == [
                ("east-b", "same-region"),
                ("east-a", "saturated"),
            ]
    finally:
        await client.aclose()  # type: ignore[attr-defined]
        await fleet.stop()


def _busy_cluster(retry_after: str) -> web.Application:
    """A cluster whose gateway refuses every request: 429 ``pool_saturated`` with ``retry_after``."""

    async def refuse(request: web.Request) -> web.Response:
        await request.read()
        error = {"error": {"message": "saturated", "type": "rate_limit_error", "code": "pool_saturated"}}
        return web.json_response(error, status=429, headers={"Retry-After": retry_after})

    app = web.Application()
    app.router.add_post("/v1/completions", refuse)
    return app


@pytest.mark.parametrize(
    ("sent", "relayed"),
    [
        (["30", "2", "999999999"], "2"),
        (["999999999"], "3600"),
        (["Fri, 01 Jan 2099 00:00:00 GMT", "40"], "40"),
        (["Fri, 01 Jan 2099 00:00:00 GMT"], "3600"),
    ],
    ids=["soonest-of-three", "one-absurd", "a-date-and-seconds", "one-date"],
)
async def test_a_refusal_from_every_cluster_tried_carries_the_soonest_retry_after(
    sent: list[str], relayed: str
) -> None:
    """Every cluster tried answers 429: the client gets the last answer with the *smallest*
    ``Retry-After`` of those the clusters sent (it may come back as soon as any of them expects
    room), bounded to the most a tier-1 gateway sends (3600 s). Until session s39 the last cluster's
    value went through as it came: three clusters saying 30, 2 and 999999999 s told the client to
    wait 999999999 s (probed with the real ``igw global serve``), a date in 2099 the same."""
    async with contextlib.AsyncExitStack() as stack:
        clusters = []
        for i, value in enumerate(sent):
            cluster_url = await stack.enter_async_context(
                serve_app(_busy_cluster(value), host="127.0.0.1", port=0)
            )
            clusters.append({"name": f"c{i}", "region": "east", "endpoint": cluster_url, "models": [MODEL]})
        url = await stack.enter_async_context(_router(clusters))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        for _ in range(3):  # whichever cluster the plan puts last
            async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}) as resp:
                body = await resp.json()
                assert resp.status == 429
                assert body["error"]["code"] == "pool_saturated"
                assert resp.headers.getall("Retry-After") == [relayed]


def _cluster_failing(model: str | None) -> web.Application:
    """A cluster whose gateway answers 500 for ``model`` (its engine crashing there) and 200 otherwise."""

    async def answer(request: web.Request) -> web.Response:
        body = await request.json()
        if body["model"] == model:
            return web.json_response({"error": {"message": "engine crashed"}}, status=500)
        return web.json_response({"choices": [{"text": "ok"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    return app


async def test_one_model_failing_at_a_cluster_drains_it_for_that_model_only() -> None:
    """Cluster ``a`` serves ``good`` and ``bad``; every ``bad`` request fails there. Three failed
    answers drain ``a`` for ``bad``: its ``good`` requests are still served there. Until session s39
    failures were counted per cluster, and the same probe drained ``a`` for every model: all 40
    ``good`` requests of the next seconds went to ``b``."""
    async with contextlib.AsyncExitStack() as stack:
        a_url = await stack.enter_async_context(serve_app(_cluster_failing("bad"), host="127.0.0.1", port=0))
        b_url = await stack.enter_async_context(serve_app(_cluster_failing(None), host="127.0.0.1", port=0))
        clusters = [
            {"name": "a", "region": "east", "endpoint": a_url, "models": ["good", "bad"]},
            {"name": "b", "region": "east", "endpoint": b_url, "models": ["good", "bad"]},
        ]
        doc = global_doc(clusters, heartbeats={"required": False}, failover={"ejectionSeconds": 60})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        url = await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))
        http = await stack.enter_async_context(aiohttp.ClientSession())

        async def ask(model: str, n: int) -> tuple[int, str]:
            body = {"model": model, "prompt": f"request {n}"}
            async with http.post(url + "/v1/completions", json=body) as resp:
                await resp.read()
                return resp.status, resp.headers["x-igw-cluster"]

        bad: list[tuple[int, str]] = []
        for n in range(60):  # each plan is a weighted random order: a "bad" request tries a or b first
            bad.append(await ask("bad", n))
            if bad.count((500, "a")) == 3:  # then drained there for "bad"
                break
        assert bad.count((500, "a")) == 3, bad
        good = Counter([await ask("good", n) for n in range(40)])
        assert set(good) == {(200, "a"), (200, "b")}
        async with http.get(url + "/readyz") as resp:
            ready = await resp.json()
        assert ready["clusters"]["a"]["available"] is True
        assert ready["clusters"]["a"]["drained_models"] == ["bad"]
        assert [await ask("bad", n) for n in range(5)] == [(200, "b")] * 5


async def test_a_request_planned_on_a_cluster_whose_connections_are_all_held_goes_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both clusters serve the model; ``slow`` holds every connection of its pool (4 here, 1024 in
    production) with requests it does not answer. A request the plan puts on ``slow`` first moves on
    to ``fast`` at once (counted ``pool-full``; no attempt spent, no failure). Until session s39 it
    waited for one of ``slow``'s connections, up to ``requestTimeoutSeconds``: 7 of 20 such requests
    were still waiting when the client gave up after 8 s."""
    made: list[UpstreamPool] = []

    def first_pool_small(limit: int = 4, **kw: Any) -> UpstreamPool:
        made.append(proxy_session(4 if not made else 1024, **kw))  # slow's pool: 4 connections
        return made[-1]

    monkeypatch.setattr(server, "proxy_session", first_pool_small)
    held = 0
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        nonlocal held
        held += 1
        await release.wait()
        return web.json_response({"choices": [{"text": "late"}]})

    async with contextlib.AsyncExitStack() as stack:
        slow_url = await _serve_cluster(stack, slow)
        fast_url = await _serve_cluster(stack, _answer_ok)
        # slow in the router's region, fast in another: every plan puts slow first (latency-first
        # routing learns fast's quick answers, so with both in one region a loaded machine could send
        # fewer than 4 requests to slow before the plans settled on fast)
        clusters = [
            {"name": "slow", "region": "east", "endpoint": slow_url, "models": [MODEL]},
            {"name": "fast", "region": "west", "endpoint": fast_url, "models": [MODEL]},
        ]
        url = await stack.enter_async_context(_router(clusters, upstream={"requestTimeoutSeconds": 120}))
        http = await stack.enter_async_context(aiohttp.ClientSession())

        async def ask(n: int) -> tuple[int, str]:
            async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": f"p{n}"}) as resp:
                await resp.read()
                return resp.status, resp.headers["x-igw-cluster"]

        stuck = [asyncio.create_task(ask(n)) for n in range(20)]
        try:
            await wait_for(lambda: held >= 4, within=30, what="slow holding its 4 connections")
            answers = await asyncio.wait_for(asyncio.gather(*(ask(n) for n in range(20))), timeout=20)
            assert answers == [(200, "fast")] * 20
            async with http.get(url + "/metrics") as resp:
                metrics = await resp.text()
            assert 'igw_global_upstream_retries_total{cause="pool-full",cluster="slow"}' in metrics
            assert held == 4
        finally:
            release.set()
            await asyncio.gather(*stuck, return_exceptions=True)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole-answer"])
async def test_a_cluster_that_never_finishes_is_cut_at_max_request_seconds(stream: bool) -> None:
    """A cluster that streams forever (a stuck generation: a token, then a keep-alive comment, every
    0.1 s) is within ``requestTimeoutSeconds`` at every gap; a non-streamed request it never answers
    is within it for 30 s per attempt. ``maxRequestSeconds`` bounds the whole request: the stream
    ends with a terminal SSE error event ``route_timeout`` and ``[DONE]``, the other request is a
    504 ``route_timeout``, and the cluster's connection is closed (its handler ends). Until session
    s39 nothing did: the stream and both connections stayed open for ever."""
    handlers_running = 0

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal handlers_running
        handlers_running += 1
        try:
            if not (await request.json()).get("stream"):
                await asyncio.Event().wait()
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            while True:
                await response.write(b'data: {"choices": [{"index": 0, "text": "t"}]}\n\n')
                await asyncio.sleep(0.05)
                await response.write(b": keep-alive\n\n")
                await asyncio.sleep(0.05)
        finally:
            handlers_running -= 1

    async with contextlib.AsyncExitStack() as stack:
        cluster_url = await _serve_cluster(stack, endless)
        clusters = [{"name": "c", "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        upstream = {"requestTimeoutSeconds": 30, "maxRequestSeconds": 1.5}
        url = await stack.enter_async_context(_router(clusters, upstream=upstream))
        http = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)))
        started = time.monotonic()
        body = {"model": MODEL, "prompt": "hello", "stream": stream}
        async with http.post(url + "/v1/completions", json=body) as resp:
            received = await resp.read()
        took = time.monotonic() - started
        assert 1.5 <= took < 5, took
        if stream:
            assert resp.status == 200
            assert received.count(b'"text": "t"') >= 5  # it streamed until the bound
            error, done = received.split(b"\n\n")[-3:-1]
            assert b'"code":"route_timeout"' in error
            assert b"maxRequestSeconds (1.5s)" in error
            assert done == b"data: [DONE]"
        else:
            assert resp.status == 504
            assert (await resp.json())["error"]["code"] == "route_timeout"
        await wait_for(lambda: handlers_running == 0, within=5, what="the cluster's connection closed")


async def test_a_cluster_cut_at_max_request_seconds_before_answering_counts_a_failure() -> None:
    """``frozen`` takes requests and never answers; ``requestTimeoutSeconds`` (30) is above
    ``maxRequestSeconds`` (0.5), so the bound on the whole request ends each such wait. Such a cut is
    the cluster's failure, as the same wait ended by ``requestTimeoutSeconds`` is: three in a row drain
    it and the requests that follow go to ``healthy``. Until session s40 it counted nothing: every
    request the plan put on ``frozen`` first (about half) waited the whole bound and got a 504,
    for as long as the cluster stayed frozen (21 of 40 in the probe)."""

    async def frozen(request: web.Request) -> web.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with contextlib.AsyncExitStack() as stack:
        frozen_url = await _serve_cluster(stack, frozen)
        healthy_url = await _serve_cluster(stack, _answer_ok)
        clusters = [
            {"name": "frozen", "region": "east", "endpoint": frozen_url, "models": [MODEL]},
            {"name": "healthy", "region": "east", "endpoint": healthy_url, "models": [MODEL]},
        ]
        upstream = {"requestTimeoutSeconds": 30, "maxRequestSeconds": 0.5}
        url = await stack.enter_async_context(
            _router(clusters, upstream=upstream, failover={"ejectionSeconds": 60})
        )
        http = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)))

        async def ask(n: int) -> tuple[int, str]:
            async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": f"p{n}"}) as resp:
                await resp.read()
                return resp.status, resp.headers.get("x-igw-cluster", "")

        answers = [await ask(n) for n in range(40)]
        cut = [status for status, _ in answers if status == 504]
        assert len(cut) == 3, answers  # then drained: the rest all answered by healthy
        assert answers[-10:] == [(200, "healthy")] * 10
        async with http.get(url + "/readyz") as resp:
            ready = await resp.json()
        assert ready["clusters"]["frozen"]["drain_reason"] == "failures"


def _retrieval_cluster(*, stored: str | None, failing: str | None) -> web.Application:
    """A cluster's gateway for ``GET /v1/responses/{id}``: ``stored`` is the one response it has (a
    200; any other id a 404); ``failing``: every retrieval answered 500 (``"500"``) or never
    (``"hang"``) instead."""

    async def retrieve(request: web.Request) -> web.Response:
        if failing == "hang":
            await asyncio.sleep(3600)
        if failing == "500":
            return web.json_response({"error": {"message": "engine crashed"}}, status=500)
        response_id = request.match_info["response_id"]
        if response_id != stored:
            return web.json_response(
                {"error": {"message": f"Response with id {response_id} not found"}}, status=404
            )
        return web.json_response({"id": response_id, "object": "response", "status": "completed"})

    app = web.Application()
    app.router.add_get("/v1/responses/{response_id}", retrieve)
    return app


@pytest.mark.parametrize("failing", ["500", "hang"])
async def test_a_cluster_failing_every_retrieval_is_drained_and_no_longer_searched(failing: str) -> None:
    """A cluster whose gateway answers every stored-response retrieval 500 (or never answers it,
    past ``maxRequestSeconds``), asked first by every search (this router's region): until session
    s40 those requests counted no failure, so it was never drained and a response stored on the
    other cluster could not be retrieved (every GET the broken cluster's 500 or a 504). Its failures
    count now: after ``failureThreshold`` it is out, and the search asks the other cluster."""
    async with contextlib.AsyncExitStack() as stack:
        broken_url = await stack.enter_async_context(
            serve_app(_retrieval_cluster(stored=None, failing=failing), host="127.0.0.1", port=0)
        )
        holder_url = await stack.enter_async_context(
            serve_app(_retrieval_cluster(stored="resp_1", failing=None), host="127.0.0.1", port=0)
        )
        clusters = [
            {"name": "broken", "region": "east", "endpoint": broken_url, "models": [MODEL]},
            {"name": "holder", "region": "west", "endpoint": holder_url, "models": [MODEL]},
        ]
        spec = {
            "failover": {"failureThreshold": 2, "ejectionSeconds": 60},
            "upstream": {"maxRequestSeconds": 1},
        }
        url = await stack.enter_async_context(_router(clusters, **spec))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        statuses = []
        for _ in range(4):
            async with http.get(url + "/v1/responses/resp_1") as resp:
                statuses.append((resp.status, resp.headers.get("x-igw-cluster")))
    failed = 500 if failing == "500" else 504
    assert statuses[2:] == [(200, "holder")] * 2, statuses
    assert [status for status, _ in statuses[:2]] == [failed] * 2


async def test_a_request_unanswered_when_the_router_stops_is_a_closing_anthropic_shaped_503() -> None:
    """A request whose cluster has not answered when the stream grace ends: 503 ``shutting_down``,
    on ``/v1/messages`` in Anthropic's shape (``overloaded_error``, ``request-id``), with
    ``Connection: close`` (since session s48), so the SDK's retry opens a new connection rather than
    reusing the pooled one to this stopping replica."""

    async def never(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    cluster = web.Application()
    cluster.router.add_post("/v1/messages", never)
    async with serve_app(cluster, host="127.0.0.1", port=0) as cluster_url, aiohttp.ClientSession() as http:
        clusters = [{"name": "c", "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        listener = serve_app(app, host="127.0.0.1", port=0, limits=ServerLimits(stream_grace_s=0.2))
        url = await listener.__aenter__()
        body = {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}
        asking = asyncio.create_task(http.post(url + "/v1/messages", json=body))
        await asyncio.sleep(0.3)
        await asyncio.wait_for(listener.__aexit__(None, None, None), timeout=30)
        async with await asyncio.wait_for(asking, timeout=30) as resp:
            said = await resp.json()
            assert resp.status == 503
            assert resp.headers["Connection"] == "close"
            assert said["error"]["type"] == "overloaded_error"
            assert said["request_id"] == resp.headers["request-id"] == resp.headers["X-Request-Id"]


def _cluster_without_endpoints(retry_after: str) -> web.Application:
    """A cluster whose gateway has no ready pod for the model: tier 1's 503 ``no_endpoints`` with
    ``retry_after`` (its pool scaling up)."""

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return gateway_error(
            "no_endpoints", "no model server endpoint is ready", headers={"Retry-After": retry_after}
        )

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    return app


@pytest.mark.parametrize("form", ["delta-seconds", "http-date"])
async def test_a_cluster_503_drains_its_model_for_its_retry_after(
    form: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Cluster ``a`` answers every request 503 ``no_endpoints`` with ``Retry-After: 30`` (or an HTTP
    date 30 s ahead); ``b`` serves. Three such answers drain ``a`` for the model for those 30 s,
    not for ``ejectionSeconds`` (5): 10 s on it is still out and every request goes to ``b``; past
    30 s it is back (slow-starting). Until session s50 ``a`` was back after 5 s and three more
    requests were spent on it each time."""
    retry_after = "30" if form == "delta-seconds" else email.utils.formatdate(time.time() + 30, usegmt=True)
    now = [1000.0]
    async with contextlib.AsyncExitStack() as stack:
        a_url = await stack.enter_async_context(
            serve_app(_cluster_without_endpoints(retry_after), host="127.0.0.1", port=0)
        )
        b_url = await _serve_cluster(stack, _answer_ok)
        clusters = [
            {"name": "a", "region": "east", "endpoint": a_url, "models": [MODEL]},
            {"name": "b", "region": "east", "endpoint": b_url, "models": [MODEL]},
        ]
        doc = global_doc(clusters, heartbeats={"required": False}, failover={"ejectionSeconds": 5})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False, clock=lambda: now[0])
        url = await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))
        http = await stack.enter_async_context(aiohttp.ClientSession())

        async def ask(n: int) -> tuple[int, str]:
            async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": f"r{n}"}) as resp:
                await resp.read()
                return resp.status, resp.headers["x-igw-cluster"]

        async def drained() -> list[str]:
            async with http.get(url + "/readyz") as resp:
                drained_models: list[str] = (await resp.json())["clusters"]["a"]["drained_models"]
                return drained_models

        for n in range(200):  # each request tries a first or b first; a's 503 moves on to b
            assert await ask(n) == (200, "b")
            if await drained():
                break
        assert await drained() == [MODEL]
        if form == "delta-seconds":  # the drain's length as made (an HTTP date's: 29 to 30 s)
            assert f"cluster a drained for model {MODEL!r} for 30 s" in caplog.text
        now[0] += 10.0  # past ejectionSeconds, within the Retry-After
        assert await drained() == [MODEL]
        assert Counter([await ask(n) for n in range(20)]) == {(200, "b"): 20}
        now[0] += 21.0  # past the Retry-After (an HTTP date's: at most 30 s by then)
        assert await drained() == []
