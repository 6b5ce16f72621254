"""Global rate limits per tenant and model: specificity, shared by replicas through a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import redis
import redis.asyncio as aioredis
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.guards import GuardDenied
from igw.gateway.serving import serve_app
from igw.global_router.config import ModelLimit, parse_global_config
from igw.global_router.limits import TIER2_RESERVATIONS, ModelRateLimits, resolve
from igw.global_router.server import ROUTER_KEY, create_global_app, misnamed_log
from igw.security.ratelimit import local
from igw.security.ratelimit.keys import tenant_key as tenant_bucket
from igw.security.ratelimit.limiter import RateLimiter
from igw.security.ratelimit.local import MAX_HELD, LocalBuckets
from igw.security.settings import RateLimitSettings, TenantLimits
from tests.gateway.fake_model_server import FakeModelServer, closed_port
from tests.global_router.support import MODEL, global_doc
from tests.security.helpers import ManualClock, RedisServer

ENTRIES = (
    ModelLimit(tenant="*", model="*", requests_per_second=100),
    ModelLimit(tenant="*", model="llama", requests_per_second=0.001, burst=3),
    ModelLimit(tenant="team-a", model="*", requests_per_second=50),
    ModelLimit(tenant="team-a", model="llama", requests_per_second=0.001, burst=1),
)


def test_most_specific_entry_wins() -> None:
    assert resolve(ENTRIES, tenant="team-a", model="llama") == ENTRIES[3]
    assert resolve(ENTRIES, tenant="team-a", model="other") == ENTRIES[2]
    assert resolve(ENTRIES, tenant="team-b", model="llama") == ENTRIES[1]
    assert resolve(ENTRIES, tenant="team-b", model="other") == ENTRIES[0]
    assert resolve(ENTRIES[1:2], tenant="x", model="other") is None


def settings(url: str, policy: str = "local") -> RateLimitSettings:
    return RateLimitSettings.from_mapping(
        {"backend": "redis", "redis": {"url": url, "keyPrefix": "t:grl:"}, "onRedisUnavailable": policy}
    )


async def admitted(limits: ModelRateLimits, n: int, *, tenant: str = "team-b", model: str = "llama") -> int:
    ok = 0
    refusals: list[GuardDenied] = []
    for _ in range(n):
        try:
            await limits.admit(tenant=tenant, model=model, est_tokens=10)
            ok += 1
        except GuardDenied as denied:
            refusals.append(denied)
    for refusal in refusals:
        assert refusal.status == 429
        assert refusal.headers["Retry-After"].isdigit()
        assert f"|model={model}" in refusal.message
    return ok


async def test_two_replicas_share_one_bucket_in_redis(redis_server: RedisServer) -> None:
    clock = ManualClock()
    one = ModelRateLimits(ENTRIES, settings=settings(redis_server.url), clock=clock)
    two = ModelRateLimits(ENTRIES, settings=settings(redis_server.url), clock=clock)
    try:
        # burst 3 for (*, llama): three admissions in total across both replicas, not three each
        assert await admitted(one, 2) + await admitted(two, 3) == 3
        # other tenants and models have their own buckets
        assert await admitted(two, 1, tenant="team-a") == 1
        assert await admitted(one, 1, tenant="team-a") == 0
        assert await admitted(one, 5, model="other") == 5
    finally:
        await one.close()
        await two.close()


async def test_tokens_per_minute_are_debited_after_the_response(redis_server: RedisServer) -> None:
    entries = (ModelLimit(tenant="*", model="llama", tokens_per_minute=600, token_burst=100),)
    clock = ManualClock()
    replica = ModelRateLimits(entries, settings=settings(redis_server.url), clock=clock)
    other = ModelRateLimits(entries, settings=settings(redis_server.url), clock=clock)
    try:
        await replica.admit(tenant="t", model="llama", est_tokens=10)
        await replica.account(tenant="t", model="llama", tokens=150)  # bucket now in debt
        with pytest.raises(GuardDenied) as refused:
            await other.admit(tenant="t", model="llama", est_tokens=10)
        assert "(tokens)" in refused.value.message
    finally:
        await replica.close()
        await other.close()


@pytest.mark.parametrize(("policy", "expected"), [("local", 3), ("allow", 6), ("deny", 0)])
async def test_redis_outage_applies_the_tier1_policy(policy: str, expected: int) -> None:
    url = f"redis://127.0.0.1:{closed_port()}/0"
    limits = ModelRateLimits(ENTRIES, settings=settings(url, policy), clock=ManualClock())
    try:
        assert await admitted(limits, 6) == expected
    finally:
        await limits.close()


async def _backend_samples(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The router's ``igw_ratelimit_backend_*{backend="redis"}`` samples by name."""
    async with http.get(url + "/metrics") as resp:
        text = await resp.text()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("igw_ratelimit_backend_") and sample.labels.get("backend") == "redis"
    }


