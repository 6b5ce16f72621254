"""Two router replicas on loopback in front of three clusters in two regions, real Redis, real HTTP.

Clusters here are OpenAI servers (``FakeModelServer``) whose heartbeats the test writes to Redis in
the tier-1 format, so a crash (server and heartbeat stop together) can be staged precisely; the
tier-1 publisher itself is covered by ``test_heartbeat.py`` and the process-level test below.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
import redis.asyncio as redis_asyncio
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.errors import gateway_error
from igw.gateway.model_router import NO_MATCH_MESSAGE
from igw.gateway.serving import serve_app
from igw.gateway.ticker import Ticker
from igw.global_router.config import parse_global_config
from igw.global_router.fleet import Fleet
from igw.global_router.server import ROUTER_KEY, create_global_app
from tests.gateway.fake_model_server import FakeModelServer
from tests.gateway.support import streams_left_early, wait_for
from tests.global_router.support import MODEL, beat, global_doc
from tests.security.helpers import RedisServer

PREFIX = "e2e:hb:"
FAST = {
    "failover": {
        "heartbeatStalenessSeconds": 0.5,
        "failureThreshold": 2,
        "ejectionSeconds": 1,
        "slowStartSeconds": 2,
    },
    "heartbeats": {"pollIntervalSeconds": 0.05},
}
STEADY = {"failover": {**FAST["failover"], "heartbeatStalenessSeconds": 5}}
"""FAST with 5 s of heartbeat staleness, for tests about requests, not heartbeats: on a loaded machine
(or while the SDK builds its types on a process's first call, ~0.5 s) the 0.5 s staleness drained
clusters under them (``test_429_and_503_are_retried_on_another_cluster`` failed so once in a full
run of session s35: 503 ``no_healthy_cluster``)."""


@dataclass
class Cluster:
    name: str
    region: str
    server: FakeModelServer
    alive: bool = True
    seq: int = 0
    saturation: float = 0.0
    spoiled: dict[str, Any] | None = None
    """Fields the published heartbeat carries instead of the tier-1 format's values (none: all good)."""


def _failed_over(fleet: Fleet, cluster: str) -> bool:
    """Whether ``fleet`` has recorded a failover away from ``cluster``."""
    return any(t.cluster == cluster and t.kind == "failover" for t in fleet.transitions)


def _drained_for(fleet: Fleet, cluster: str, reason: str) -> bool:
    """Whether ``fleet`` has ``cluster`` drained for ``reason``."""
    return fleet.health[cluster].drain_reason == reason


def _all_drained(fleet: Fleet) -> bool:
    """Whether ``fleet`` considers no cluster available."""
    return not any(h.available() for h in fleet.health.values())


@dataclass
class Fixture:
    clusters: dict[str, Cluster]
    urls: list[str]
    fleets: list[Fleet]
    http: aiohttp.ClientSession
    redis: Any

    async def post(self, body: dict[str, Any], *, replica: int = 0, **kw: Any) -> aiohttp.ClientResponse:
        return await self.http.post(self.urls[replica] + "/v1/completions", json=body, **kw)

    async def crash(self, name: str) -> float:
        """Stop the cluster's server and its heartbeats together (no goodbye); returns when."""
        cluster = self.clusters[name]
        cluster.alive = False
        await cluster.server.stop()
        return time.monotonic()

    async def revive(self, name: str) -> float:
        cluster = self.clusters[name]
        port = cluster.server.port
        cluster.server = FakeModelServer(name, port=port)
        await cluster.server.start()
        cluster.alive = True
        return time.monotonic()

    async def metric(self, name: str, replica: int = 0, **labels: str) -> float:
        async with self.http.get(self.urls[replica] + "/metrics") as resp:
            text = await resp.text()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total


async def _publish(fx: Fixture) -> None:
    for c in fx.clusters.values():
        if c.alive:
            c.seq += 1
            document = beat(c.name, seq=c.seq, region=c.region, saturation=c.saturation).encode()
            if c.spoiled is not None:
                document = orjson.dumps({**orjson.loads(document), **c.spoiled})
            await fx.redis.set(PREFIX + c.name, document, px=10_000)


@contextlib.asynccontextmanager
async def fleet(redis_server: RedisServer, **spec: Any) -> AsyncIterator[Fixture]:
    servers = {
        "east-a": ("east", FakeModelServer("east-a")),
        "east-b": ("east", FakeModelServer("east-b")),
        "west-a": ("west", FakeModelServer("west-a")),
    }
    for _, server in servers.values():
        await server.start()
    clusters = {name: Cluster(name, region, server) for name, (region, server) in servers.items()}
    doc = global_doc(
        [
            {"name": c.name, "region": c.region, "endpoint": f"http://{c.server.key}", "models": [MODEL]}
            for c in clusters.values()
        ],
        **{**FAST, **spec},
    )
    doc["spec"]["heartbeats"]["redis"] = {"url": redis_server.url, "keyPrefix": PREFIX}
    config = parse_global_config(doc)
    client = redis_asyncio.Redis.from_url(redis_server.url)
    async with contextlib.AsyncExitStack() as stack:
        # Closed however the test ends: a failing test left it open, and its connection's
        # ResourceWarning then failed whichever test ran next on the same worker.
        stack.push_async_callback(client.aclose)  # type: ignore[attr-defined]
        http = await stack.enter_async_context(aiohttp.ClientSession())
        fx = Fixture(clusters=clusters, urls=[], fleets=[], http=http, redis=client)
        publisher = Ticker(lambda: _publish(fx), interval_s=0.1, name="test-heartbeats")
        publisher.start()
        await asyncio.sleep(0.15)
        for seed in (1, 2):
            app = create_global_app(config, rng=random.Random(seed))
            fx.urls.append(await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0)))
            fx.fleets.append(app[ROUTER_KEY].fleet)
        try:
            yield fx
        finally:
            await publisher.stop()
            for c in clusters.values():
                await c.server.stop()


async def served_by(fx: Fixture, n: int, *, replica: int = 0) -> Counter[str]:
    where: Counter[str] = Counter()
    for _ in range(n):
        async with await fx.post({"model": MODEL, "prompt": "hello"}, replica=replica) as resp:
            assert resp.status == 200, await resp.text()
            where[resp.headers["x-igw-cluster"]] += 1
    return where


