"""A shared rate-limit Redis that is slow, not down: every reply late, within ``commandTimeout``.

A loaded ElastiCache node or a lossy path answers each command in a few hundred milliseconds. The
gateway must then wait for it (each decision bounded by ``connectTimeout`` + ``commandTimeout``),
not take it for down: a decision that runs past that deadline is cancelled, which closes its
connection, so a decision that spends round trips it does not need (a connection's handshake, a
script's first load) fails every time on a Redis slow enough, each time on a new connection
(:mod:`igw.config.redis_client`)."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.limiter import RateLimiter
from igw.security.ratelimit.registry import BACKENDS
from igw.security.settings import RateLimitSettings
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.delay_proxy import delay_proxy
from tests.security.helpers import JwksServer, ManualClock, RedisServer, TokenFactory
from tests.security.test_gateway_e2e import secured_gateway


async def test_a_redis_answering_within_its_command_timeout_keeps_deciding(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    redis_server: RedisServer,
) -> None:
    """Every Redis reply 200 ms late (``commandTimeout`` 250 ms, the default), ``deny``: the
    gateway's requests are decided by Redis, each request waiting on it, and Redis is never taken
    for down. Before session s43 every decision failed (a new connection's ``HELLO`` and
    ``CLIENT SETINFO``, then the script's ``EVALSHA``: 600 ms, past the 500 ms deadline), so every
    request got ``429 rate_limiter_unavailable``, on a Redis answering each command in time."""
    limits: dict[str, Any] = {
        "rateLimits": {
            "backend": "redis",
            "redis": {"url": "", "retryAfterFailure": "1s"},
            "onRedisUnavailable": "deny",
            "default": {"requestsPerSecond": 100, "tokensPerMinute": 60000},
        }
    }
    with delay_proxy(redis_server.port, delay_s=0.2) as proxy:
        limits["rateLimits"]["redis"]["url"] = proxy.url
        async with (
            running(FakeModelServer("a"), FakeModelServer("b")) as servers,
            secured_gateway(
                tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=limits
            ) as gw,
        ):
            tokens.clock.now = time.time()
            headers = {"Authorization": f"Bearer {tokens.token()}"}
            statuses = []
            for _ in range(3):
                body = {"model": "m", "prompt": "hello"}
                async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                    await resp.read()
                statuses.append(resp.status)
            sample = gw.registry.get_sample_value
            assert statuses == [200, 200, 200]
            assert not sample("igw_ratelimit_backend_errors_total", {"backend": "redis"})
            assert sample("igw_ratelimit_backend_up", {"backend": "redis"}) == 1


def _allowing_limiter(url: str, clock: ManualClock, registry: CollectorRegistry, **redis: str) -> RateLimiter:
    """A limiter on the Redis at ``url`` (the delay proxy), ``onRedisUnavailable: allow``,
    ``retryAfterFailure: 5s`` and the ``redis`` settings given, its metrics in ``registry``."""
    settings = RateLimitSettings.from_mapping(
        {
            "backend": "redis",
            "redis": {"url": "", "retryAfterFailure": "5s", **redis},
            "onRedisUnavailable": "allow",
            "default": {"requestsPerSecond": 1000, "burst": 1000},
        }
    )
    settings = dataclasses.replace(settings, redis=dataclasses.replace(settings.redis, url=url))
    return RateLimiter(
        settings=settings,
        backend=BACKENDS["redis"](settings, clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )


async def test_a_decision_answered_after_the_outage_began_does_not_end_it(
    redis_server: RedisServer, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Two decisions in flight on a slow Redis: one runs past ``commandTimeout`` (the outage begins:
    one ERROR, ``igw_ratelimit_backend_up`` 0), the other, sent later, answers just after. That late
    answer says nothing of Redis now, and the outage policy stays applied for
    ``retryAfterFailure``: it must not log "answering again" nor set the gauge to 1. Before session
    s43 it did, and the next late failure logged the outage again: under load near the timeout, one
    ERROR and one WARNING per request in flight, and a gauge saying up while every request met
    ``onRedisUnavailable``."""
    registry = CollectorRegistry()
    with delay_proxy(redis_server.port, delay_s=0.0) as proxy:
        limiter = _allowing_limiter(proxy.url, clock, registry, commandTimeout="2s")

        def up() -> float | None:
            return registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"})

        def lines(text: str) -> int:
            return len([r for r in caplog.records if text in r.getMessage()])

        try:
            await limiter.admit(tenant="t", est_tokens=1)  # a connection, the script loaded
            proxy.delay_s = 10.0
            timing_out = asyncio.create_task(limiter.admit(tenant="t", est_tokens=1))  # fails at 2 s
            await asyncio.sleep(0.5)
            proxy.delay_s = 1.8
            late = asyncio.create_task(limiter.admit(tenant="t", est_tokens=1))  # answers at 2.3 s
            await asyncio.gather(timing_out, late)
            assert lines("unavailable") == 1
            assert lines("answering again") == 0
            assert up() == 0
            proxy.delay_s = 0.0
            await limiter.admit(tenant="t", est_tokens=1)  # within retryAfterFailure: not asked
            assert (lines("unavailable"), lines("answering again"), up()) == (1, 0, 0)
            clock.advance(5.0)
            await limiter.admit(tenant="t", est_tokens=1)  # asked again: the outage ends, once
            assert (lines("unavailable"), lines("answering again"), up()) == (1, 1, 1)
        finally:
            await limiter.close()


async def test_past_retry_after_failure_one_decision_probes_a_frozen_redis(
    redis_server: RedisServer, clock: ManualClock
) -> None:
    """Redis frozen (every reply 10 s late), ``retryAfterFailure`` over: 20 concurrent decisions
    (``allow``) ask Redis once, the probe, and the others keep the policy, not waiting on Redis;
    the probe's failure opens a new ``retryAfterFailure``. Before session s44 every decision made
    past the window asked Redis: 20 errors counted, each waiting the whole timeout on a connection
    of its own, and a Redis coming back met them all at once."""
    registry = CollectorRegistry()
    with delay_proxy(redis_server.port, delay_s=0.0) as proxy:
        limiter = _allowing_limiter(proxy.url, clock, registry)

        def errors() -> float | None:
            return registry.get_sample_value("igw_ratelimit_backend_errors_total", {"backend": "redis"})

        try:
            await limiter.admit(tenant="t", est_tokens=1)
            proxy.delay_s = 10.0
            await limiter.admit(tenant="t", est_tokens=1)  # the outage begins
            assert errors() == 1
            clock.advance(5.0)
            connections = proxy.connections
            await asyncio.gather(*(limiter.admit(tenant="t", est_tokens=1) for _ in range(20)))
            assert errors() == 2  # the probe alone
            assert proxy.connections - connections <= 1
            proxy.delay_s = 0.0
            await asyncio.gather(*(limiter.admit(tenant="t", est_tokens=1) for _ in range(20)))
            assert errors() == 2  # within the probe's retryAfterFailure: Redis not asked
            clock.advance(5.0)
            await limiter.admit(tenant="t", est_tokens=1)  # the probe answers: the outage ends
            assert registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 1
            await asyncio.gather(*(limiter.admit(tenant="t", est_tokens=1) for _ in range(5)))
            assert errors() == 2
        finally:
            await limiter.close()