async def test_a_model_limits_redis_outage_is_counted_in_the_router_metrics(
    redis_server: RedisServer,
) -> None:
    """``modelRateLimits`` on Redis with no tenant-wide limit: when Redis goes, the per-model limits
    fall back to this replica's own buckets (``onRedisUnavailable: local``), which the operator must
    see. Before session s38 only a log line said so: ``igw_ratelimit_backend_up`` stayed 1 and no
    error was counted (the per-model limiters had no metrics; the guard's, which has, never asked
    Redis: no tenant-wide limit)."""
    cluster = FakeModelServer("east-a")
    await cluster.start()
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{cluster.key}", "models": [MODEL]}],
        heartbeats={"required": False},
        rateLimits={"backend": "redis", "redis": {"url": redis_server.url, "keyPrefix": "t:grl:"}},
        modelRateLimits=[{"tenant": "*", "model": MODEL, "requestsPerSecond": 100, "burst": 100}],
    )
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:

            async def completion() -> int:
                async with http.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"}) as resp:
                    await resp.read()
                    return resp.status

            assert await completion() == 200
            up = await _backend_samples(http, url)
            assert up["igw_ratelimit_backend_up"] == 1
            assert up.get("igw_ratelimit_backend_errors_total", 0) == 0
            redis_server.stop()
            assert await completion() == 200  # admitted by the local buckets
            down = await _backend_samples(http, url)
            assert down["igw_ratelimit_backend_up"] == 0
            assert down["igw_ratelimit_backend_errors_total"] >= 1
    finally:
        await cluster.stop()