async def test_same_region_first_spread_over_both_and_counted(redis_server: RedisServer) -> None:
    async with fleet(redis_server, **STEADY) as fx:
        where = await served_by(fx, 40) + await served_by(fx, 40, replica=1)
        assert set(where) == {"east-a", "east-b"}
        assert min(where.values()) > 10
        for replica in (0, 1):
            assert await fx.metric("igw_global_routing_decisions_total", replica, reason="same-region") == 40
            assert await fx.metric("igw_global_requests_total", replica, code="200") == 40


async def test_cluster_crash_is_redirected_fast_with_no_failed_request(redis_server: RedisServer) -> None:
    async with fleet(redis_server) as fx:
        statuses: Counter[int] = Counter()
        stop = asyncio.Event()

        async def load(replica: int) -> None:
            while not stop.is_set():
                async with await fx.post({"model": MODEL, "prompt": "x"}, replica=replica) as resp:
                    statuses[resp.status] += 1
                    await resp.read()

        loaders = [asyncio.get_running_loop().create_task(load(r)) for r in (0, 1, 0, 1)]
        await asyncio.sleep(0.5)
        killed_at = await fx.crash("east-a")
        for f in fx.fleets:
            await wait_for(partial(_failed_over, f, "east-a"), within=10, what="east-a drained")
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*loaders)
        assert set(statuses) == {200}, statuses
        for f in fx.fleets:
            drained = next(t for t in f.transitions if t.cluster == "east-a" and t.kind == "failover")
            # Failing connects drain it before the 0.5 s staleness would; the target is 5 s.
            assert drained.at - killed_at < 5.0
            assert drained.reason in {"failures", "stale"}
        after = await served_by(fx, 20)
        assert "east-a" not in after


async def test_stale_heartbeat_alone_drains_a_silent_cluster(redis_server: RedisServer) -> None:
    async with fleet(redis_server) as fx:
        # Every cluster available on both replicas first: on a loaded machine a replica whose first
        # polls came late drains every cluster as stale at start and brings them back, and a drain
        # seen then is not the one this test is about (it flaked so in CI).
        await wait_for(
            lambda: all(h.available() for f in fx.fleets for h in f.health.values()),
            within=10,
            what="every cluster available on both replicas",
        )
        stale_before = await fx.metric("igw_global_failover_events_total", cluster="east-b", reason="stale")
        fx.clusters["east-b"].alive = False  # heartbeats stop, server still answers
        t0 = time.monotonic()
        await wait_for(lambda: not fx.fleets[0].health["east-b"].available(), within=10, what="drain")
        assert fx.fleets[0].health["east-b"].drain_reason == "stale"
        # Replicas share nothing but the heartbeats, and agree.
        await wait_for(lambda: not fx.fleets[1].health["east-b"].available(), within=10, what="replica 1")
        expected = {"east-a": True, "east-b": False, "west-a": True}
        await wait_for(
            lambda: all({n: h.available() for n, h in f.health.items()} == expected for f in fx.fleets),
            within=10,
            what="both replicas agree: east-b alone drained",
        )
        assert time.monotonic() - t0 >= 0.5  # not before the staleness threshold
        assert "east-b" not in await served_by(fx, 20)
        stale_after = await fx.metric("igw_global_failover_events_total", cluster="east-b", reason="stale")
        assert stale_after - stale_before == 1  # a start-up drain on a loaded machine counted before


async def test_return_ramps_up_gradually(redis_server: RedisServer) -> None:
    async with fleet(redis_server, failover={**FAST["failover"], "slowStartSeconds": 3}) as fx:
        await fx.crash("east-a")
        await wait_for(lambda: not fx.fleets[0].health["east-a"].available(), within=10, what="drain")
        await fx.revive("east-a")
        await wait_for(lambda: fx.fleets[0].health["east-a"].available(), within=10, what="return")
        early = fx.fleets[0].health["east-a"].ramp(now=time.monotonic())
        assert early < 0.5
        assert 0 < await fx.metric("igw_global_cluster_ramp", cluster="east-a") < 1
        first = await served_by(fx, 40)
        await wait_for(
            lambda: fx.fleets[0].health["east-a"].ramp(now=time.monotonic()) >= 1.0, within=10, what="full"
        )
        later = await served_by(fx, 40)
        assert first["east-a"] < later["east-a"]
        assert await fx.metric("igw_global_recovery_events_total", cluster="east-a") == 1


async def test_a_malformed_heartbeat_drains_its_cluster_fails_no_request(redis_server: RedisServer) -> None:
    # A P99 TTFT of -0.05 s (no working gateway publishes one) divided the routing weight by zero:
    # every request for the model failed, whichever cluster it would have gone to.
    async with fleet(redis_server) as fx:
        assert set(await served_by(fx, 20)) == {"east-a", "east-b"}
        fx.clusters["east-a"].spoiled = {"ttft_p99_s": -0.05}
        for f in fx.fleets:
            await wait_for(partial(_drained_for, f, "east-a", "malformed"), within=10, what="east-a drained")
        where = await served_by(fx, 20) + await served_by(fx, 20, replica=1)
        assert where == Counter({"east-b": 40})
        assert await fx.metric("igw_global_failover_events_total", cluster="east-a", reason="malformed") == 1
        async with fx.http.get(fx.urls[0] + "/readyz") as resp:
            assert (await resp.json())["clusters"]["east-a"]["drain_reason"] == "malformed"
        fx.clusters["east-a"].spoiled = None
        await wait_for(lambda: fx.fleets[0].health["east-a"].available(), within=10, what="east-a back")
        assert await fx.metric("igw_global_recovery_events_total", cluster="east-a") == 1


async def test_region_down_goes_cross_region_and_shows_in_metrics(redis_server: RedisServer) -> None:
    # maxAttempts 1: connect failures to the dead region must not use up the attempts
    async with fleet(redis_server, routing={"maxAttempts": 1}) as fx:
        await fx.crash("east-a")
        await fx.crash("east-b")
        where = await served_by(fx, 20)
        assert where == Counter({"west-a": 20})
        async with await fx.post({"model": MODEL, "prompt": "x"}) as resp:
            assert resp.headers["x-igw-region"] == "west"
            # The router names itself without versions; the cluster's own Server is not relayed.
            assert resp.headers.getall("Server") == ["igw"]
        cross = await fx.metric("igw_global_request_duration_seconds_count", locality="cross-region")
        assert cross >= 20
        assert await fx.metric("igw_global_routing_decisions_total", reason="cross-region") >= 20


async def test_stream_from_a_dying_cluster_ends_with_a_clean_sse_error(redis_server: RedisServer) -> None:
    async with fleet(redis_server) as fx:
        for name in ("east-a", "east-b"):
            fx.clusters[name].server.die_after = 2
            fx.clusters[name].server.tokens = 5
        async with await fx.post({"model": MODEL, "prompt": "x", "stream": True}) as resp:
            assert resp.status == 200
            body = await resp.read()
        assert b"tok1" in body
        assert b'"type":"upstream_error"' in body
        assert body.endswith(b"data: [DONE]\n\n")


def _east_answered_by(fx: Fixture, url: str) -> None:
    """Point both same-region clusters (east-a, east-b) of every router replica at ``url``."""
    for f in fx.fleets:
        for name in ("east-a", "east-b"):
            f.clusters[name] = replace(f.clusters[name], endpoint=url)


async def test_429_and_503_are_retried_on_another_cluster(redis_server: RedisServer) -> None:
    async def busy(_request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "busy"}}, status=429, headers={"Retry-After": "1"})

    app = web.Application()
    app.router.add_post("/v1/completions", busy)
    async with fleet(redis_server, **STEADY) as fx, serve_app(app, host="127.0.0.1", port=0) as busy_url:
        _east_answered_by(fx, busy_url)  # every request must end in west-a
        where = await served_by(fx, 10)
        assert where == Counter({"west-a": 10})
        assert await fx.metric("igw_global_upstream_retries_total", cause="429") >= 10
        # 429 is back-pressure, not a failure: the clusters stay available.
        assert fx.fleets[0].health["east-a"].available()


def _failure_drains(fx: Fixture) -> int:
    """Clusters either replica drained for failing requests so far."""
    return sum(1 for f in fx.fleets for t in f.transitions if t.kind == "failover" and t.reason == "failures")