async def test_a_frozen_redis_is_met_once_not_once_per_limit(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis frozen (SIGSTOP: connections open, nothing answered) under a router with a tenant-wide
    limit and one ``modelRateLimits`` entry per model: the first request meets the timeout, and the
    router then leaves Redis alone for ``retryAfterFailure`` whichever limit a request asks, logs
    the outage once and, after SIGCONT, its end once. Before session s43 each limiter kept its own
    outage: the first request paid the timeout twice (tenant-wide, then its model's: 0.51 s), the
    first of each other model once more (0.25 s), and one outage logged an ERROR and a WARNING per
    limiter (probe: 5 and 5 with four models)."""
    models = ("m0", "m1", "m2", "m3")
    cluster = FakeModelServer("east-a")
    await cluster.start()
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{cluster.key}", "models": list(models)}],
        heartbeats={"required": False},
        rateLimits={
            "backend": "redis",
            "redis": {"url": redis_server.url, "keyPrefix": "t:grl:", "retryAfterFailure": "3s"},
            "default": {"requestsPerSecond": 1000, "burst": 1000},
        },
        modelRateLimits=[
            {"tenant": "*", "model": m, "requestsPerSecond": 1000, "burst": 1000} for m in models
        ],
    )
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    caplog.set_level(logging.WARNING, logger="igw.security.ratelimit")
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:

            async def completion(model: str) -> int:
                async with http.post(url + "/v1/completions", json={"model": model, "prompt": "x"}) as resp:
                    await resp.read()
                    return resp.status

            assert [await completion(m) for m in models] == [200] * 4
            os.kill(redis_server.process.pid, signal.SIGSTOP)
            try:
                assert [await completion(m) for m in models] == [200] * 4  # the local buckets
                down = await _backend_samples(http, url)
            finally:
                os.kill(redis_server.process.pid, signal.SIGCONT)
            assert down["igw_ratelimit_backend_up"] == 0
            assert down["igw_ratelimit_backend_errors_total"] == 1  # 5 before: Redis asked per limit
            await asyncio.sleep(3.2)  # retryAfterFailure: Redis is asked again
            assert [await completion(m) for m in models] == [200] * 4
            assert (await _backend_samples(http, url))["igw_ratelimit_backend_up"] == 1
    finally:
        await cluster.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "igw.security.ratelimit"]
    assert sum("rate-limit backend redis unavailable" in line for line in lines) == 1, lines
    assert sum("rate-limit backend redis is answering again" in line for line in lines) == 1, lines


def _script_calls(redis_server: RedisServer) -> int:
    """Scripts the Redis has run so far (``EVALSHA`` and ``EVAL``: one round trip each)."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))


@pytest.mark.parametrize("backend", ["redis", "local"])
async def test_a_request_its_model_limit_refuses_takes_nothing_from_the_tenant_limit(
    backend: str, redis_server: RedisServer
) -> None:
    """A tenant-wide limit (burst 2) and a per-model one (burst 1 for ``m0``): one ``m0`` request
    admitted, three refused by the model limit; the tenant has spent one of its two requests, and
    its next request to ``m1`` is admitted. Each decision is one Redis round trip, both limits
    decided by one script. Before session s44 the router asked the tenant-wide limit, then the
    model's: a refused request waited two round trips and took a tenant-wide request token, so the
    refusals of ``m0`` refused the tenant's ``m1`` requests too (probe: ``m1`` 429 after three
    ``m0`` refusals; two ``EVALSHA`` per request)."""
    cluster = FakeModelServer("east-a")
    await cluster.start()
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{cluster.key}", "models": ["m0", "m1"]}],
        heartbeats={"required": False},
        rateLimits={
            "backend": backend,
            "redis": {"url": redis_server.url, "keyPrefix": "t:grl:"},
            "default": {"requestsPerSecond": 0.001, "burst": 2},
        },
        modelRateLimits=[{"tenant": "*", "model": "m0", "requestsPerSecond": 0.001, "burst": 1}],
    )
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:

            async def completion(model: str) -> tuple[int, int, str]:
                before = _script_calls(redis_server)
                async with http.post(url + "/v1/completions", json={"model": model, "prompt": "x"}) as resp:
                    text = await resp.text()
                return resp.status, _script_calls(redis_server) - before, text

            first = await completion("m0")  # a script's first call on a server: EVALSHA, EVAL
            assert first[0] == 200
            refused = [await completion("m0") for _ in range(3)]
            assert [status for status, _, _ in refused] == [429] * 3
            assert all("|model=m0" in text for _, _, text in refused)  # the model's limit refused
            admitted, calls, _ = await completion("m1")
            assert admitted == 200
            over, _, text = await completion("m1")  # the tenant's second request: its burst spent
            assert over == 429
            assert "'anonymous'" in text
            if backend == "redis":
                assert [calls for _, calls, _ in refused] == [1, 1, 1]
                assert calls == 1
    finally:
        await cluster.stop()


async def test_a_response_is_debited_from_both_limits_in_one_round_trip(redis_server: RedisServer) -> None:
    """A tenant-wide and a per-model token limit: after the response, both token buckets are debited
    its tokens by one script call (a request: two in all, its admission and its debit). Before
    session s44 the tenant-wide and the per-model debits were two calls (probe: three per request)."""
    cluster = FakeModelServer("east-a")
    await cluster.start()
    doc = global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{cluster.key}", "models": ["m0"]}],
        heartbeats={"required": False},
        rateLimits={
            "backend": "redis",
            "redis": {"url": redis_server.url, "keyPrefix": "t:grl:"},
            "default": {"tokensPerMinute": 6, "tokenBurst": 10_000},
        },
        modelRateLimits=[{"tenant": "*", "model": "m0", "tokensPerMinute": 6, "tokenBurst": 20_000}],
    )
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:

            async def completion() -> tuple[int, int]:
                before = _script_calls(redis_server)
                async with http.post(url + "/v1/completions", json={"model": "m0", "prompt": "x"}) as resp:
                    await resp.read()
                return resp.status, _script_calls(redis_server) - before

            assert (await completion())[0] == 200  # a script's first call on a server: EVALSHA, EVAL
            assert await completion() == (200, 2)
            tenant = client.hgetall("t:grl:anonymous:tok")
            model = client.hgetall("t:grl:anonymous|model=m0:tok")
            # each debited below its capacity by the same two responses' tokens (0.1 a second back)
            spent = 10_000 - float(tenant[b"l"])
            assert spent >= 2
            assert spent == pytest.approx(20_000 - float(model[b"l"]), abs=1)
    finally:
        client.close()
        await cluster.stop()