async def test_a_poison_request_retried_by_the_sdk_drains_no_cluster(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A body every engine answers with 500, sent three times through the OpenAI SDK (two retries
    each): before session s34 the nine failures drained all three clusters and every caller got 503
    for the ejection's length. A retry of the same body goes to another cluster, and failing there
    too it is the request's fault, counted at neither."""
    caplog.set_level(logging.WARNING, logger="igw.global_router")
    async with fleet(redis_server, **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.poison = b"POISON"
        client = openai.AsyncOpenAI(base_url=fx.urls[0] + "/v1", api_key="x", max_retries=2)
        try:
            for _ in range(3):
                with pytest.raises(openai.InternalServerError):
                    await client.completions.create(model=MODEL, prompt="POISON please")
        finally:
            await client.close()
        tried = {
            name for name, c in fx.clusters.items() if any(b"POISON" in r.body for r in c.server.received)
        }
        assert len(tried) >= 2  # the SDK's retry went elsewhere
        assert _failure_drains(fx) == 0
        assert all(h.available() for h in fx.fleets[0].health.values())
        assert await fx.metric("igw_global_request_faults_total") == 1
        faults = [r for r in caplog.records if "taken for the request's fault" in r.getMessage()]
        assert len(faults) == 1
        assert "POISON" not in caplog.text  # the body is never logged
        assert sum((await served_by(fx, 10)).values()) == 10


async def test_failing_requests_never_drain_more_than_half_the_clusters(redis_server: RedisServer) -> None:
    """Distinct bodies every engine fails on, each sent once (no retry to tell them apart from a
    failing cluster): before session s34 they drained every cluster. At most maxEjectionPercent (50 %:
    one of three) is out for failures at once; the refused ejections are counted."""
    async with fleet(redis_server, **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.poison = b"POISON"
        for n in range(12):
            async with await fx.post({"model": MODEL, "prompt": f"POISON {n}"}) as resp:
                assert resp.status == 500
        f = fx.fleets[0]
        f.evaluate()
        drained = [n for n, h in f.health.items() if _drained_for_model(f, n, MODEL) or not h.available()]
        assert len(drained) <= 1
        assert await fx.metric("igw_global_failover_refused_total") >= 1
        assert sum((await served_by(fx, 10)).values()) == 10


def _drained_for_model(fleet: Fleet, cluster: str, model: str) -> bool:
    """Whether ``fleet`` has ``cluster`` drained for ``model`` (its failed answers)."""
    clusters: dict[str, dict[str, Any]] = fleet.readiness()[1]["clusters"]
    return model in clusters[cluster]["drained_models"]


async def test_a_cluster_failing_every_request_is_still_drained(redis_server: RedisServer) -> None:
    """Drained for the model it fails (its only one here: no request goes there)."""
    async with fleet(redis_server, **STEADY) as fx:
        fx.clusters["east-a"].server.infer_status = 500
        for n in range(30):
            async with await fx.post({"model": MODEL, "prompt": f"request {n}"}) as resp:
                await resp.read()
            if _drained_for_model(fx.fleets[0], "east-a", MODEL):
                break
        assert _drained_for_model(fx.fleets[0], "east-a", MODEL)
        assert "east-a" not in await served_by(fx, 10)


async def test_a_request_a_clusters_gateway_stopped_waiting_for_is_not_tried_elsewhere(
    redis_server: RedisServer,
) -> None:
    """A tier-1 gateway's 504 for a request it stopped waiting for (its routeTimeout, responseTimeout,
    an unresponsive pod: the answer ``gateway_error`` makes) is relayed, not sent to the next cluster,
    whose model server would do the work again (before session s34: retried on every cluster, the
    client waiting for each). A 504 without the gateway's marker (a proxy's) is still retried."""
    calls: Counter[str] = Counter()

    def answering(kind: str) -> web.Application:
        async def answer(_request: web.Request) -> web.StreamResponse:
            calls[kind] += 1
            if kind == "stopped":
                return gateway_error("route_timeout", "routeTimeout of 300s exceeded")
            return web.json_response({"error": {"message": "gateway timeout"}}, status=504)

        app = web.Application()
        app.router.add_post("/v1/completions", answer)
        return app

    async with (
        fleet(redis_server, **STEADY) as fx,
        serve_app(answering("stopped"), host="127.0.0.1", port=0) as stopped_url,
        serve_app(answering("proxy"), host="127.0.0.1", port=0) as proxy_url,
    ):
        for f in fx.fleets:
            f.clusters["east-a"] = replace(f.clusters["east-a"], endpoint=stopped_url)
            f.clusters["east-b"] = replace(f.clusters["east-b"], endpoint=stopped_url)
        async with await fx.post({"model": MODEL, "prompt": "long"}) as resp:
            assert resp.status == 504
            assert resp.headers["X-Igw-Error-Code"] == "route_timeout"
            assert (await resp.json())["error"]["code"] == "route_timeout"
        assert calls["stopped"] == 1
        for f in fx.fleets:
            f.clusters["east-a"] = replace(f.clusters["east-a"], endpoint=proxy_url)
            f.clusters["east-b"] = replace(f.clusters["east-b"], endpoint=proxy_url)
        async with await fx.post({"model": MODEL, "prompt": "short"}) as resp:
            assert resp.status == 200  # both east clusters' proxies answered 504: west-a served it
            assert resp.headers["x-igw-cluster"] == "west-a"
        assert calls["proxy"] == 2


async def test_a_cluster_busy_searching_for_responses_is_skipped_without_counting_a_failure(
    redis_server: RedisServer,
) -> None:
    """A tier-1 gateway whose searches for stored responses are all in flight answers a continuation
    503 ``response_search_busy``: busy, not broken. The router tries the next cluster and counts no
    failure (before session s34 each such answer counted: a flood of made-up continuation ids drained
    clusters)."""
    asked: Counter[str] = Counter()

    async def busy(request: web.Request) -> web.StreamResponse:
        asked[request.path] += 1
        return gateway_error("response_search_busy", "searching already", headers={"Retry-After": "1"})

    app = web.Application()
    app.router.add_post("/v1/responses", busy)
    async with fleet(redis_server, **STEADY) as fx, serve_app(app, host="127.0.0.1", port=0) as busy_url:
        _east_answered_by(fx, busy_url)
        for n in range(6):
            body = {"model": MODEL, "input": "hi", "previous_response_id": f"resp_made_up_{n}"}
            async with fx.http.post(fx.urls[0] + "/v1/responses", json=body) as resp:
                assert resp.status == 404  # west-a, the last cluster, does not store it either
        assert asked["/v1/responses"] >= 6
        assert _failure_drains(fx) == 0
        assert all(h.consecutive_failures == 0 for h in fx.fleets[0].health.values())


async def test_a_relayed_404_ends_the_search_for_a_stored_response(redis_server: RedisServer) -> None:
    """A continuation no cluster is known to store moves on from a cluster's 404, but a JSON 404
    over 1 MiB is relayed as it arrives, and then it is the answer. Before session s42 the search went
    on: the next cluster's 404 was written after it on the same connection (4,194,768 bytes, two
    responses for one request), and the client's next request there read it as its own answer."""
    asked: Counter[str] = Counter()
    large = orjson.dumps({"error": {"message": "x" * (2 * 1024 * 1024), "code": "not_found"}})

    async def not_stored(request: web.Request) -> web.StreamResponse:
        asked[request.path] += 1
        await request.read()
        return web.Response(status=404, body=large, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/responses", not_stored)
    one_connection = aiohttp.TCPConnector(limit=1)
    async with (
        fleet(redis_server, **STEADY) as fx,
        serve_app(app, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession(connector=one_connection) as http,
    ):
        _east_answered_by(fx, url)
        body = {"model": MODEL, "input": "hi", "previous_response_id": "resp_made_up"}
        async with http.post(fx.urls[0] + "/v1/responses", json=body) as resp:
            assert resp.status == 404
            assert await resp.read() == large
        async with http.get(fx.urls[0] + "/metrics") as resp:  # the same connection
            assert resp.status == 200
            assert resp.content_type == "text/plain"
            assert (await resp.text()).startswith("#")
        assert asked["/v1/responses"] == 1


async def test_errors_have_the_openai_shape(redis_server: RedisServer) -> None:
    async with fleet(redis_server) as fx:
        async with await fx.post({"model": "nope", "prompt": "x"}) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"
            assert resp.headers.getall("Server") == ["igw"]
        async with fx.http.post(fx.urls[0] + "/v1/completions", data=b"{") as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["type"] == "invalid_request_error"
        async with await fx.post({"prompt": "x"}) as resp:  # no model: tier 1's answer
            assert resp.status == 404
            assert (await resp.json())["error"]["param"] == "model"
        async with await fx.post({"model": "llama\r\nX-Injected: 1", "prompt": "x"}) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["message"] == "'model' must not contain control characters"
        hijack = {
            "model": MODEL,
            "input": "x",
            "request_id": "resp_someone_elses",
        }  # the id vLLM stores under
        async with fx.http.post(fx.urls[0] + "/v1/responses", json=hijack) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "request_id"
        assert not [r for c in fx.clusters.values() for r in c.server.received if b"someone" in r.body]
        for name in list(fx.clusters):
            await fx.crash(name)
        # Every heartbeat stops at once, which the router cannot tell from a store refusing the
        # gateways' writes (staleness suspended: test_store_faults.py); the refused connections drain them.
        for replica in range(len(fx.urls)):
            for _ in range(2):  # failureThreshold 2: each request tries every cluster
                async with await fx.post({"model": MODEL, "prompt": "x"}, replica=replica) as resp:
                    assert resp.status == 503
        for f in fx.fleets:
            await wait_for(partial(_all_drained, f), within=10, what="all drained")
        told = set()
        for _ in range(20):  # a burst refused at once is not told to come back in the same second
            async with await fx.post({"model": MODEL, "prompt": "x"}) as resp:
                assert resp.status == 503
                assert (await resp.json())["error"]["code"] == "no_healthy_cluster"
                told.add(resp.headers["Retry-After"])
        assert told == {"1", "2"}  # 1 s, spread by a second (every one told 1 until session s43)
        async with fx.http.get(fx.urls[0] + "/readyz") as resp:
            assert resp.status == 503
        async with fx.http.get(fx.urls[0] + "/v1/models") as resp:
            assert (await resp.json())["data"] == []


async def test_a_body_without_a_model_name_is_routed_by_the_header(
    redis_server: RedisServer,
) -> None:
    """A body without ``model``, with ``null`` or with ``""`` (which vLLM reads as none: its base
    model) is routed by its ``x-gateway-model-name`` header, as at tier 1 (igw.gateway.request_body);
    the cluster's gateway gets body and header as sent, and writes the header's model into the body
    its pod gets. Before session s39 an empty name ignored the header: 400 "'model' is required"
    here, 404 ``model_not_found`` at tier 1. Without the header either, tier 1's 404 (the message
    AWS documents); until session s40 a 400 "'model' is required" here."""
    async with fleet(redis_server, **STEADY) as fx:
        for body in ({"prompt": "x"}, {"model": None, "prompt": "x"}, {"model": "", "prompt": "x"}):
            async with await fx.post(body, headers={"x-gateway-model-name": MODEL}) as resp:
                assert resp.status == 200, (body, await resp.text())
                served = fx.clusters[resp.headers["x-igw-cluster"]].server.received[-1]
            assert orjson.loads(served.body) == body
            assert served.headers["x-gateway-model-name"] == MODEL
            async with await fx.post(body) as resp:  # no header either: no model, as tier 1 answers
                assert resp.status == 404
                error = (await resp.json())["error"]
                assert (error["code"], error["param"]) == ("model_not_found", "model")
                assert error["message"] == NO_MATCH_MESSAGE


async def test_model_rate_limit_is_shared_by_both_replicas(redis_server: RedisServer) -> None:
    limits = {
        "rateLimits": {"backend": "redis", "redis": {"url": redis_server.url, "keyPrefix": "e2e:rl:"}},
        "modelRateLimits": [{"tenant": "*", "model": MODEL, "requestsPerSecond": 0.001, "burst": 4}],
    }
    async with fleet(redis_server, **limits, **STEADY) as fx:
        codes: Counter[int] = Counter()
        for i in range(10):
            async with await fx.post({"model": MODEL, "prompt": "x"}, replica=i % 2) as resp:
                codes[resp.status] += 1
                if resp.status == 429:
                    body = await resp.json()
                    assert body["error"]["code"] == "rate_limit_exceeded"
                    assert int(resp.headers["Retry-After"]) >= 1
        assert codes == Counter({200: 4, 429: 6})
        hits = sum(
            [await fx.metric("igw_global_ratelimit_hits_total", replica=r, model=MODEL) for r in (0, 1)]
        )
        assert hits == 6


def _token_limits(redis_server: RedisServer, key_prefix: str) -> dict[str, Any]:
    """A 600-token model limit for every tenant (refilled at one token a second), requests unlimited."""
    return {
        "rateLimits": {"backend": "redis", "redis": {"url": redis_server.url, "keyPrefix": key_prefix}},
        "modelRateLimits": [
            {
                "tenant": "*",
                "model": MODEL,
                "requestsPerSecond": 100,
                "tokensPerMinute": 60,
                "tokenBurst": 600,
            }
        ],
    }


async def test_a_background_response_is_charged_its_output_bound(redis_server: RedisServer) -> None:
    """Answered queued with no usage, generated afterwards: charged its prompt and
    ``max_output_tokens`` when accepted (before session s35, nothing: background responses escaped
    the token limits at tier 2)."""
    async with fleet(redis_server, **_token_limits(redis_server, "e2e:bg:"), **STEADY) as fx:
        statuses = []
        for i in range(4):
            body = {"model": MODEL, "input": "x", "max_output_tokens": 180, "background": True}
            async with fx.http.post(fx.urls[i % 2] + "/v1/responses", json=body) as resp:
                statuses.append(resp.status)
                if resp.status == 200:
                    assert (await resp.json())["status"] == "queued"
        # 600 tokens, 181 charged each and asked of the bucket at admission (the prompt's estimate
        # and the output bound, as tier 1 asks since session s39): 57 left for the fourth
        assert statuses == [200, 200, 200, 429]


def _tenant_token_limits(redis_server: RedisServer, key_prefix: str) -> dict[str, Any]:
    """:func:`_token_limits` as the tenant-wide ``rateLimits`` (the request guard's), no model limits."""
    default = {"requestsPerSecond": 100, "tokensPerMinute": 60, "tokenBurst": 600}
    redis = {"url": redis_server.url, "keyPrefix": key_prefix}
    return {"rateLimits": {"backend": "redis", "redis": redis, "default": default}}


@pytest.mark.parametrize("limits", [_token_limits, _tenant_token_limits], ids=["per-model", "tenant-wide"])
async def test_a_background_response_s_bound_is_settled_by_the_poll_that_shows_its_usage(
    redis_server: RedisServer, limits: Callable[[RedisServer, str], dict[str, Any]]
) -> None:
    """The bound charged when a background response was accepted is settled by the first poll
    (at either replica) whose answer shows the usage: the tenant is credited the bound less the 5
    tokens generated (before session s37, never: the bound stayed charged)."""
    async with fleet(redis_server, **limits(redis_server, "e2e:bgs:"), **STEADY) as fx:
        body = {"model": MODEL, "input": "x", "max_output_tokens": 180, "background": True}
        accepted: list[str] = []
        for i in range(4):
            async with fx.http.post(fx.urls[i % 2] + "/v1/responses", json=body) as resp:
                if resp.status == 200:
                    accepted.append((await resp.json())["id"])
        assert len(accepted) == 3  # the fourth was refused (the test above)
        for i, response_id in enumerate(accepted * 2):  # each polled twice, at the other replica
            async with fx.http.get(f"{fx.urls[(i + 1) % 2]}/v1/responses/{response_id}") as resp:
                assert resp.status == 200
                assert (await resp.json())["usage"]["output_tokens"] == 5
        statuses = []
        for i in range(4):  # 3 x 175 credited: the bucket holds about 57 + 525 = 582 again
            async with fx.http.post(fx.urls[i % 2] + "/v1/responses", json=body) as resp:
                statuses.append(resp.status)
        assert statuses == [200, 200, 200, 429], statuses


@pytest.mark.parametrize("limits", [_token_limits, _tenant_token_limits], ids=["per-model", "tenant-wide"])
@pytest.mark.parametrize("bound", [{"max_tokens": 300}, {"max_tokens": 100, "n": 3}], ids=["max_tokens", "n"])
async def test_admission_needs_the_prompt_and_the_output_bound_and_usage_is_charged(
    redis_server: RedisServer, limits: Callable[[RedisServer, str], dict[str, Any]], bound: dict[str, int]
) -> None:
    """Admission asks the token bucket for what tier 1 asks (``estimated_tokens``: the prompt's
    estimate and ``max_tokens`` for each of the ``n`` answers), and the answer's usage is what is
    debited. A tenant left 193 of its 600 tokens is refused a request that may generate 300; before
    session s39 tier 2 asked for the prompt's estimate alone (one token) and admitted it."""
    async with fleet(redis_server, **limits(redis_server, "e2e:bound:"), **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.tokens = 400
        async with await fx.post({"model": MODEL, "prompt": "x"}) as resp:  # 7 + 400 tokens used
            assert resp.status == 200, await resp.text()
        async with await fx.post({"model": MODEL, "prompt": "x", **bound}) as resp:
            assert resp.status == 429, await resp.text()
            assert "(tokens)" in (await resp.json())["error"]["message"]
            assert 100 <= int(resp.headers["Retry-After"]) <= 132  # 108 tokens missing, at 1 a second; spread
        async with await fx.post({"model": MODEL, "prompt": "x", "max_tokens": 150}) as resp:
            assert resp.status == 200, await resp.text()  # within what is left: admitted, 407 debited
        async with await fx.post({"model": MODEL, "prompt": "x", "max_tokens": 1}) as resp:
            assert resp.status == 429  # the usage (407), not the bound (151), was debited: in debt


async def test_a_stream_left_before_its_end_is_charged_the_tokens_relayed(redis_server: RedisServer) -> None:
    """Before session s35 a client that read a stream and closed the connection before its end was
    charged nothing at tier 2: ten such streams of 90 tokens each went through a 600-token limit."""
    async with fleet(redis_server, **_token_limits(redis_server, "e2e:left:"), **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.tokens, c.server.token_delay_s = 100, 0.002
        body = {"model": MODEL, "prompt": "tell me", "stream": True}
        statuses = await streams_left_early(lambda: fx.post(body), streams=10, events=90)  # of 100
        assert 6 <= statuses.count(200) <= 7, statuses  # about 92 tokens charged per stream
        assert statuses[-1] == 429


async def test_a_large_whole_answer_left_before_its_end_is_charged_the_bytes_relayed(
    redis_server: RedisServer,
) -> None:
    """A non-streamed answer past the router's whole-answer buffer is relayed as it arrives, its
    usage at its end: until session s42 a client that read its first megabyte and hung up was
    charged its prompt alone at tier 2, so three such 32 MB answers went through a 600-token limit.
    Now the bytes relayed are charged (four to a token): the first empties the bucket."""
    async with fleet(redis_server, **_token_limits(redis_server, "e2e:whole:"), **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.tokens = 32_000_000  # "t" a token: larger than the socket buffers on the way hold
        statuses = []
        for _ in range(3):
            async with await fx.post({"model": MODEL, "prompt": "tell me"}) as resp:
                statuses.append(resp.status)
                if resp.status == 200:
                    await resp.content.readexactly(1 << 20)  # a megabyte, then the client leaves
                    resp.close()
        assert statuses[0] == 200
        assert 429 in statuses[1:], statuses


async def test_a_stream_is_charged_its_usage_however_many_tokens_an_event_carries(
    redis_server: RedisServer,
) -> None:
    """Before session s36 tier 2 charged a stream whose client did not ask for its usage one token
    per event: under speculative decoding (three tokens per event) twelve streams of 90 tokens went
    through a 600-token limit. It asks the cluster for the usage chunk and keeps it from the client."""
    async with fleet(redis_server, **_token_limits(redis_server, "e2e:spec:"), **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.tokens, c.server.tokens_per_event = 90, 3
        statuses = []
        for _ in range(12):
            body = {"model": MODEL, "prompt": "tell me", "stream": True}
            async with await fx.post(body) as resp:
                statuses.append(resp.status)
                streamed = await resp.read()
            if resp.status == 200:
                assert b'"usage"' not in streamed  # not asked for: not relayed
                assert streamed.endswith(b"data: [DONE]\n\n")
        assert 6 <= statuses.count(200) <= 7, statuses  # 97 tokens charged per stream
        assert statuses[-1] == 429


async def test_a_stream_without_usage_is_charged_its_events(redis_server: RedisServer) -> None:
    """A cluster whose engine reports no usage: before session s36 a stream it answered to its end
    was charged nothing at tier 2 (only a stream left early was charged its events)."""
    async with fleet(redis_server, **_token_limits(redis_server, "e2e:nousage:"), **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.tokens, c.server.usage_chunk = 90, False
        statuses = []
        for _ in range(10):
            async with await fx.post({"model": MODEL, "prompt": "tell me", "stream": True}) as resp:
                statuses.append(resp.status)
                await resp.read()
        assert 6 <= statuses.count(200) <= 7, statuses  # 92 tokens each (90 events, [DONE], the prompt)
        assert statuses[-1] == 429


async def test_a_stream_left_before_its_usage_is_charged_the_model_s_tokens_per_event(
    redis_server: RedisServer,
) -> None:
    """Tier 1's rule at tier 2 (igw.gateway.event_tokens): a stream left before its usage chunk is
    charged its events times the tokens per event the model's streams reported, not one per event."""
    async with fleet(redis_server, **_token_limits(redis_server, "e2e:leftspec:"), **STEADY) as fx:
        for c in fx.clusters.values():
            c.server.tokens, c.server.tokens_per_event, c.server.token_delay_s = 90, 3, 0.002
        body = {"model": MODEL, "prompt": "tell me", "stream": True}
        async with await fx.post(body) as resp:  # read to its end: 2.8 tokens per event learnt
            assert resp.status == 200
            await resp.read()
        statuses = await streams_left_early(lambda: fx.post(body), streams=10, events=25)  # of 30
        assert statuses.count(200) <= 8, statuses  # about 75 tokens each; at one per event, all ten
        assert statuses[-1] == 429


async def test_model_names_no_cluster_serves_make_no_rate_limit_buckets(redis_server: RedisServer) -> None:
    # With a wildcard entry each distinct model name got its own buckets before the 404: a client
    # cycling names grew the buckets without bound (for the process's life in the local backend).
    limits = {
        "rateLimits": {"backend": "redis", "redis": {"url": redis_server.url, "keyPrefix": "e2e:rl:"}},
        "modelRateLimits": [{"tenant": "*", "model": "*", "requestsPerSecond": 100, "burst": 100}],
    }
    async with fleet(redis_server, **limits, **STEADY) as fx:
        for i in range(20):
            async with await fx.post({"model": f"no-such-model-{i}", "prompt": "x"}) as resp:
                assert resp.status == 404
                assert (await resp.json())["error"]["code"] == "model_not_found"
        assert await fx.redis.keys("e2e:rl:*") == []
        async with await fx.post({"model": MODEL, "prompt": "x"}) as resp:
            assert resp.status == 200
        assert await fx.redis.keys("e2e:rl:*") != []  # the served model's buckets: the limit applies


async def test_a_cluster_that_never_answers_is_a_504_after_request_timeout_then_retried(
    redis_server: RedisServer,
) -> None:
    """A tier-1 gateway that takes the request and never answers (frozen, heartbeats still fresh):
    ``requestTimeoutSeconds`` bounds the wait for its response head, the attempt counts as a 504
    ``upstream_timeout`` and, nothing having been sent to the client, the next cluster serves it."""

    async def never(_request: web.Request) -> web.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_post("/v1/completions", never)
    spec = {"upstream": {"requestTimeoutSeconds": 0.5}}
    async with fleet(redis_server, **spec) as fx, serve_app(app, host="127.0.0.1", port=0) as frozen_url:
        for f in fx.fleets:
            for name in ("east-a", "east-b"):
                f.clusters[name] = replace(f.clusters[name], endpoint=frozen_url)
        started = time.monotonic()
        async with await fx.post({"model": MODEL, "prompt": "hello"}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-igw-cluster"] == "west-a"
        assert time.monotonic() - started >= 0.5
        assert await fx.metric("igw_global_upstream_retries_total", cause="5xx") >= 1


@pytest.mark.parametrize("trickles", [False, True], ids=["stalls", "trickles"])
async def test_a_cluster_that_sends_a_head_and_never_finishes_the_body_is_a_504_then_retried(
    redis_server: RedisServer, trickles: bool
) -> None:
    """A cluster that answers a non-streamed request's head and then stalls (or trickles a byte at a
    time, slowloris-style) inside a body it never finishes: ``requestTimeoutSeconds`` bounds the body
    too, the attempt is a 504 ``upstream_timeout`` and, nothing having reached the client, the next
    cluster serves it. Until session s38 only the head was bounded: the router, which runs no stall
    sweep, waited for such a body for ever (the client's request hung, its connection held)."""

    async def unfinished(request: web.Request) -> web.StreamResponse:
        await request.read()
        headers = {"Content-Type": "application/json", "Content-Length": "100000"}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        await response.write(b'{"choices": ')
        while True:
            await asyncio.sleep(0.1)
            if trickles:
                await response.write(b" ")

    app = web.Application()
    app.router.add_post("/v1/completions", unfinished)
    spec = {**STEADY, "upstream": {"requestTimeoutSeconds": 1}}
    async with fleet(redis_server, **spec) as fx, serve_app(app, host="127.0.0.1", port=0) as bad_url:
        for f in fx.fleets:
            for name in ("east-a", "east-b"):
                f.clusters[name] = replace(f.clusters[name], endpoint=bad_url)
        started = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=30)
        async with await fx.post({"model": MODEL, "prompt": "hello"}, timeout=timeout) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-igw-cluster"] == "west-a"
            assert (await resp.json())["choices"]
        assert time.monotonic() - started >= 1
        assert await fx.metric("igw_global_upstream_retries_total", cause="5xx") >= 1


async def test_embeddings_and_responses_go_through_tier_2(redis_server: RedisServer) -> None:
    """The OpenAI SDK's ``embeddings.create`` and ``responses.create`` (streamed), and a rerank,
    through a router replica to a same-region cluster (before session s31: 404 ``not_found``; the
    rerank before s32). STEADY: the SDK builds its Responses event types on a process's first
    stream, which held this test's event loop (the heartbeat publisher included) for about 0.55 s."""
    async with fleet(redis_server, **STEADY) as fx:
        async with openai.AsyncOpenAI(base_url=fx.urls[0] + "/v1", api_key="x", max_retries=0) as oai:
            vectors = await oai.embeddings.create(model=MODEL, input=["a", "b"])
            stream = await oai.responses.create(model=MODEL, input="hi", stream=True)
            kinds = [event.type async for event in stream]
        rerank = {"model": MODEL, "query": "q", "documents": ["a", "b"]}
        async with fx.http.post(fx.urls[0] + "/v1/rerank", json=rerank) as reranked:
            assert reranked.status == 200, await reranked.text()
            assert len((await reranked.json())["results"]) == 2
        assert len(vectors.data) == 2
        assert kinds[0] == "response.created"
        assert kinds[-1] == "response.completed"
        paths = [r.path for c in fx.clusters.values() for r in c.server.received]
        assert sorted(paths) == ["/v1/embeddings", "/v1/rerank", "/v1/responses"]
        assert {c.name for c in fx.clusters.values() if c.server.received} <= {"east-a", "east-b"}
        assert await fx.metric("igw_global_requests_total", 0, code="200") == 3


async def test_anthropic_sdk_messages_and_token_counts_go_through_tier_2_with_anthropic_errors(
    redis_server: RedisServer,
) -> None:
    """An agent on the Anthropic SDK through a router replica: a message and a token count reach a
    same-region cluster, and the router's own refusals on those routes are Anthropic-shaped (the
    SDK's ``NotFoundError``, ``error.type`` ``not_found_error``), the OpenAI routes' unchanged."""
    async with fleet(redis_server, **STEADY) as fx:
        async with anthropic.AsyncAnthropic(base_url=fx.urls[0], api_key="x", max_retries=0) as claude:
            said = await claude.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
            counted = await claude.messages.count_tokens(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
            with pytest.raises(anthropic.NotFoundError) as missing:
                await claude.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "x"}])
        assert said.usage.output_tokens > 0
        assert counted.input_tokens > 0
        assert isinstance(missing.value.body, dict)
        assert missing.value.body["type"] == "error"
        assert missing.value.body["error"]["type"] == "not_found_error"
        async with fx.http.post(fx.urls[0] + "/v1/messages", data=b"{") as resp:
            body = await resp.json()
            assert (resp.status, body["error"]["type"]) == (400, "invalid_request_error")
            assert body["request_id"] == resp.headers["X-Request-Id"]
        paths = sorted(r.path for c in fx.clusters.values() for r in c.server.received)
        assert paths == ["/v1/messages", "/v1/messages/count_tokens"]
        assert {c.name for c in fx.clusters.values() if c.server.received} <= {"east-a", "east-b"}


async def test_a_conversation_stays_on_the_cluster_that_stored_its_responses(
    redis_server: RedisServer,
) -> None:
    """The plan spreads requests over both same-region clusters; a continuation must reach the one
    that stored its previous response (the fake clusters keep their store in memory, as vLLM), and
    so must a stored response's retrieval."""
    async with fleet(redis_server, **STEADY) as fx:
        async with openai.AsyncOpenAI(base_url=fx.urls[0] + "/v1", api_key="x", max_retries=0) as oai:
            for conversation in range(6):
                previous: str | None = None
                for turn in range(3):
                    answer = await oai.responses.create(
                        model=MODEL, input=f"{conversation}/{turn}", previous_response_id=previous
                    )
                    previous = answer.id
                assert previous is not None
                again = await oai.responses.retrieve(previous)
                assert again.id == previous
            with pytest.raises(openai.NotFoundError, match="not found"):
                await oai.responses.retrieve("resp_unknown")  # asked of every cluster in turn
        assert await fx.metric("igw_global_upstream_retries_total", cause="response-search") == 2
        used = {
            c.name for c in fx.clusters.values() if any("unknown" not in r.path for r in c.server.received)
        }
        assert used == {"east-a", "east-b"}  # both same-region clusters took conversations
        assert fx.clusters["west-a"].server.received[0].path == "/v1/responses/resp_unknown"  # searched last
        for c in fx.clusters.values():  # and each served every turn of its conversations
            for r in c.server.received:
                body = orjson.loads(r.body) if r.body else {}
                mentioned = body.get("previous_response_id") or r.path.removeprefix("/v1/responses").strip(
                    "/"
                )
                if mentioned != "resp_unknown":
                    assert not mentioned or mentioned.startswith(f"resp_{c.name}_"), (
                        c.name,
                        r.path,
                        mentioned,
                    )


async def test_a_conversation_made_through_one_router_replica_goes_on_through_the_other(
    redis_server: RedisServer,
) -> None:
    """Router replicas keep their response memory apart: the other replica asks the clusters in turn
    (a 404 moving on without spending an attempt) and then remembers the cluster it found. Before
    session s32 its retrieval was a 404 ``response_not_found`` and its continuation the first
    cluster's 404 whenever that cluster did not store the response."""
    async with fleet(redis_server, **STEADY) as fx:
        kw: dict[str, Any] = {"api_key": "x", "max_retries": 0}
        async with (
            openai.AsyncOpenAI(base_url=fx.urls[0] + "/v1", **kw) as first,
            openai.AsyncOpenAI(base_url=fx.urls[1] + "/v1", **kw) as second,
        ):
            made = [await first.responses.create(model=MODEL, input=f"q{i}") for i in range(8)]
            assert len({r.id.split("_")[1] for r in made}) == 2  # both same-region clusters
            for response in made[:4]:
                assert (await second.responses.retrieve(response.id)).id == response.id
            searched = await fx.metric("igw_global_upstream_retries_total", 1, cause="response-search")
            assert 0 < searched <= 4
            for response in made[:4]:  # polled again: straight to the cluster found
                assert (await second.responses.retrieve(response.id)).id == response.id
            assert (
                await fx.metric("igw_global_upstream_retries_total", 1, cause="response-search") == searched
            )
            for response in made[4:]:
                follow_up = await second.responses.create(
                    model=MODEL, input="more", previous_response_id=response.id
                )
                assert follow_up.id.split("_")[1] == response.id.split("_")[1]
                assert (await second.responses.retrieve(follow_up.id)).id == follow_up.id
        assert (
            await fx.metric("igw_global_upstream_retries_total", 1, cause="response-search") <= searched + 4
        )
        assert await fx.metric("igw_global_requests_total", 1, code="404") == 0
        assert await fx.metric("igw_global_failover_events_total", 1) == 0


async def test_stored_response_requests_are_counted_in_the_requests_series(redis_server: RedisServer) -> None:
    """``igw_global_requests_total`` is documented as every answer, and a tier-1 gateway counts its
    stored-response requests; until session s42 the router counted none of its retrievals or
    deletions (a router answering every retrieval 404 or 5xx showed no error ratio). The model label
    is the answering cluster's model when it serves one only."""
    async with fleet(redis_server) as fx:
        async with fx.http.post(fx.urls[0] + "/v1/responses", json={"model": MODEL, "input": "hi"}) as resp:
            assert resp.status == 200, await resp.text()
            response_id = (await resp.json())["id"]
        async with fx.http.get(f"{fx.urls[0]}/v1/responses/{response_id}") as resp:
            assert resp.status == 200
        async with fx.http.get(f"{fx.urls[0]}/v1/responses/resp_unknown") as resp:
            assert resp.status == 404
        async with fx.http.delete(f"{fx.urls[0]}/v1/responses/{response_id}") as resp:
            assert resp.status == 200
        counted = {
            code: await fx.metric("igw_global_requests_total", model=MODEL, code=code)
            for code in ("200", "404")
        }
        assert counted == {"200": 3.0, "404": 1.0}  # the creation, the retrieval, the deletion; the miss