async def _client_commands(redis_server: RedisServer, action: Callable[[], Awaitable[None]]) -> list[str]:
    """The commands clients sent the Redis while ``action`` ran (one round trip each), by
    ``MONITOR``: what a script calls (client ``lua``) is not one (``INFO commandstats`` counts those
    too, so a ``SET`` folded into a script counts as the ``SET`` it replaced)."""
    client: aioredis.Redis[bytes] = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    watcher: aioredis.Redis[bytes] = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    marker = f"end-of-action-{os.getpid()}"
    seen: list[str] = []
    try:
        await client.ping()  # its connection's handshake made before the monitor starts
        async with watcher.monitor() as monitor:
            await action()
            await client.echo(marker)  # MONITOR shows commands in order: all the action's are before it
            while True:
                command = await asyncio.wait_for(monitor.next_command(), 5)
                if marker in command["command"]:
                    break
                if command["client_type"] != "lua":
                    seen.append(command["command"].split(" ", 1)[0].lower())
    finally:
        await client.aclose()  # type: ignore[attr-defined]  # types-redis predates aclose
        await watcher.aclose()  # type: ignore[attr-defined]
    return seen


@contextlib.asynccontextmanager
async def _background_router(
    redis_server: RedisServer,
) -> AsyncIterator[tuple[FakeModelServer, web.Application, str, aiohttp.ClientSession, redis.Redis[bytes]]]:
    """A router over one fake cluster with the background-response limits of
    :func:`_background_router_doc`, served on loopback: the cluster, the app, its URL, a client
    session and a Redis client on the limits' server."""
    cluster = FakeModelServer("east-a")
    await cluster.start()
    app = create_global_app(
        parse_global_config(_background_router_doc(cluster, redis_server)), read_heartbeats=False
    )
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    try:
        async with serve_app(app, host="127.0.0.1", port=0) as url, aiohttp.ClientSession() as http:
            yield cluster, app, url, http, client
    finally:
        client.close()
        await cluster.stop()


def _background_router_doc(cluster: FakeModelServer, redis_server: RedisServer) -> dict[str, Any]:
    """A router with a tenant-wide and a per-model token limit on ``redis_server``."""
    return global_doc(
        [{"name": "east-a", "region": "east", "endpoint": f"http://{cluster.key}", "models": ["m0"]}],
        heartbeats={"required": False},
        rateLimits={
            "backend": "redis",
            "redis": {"url": redis_server.url, "keyPrefix": "t:bg1:"},
            "default": {"tokensPerMinute": 6, "tokenBurst": 10_000},
        },
        modelRateLimits=[{"tenant": "*", "model": "m0", "tokensPerMinute": 6, "tokenBurst": 20_000}],
    )


BACKGROUND = {"model": "m0", "input": "x", "max_output_tokens": 3000, "background": True}


async def test_a_background_response_s_holds_are_set_and_settled_with_its_debits(
    redis_server: RedisServer,
) -> None:
    """A background response under a tenant-wide and a per-model token limit: accepted, it is
    admitted and debited its bound, both charges held, in two Redis round trips; a poll showing its
    usage releases and settles both holds in two. Before session s44 the holds were two ``SET``
    round trips more (probe: ``evalsha, evalsha, set, set`` to accept), and the settlement four
    (a release and a debit per limit). Both buckets are credited the bound less the 5 tokens
    generated, so each is down by what the two responses used, not by their bounds."""
    async with _background_router(redis_server) as (_cluster, _app, url, http, client):
        ids: list[str] = []

        async def accept() -> None:
            async with http.post(url + "/v1/responses", json=BACKGROUND) as resp:
                assert resp.status == 200, await resp.text()
                ids.append((await resp.json())["id"])

        async def poll() -> None:
            async with http.get(f"{url}/v1/responses/{ids[-1]}") as resp:
                assert resp.status == 200
                assert (await resp.json())["usage"]["output_tokens"] == 5

        await accept()  # each script's first call on a server: EVALSHA, then EVAL
        await poll()
        assert await _client_commands(redis_server, accept) == ["evalsha", "evalsha"]
        for scope in ("|tier2", "|tier2|model="):  # a response never polled: its holds go in a day
            assert 86_000 < client.ttl(f"t:bg1:held:{ids[-1]}{scope}:hold") <= 86_400
        assert (
            client.exists(f"t:bg1:held:{ids[-1]}|tier2:hold", f"t:bg1:held:{ids[-1]}|tier2|model=:hold") == 2
        )
        assert await _client_commands(redis_server, poll) == ["evalsha", "evalsha"]
        assert not client.keys("t:bg1:held:*")
        tenant = 10_000 - float(client.hget("t:bg1:anonymous:tok", "l") or 0)
        model = 20_000 - float(client.hget("t:bg1:anonymous|model=m0:tok", "l") or 0)
        # two responses of a prompt and 5 tokens each, not their 3,000-token bounds
        assert 2 <= tenant < 100
        assert model == pytest.approx(tenant, abs=1)


async def test_holds_set_before_the_upgrade_are_settled_after_it(redis_server: RedisServer) -> None:
    """A background response accepted by a router of before session s44 (its two holds set by
    ``SET ... EX NX``, as it did) and polled at an upgraded one: both holds are found, released
    and settled in one step each."""
    async with _background_router(redis_server) as (_cluster, _app, url, http, client):
        async with http.post(url + "/v1/responses", json=BACKGROUND) as resp:
            response_id = (await resp.json())["id"]
        # as the router before the upgrade left it: the holds its SETs made, not the script's
        client.delete(f"t:bg1:held:{response_id}|tier2:hold", f"t:bg1:held:{response_id}|tier2|model=:hold")
        for scope in ("|tier2", "|tier2|model="):
            client.set(
                f"t:bg1:held:{response_id}{scope}:hold",
                "3000:anonymous" if scope == "|tier2" else "3000:anonymous|model=m0",
                ex=86_400,
                nx=True,
            )
        async with http.get(f"{url}/v1/responses/{response_id}") as resp:
            assert resp.status == 200
        assert not client.keys("t:bg1:held:*")
        tenant = 10_000 - float(client.hget("t:bg1:anonymous:tok", "l") or 0)
        model = 20_000 - float(client.hget("t:bg1:anonymous|model=m0:tok", "l") or 0)
        assert 1 <= tenant < 50  # credited the 2,995 tokens held beyond the 5 generated
        assert model == pytest.approx(tenant, abs=1)


@pytest.mark.parametrize("known", [True, False], ids=["known-cluster", "searched"])
async def test_a_poll_answer_naming_another_response_settles_nothing(
    redis_server: RedisServer, known: bool, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster (a compromised pod behind it) that answers the poll of one background response
    with another response object, usage and all, does not settle the polled one's holds: only an
    answer naming the id in the path does. Before session s44 the router settled the polled id by
    that answer's usage when it knew the cluster (or asked its last one), so a pod could credit a
    tenant any bound it liked. The right answer then settles it."""
    monkeypatch.setattr(misnamed_log, "filters", [])  # each case's line, unthrottled
    async with _background_router(redis_server) as (cluster, app, url, http, client):
        ids: list[str] = []
        for _ in range(2):
            async with http.post(url + "/v1/responses", json=BACKGROUND) as resp:
                assert resp.status == 200, await resp.text()
                ids.append((await resp.json())["id"])
        polled, other = ids
        held = [f"t:bg1:held:{polled}|tier2:hold", f"t:bg1:held:{polled}|tier2|model=:hold"]
        assert client.exists(*held) == 2
        router = app[ROUTER_KEY]
        router.clock = search_clock = ManualClock()
        if not known:
            router.responses.forget(["east-a"])  # as another replica, or after a restart
        client.delete(f"t:bg1:held:{other}|tier2:hold", f"t:bg1:held:{other}|tier2|model=:hold")
        right = cluster.stored_responses[polled]
        cluster.stored_responses[polled] = cluster.stored_responses[other]  # names the other
        async with http.get(f"{url}/v1/responses/{polled}") as resp:
            # never relayed (since s45; before, the other response went to the client)
            answer = await resp.json()
            assert (resp.status, answer["error"]["code"]) == (404, "response_not_found")
            assert other not in await resp.text()
        assert client.exists(*held) == 2  # both holds kept: nothing settled
        assert "cluster east-a answered a retrieval of one response with another response" in caplog.text
        misnamed = app[ROUTER_KEY].metrics.usage_misnamed
        # counted (igw_global_usage_misnamed_total, since s44) whatever the log's throttle holds
        assert misnamed.labels("east-a")._value.get() == 1
        cluster.stored_responses[polled] = right
        search_clock.advance(router.searches.ttl_s)  # searched: found nowhere is remembered that long
        async with http.get(f"{url}/v1/responses/{polled}") as resp:
            assert resp.status == 200
        assert client.exists(*held) == 0
        assert misnamed.labels("east-a")._value.get() == 1  # the right answer is not counted


async def test_a_flood_of_tenant_ids_leaves_another_tenant_s_tier2_holds_settled() -> None:
    """The router's local backend keeps its tenant-wide and per-model holds in tier 1's table
    (:class:`~igw.security.ratelimit.local.LocalBuckets`), so it had tier 1's flaw: 2 x ``MAX_HELD``
    tenants with one background response each forgot both of alice's holds, and her settlement
    credited neither bucket (both stayed 100,000 tokens down; until session s45). Now a tenant
    holding one keeps it, and both her buckets are charged her prompt and the 5 tokens generated."""
    clock = ManualClock()
    settings = RateLimitSettings(default=TenantLimits(tokens_per_minute=200_000))
    backend = LocalBuckets(clock=clock)
    tenant_wide = RateLimiter(
        settings=settings, backend=backend, clock=clock, reservation_scope=TIER2_RESERVATIONS
    )
    limits = ModelRateLimits(
        [ModelLimit(tenant="*", model="m", tokens_per_minute=200_000)],
        settings=settings,
        clock=clock,
        tenant_limiter=tenant_wide,
    )
    await limits.account_both(
        tenant="alice",
        model="m",
        prompt_tokens=1,
        completion_tokens=0,
        reserved_tokens=100_000,
        reservation="r_a",
    )
    for i in range(MAX_HELD):  # two holds each: 2 x MAX_HELD in all
        await limits.account_both(
            tenant=f"m-{i}",
            model="m",
            prompt_tokens=1,
            completion_tokens=0,
            reserved_tokens=1,
            reservation=f"r{i}",
        )
    await limits.settle_both(reservation="r_a", completion_tokens=5)
    for key in (tenant_bucket("alice"), ModelRateLimits.bucket_key("alice", "m")):
        assert backend._tokens.buckets[key].level == 200_000 - 6


async def test_a_refused_tier2_hold_is_counted_in_the_router_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """The router's local buckets refuse a new tenant's hold as tier 1's do; the refusal counts in
    the router's own ``igw_global_ratelimit_holds_refused_total`` (tier 1's name is not on its
    page). Until session s45 it was silent at both tiers."""
    monkeypatch.setattr(local, "MAX_HELD", 2)
    doc = global_doc(
        heartbeats={"required": False},
        rateLimits={"default": {"tokensPerMinute": 600}},
        modelRateLimits=[{"tenant": "*", "model": MODEL, "requestsPerSecond": 100}],
    )
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    router = app[ROUTER_KEY]
    for tenant in ("a", "b", "c"):
        await router.model_limits.account_both(
            tenant=tenant,
            model=MODEL,
            prompt_tokens=1,
            completion_tokens=0,
            reserved_tokens=10,
            reservation=f"r_{tenant}",
        )
    registry = router.metrics.registry
    assert registry.get_sample_value("igw_global_ratelimit_holds_refused_total") == 1
    assert registry.get_sample_value("igw_ratelimit_holds_refused_total") is None
