"""Hot reload rebuilds the request guard, through the real gateway over loopback.

The gateway is started from a YAML file with hot reload on and ``igw.security``'s guard factory (as
``igw serve`` does); the file is rewritten and the poller picks it up. Proves: a reload that adds
``spec.auth`` makes unauthenticated requests 401; one that changes ``modelAccess`` makes 403
follow; one that sets a rate limit makes 429s follow, and lifting it lifts them; a reload whose
guard cannot be built or does not become ready is rejected with the reason, and the old guard
and configuration keep serving (and ``igw_auth_enabled`` keeps describing them).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client import CollectorRegistry

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.inference import STATE_KEY
from igw.gateway.reload import ConfigReloader
from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.state import GatewayState
from igw.security.factory import RequestGuardFactory
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, Keys, TokenFactory, wait_until
from tests.security.test_gateway_e2e import ROUTING, Gw, doc

FAST_RELOAD = {"routing": {**ROUTING, "configReloadInterval": "50ms"}}


def write(path: Path, *, issuer: JwksServer | None, extensions: Mapping[str, Any] | None = None) -> None:
    document = doc(
        issuer=issuer.issuer if issuer else None,
        jwks_uri=issuer.jwks_uri if issuer else "",
        extensions={**FAST_RELOAD, **(extensions or {})},
    )
    path.write_text(yaml.safe_dump(document))


def access(models: list[str]) -> dict[str, Any]:
    return {"authorization": {"modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": models}]}}


@contextlib.asynccontextmanager
async def reloading_gateway(
    tmp_path: Path,
    servers: tuple[FakeModelServer, ...],
    *,
    client_ssl: ssl.SSLContext,
    limits: ServerLimits | None = None,
) -> AsyncIterator[tuple[Gw, Path]]:
    """The gateway of ``igwc.yaml`` over loopback, reloading it; ``limits``: the listener's (as
    ``igw serve`` passes them, the header field limit to the reloader too)."""
    config_path = tmp_path / "igwc.yaml"
    endpoints = tmp_path / "endpoints.yaml"
    a, b = servers
    endpoints.write_text(yaml.safe_dump({"schedulers": {"pool": [a.key], "other": [b.key]}}))
    config = load_gateway_config(config_path)
    registry = CollectorRegistry()
    app = create_app(
        config,
        guard_factory=RequestGuardFactory(registry=registry, jwks_ssl_context=client_ssl),
        guard_ready_timeout_s=1.0,
        discovery=StaticFileDiscovery(
            endpoints, names={"pool": "pool", "other": "other"}, poll_interval_s=0.05
        ),
        rng=random.Random(1),
        registry=registry,
        config_path=config_path,
        max_header_field_bytes=None if limits is None else limits.max_header_field_bytes,
    )
    async with (
        serve_app(app, host="127.0.0.1", port=0, limits=limits or ServerLimits()) as url,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as http,
    ):
        gw = Gw(url, app[STATE_KEY], http, registry)
        await wait_until(lambda: gw.state.readiness()[0], timeout_s=5)
        yield gw, config_path


def reloads(gw: Gw, result: str) -> float:
    return gw.registry.get_sample_value("igw_config_reloads_total", {"result": result}) or 0.0


def auth_enabled(gw: Gw) -> float | None:
    return gw.registry.get_sample_value("igw_auth_enabled")


async def eventually_status(gw: Gw, status: int, **call: Any) -> None:
    async def check() -> bool:
        return (await gw.call(**call))[0] == status

    deadline = time.monotonic() + 5
    while not await check():
        assert time.monotonic() < deadline, f"never answered {status}"


async def test_reload_that_adds_auth_then_narrows_model_access(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    write(tmp_path / "igwc.yaml", issuer=None)
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        reloading_gateway(tmp_path, servers, client_ssl=client_ssl) as (gw, config_path),
    ):
        assert (await gw.call())[0] == 200  # open: no token needed
        assert auth_enabled(gw) == 0

        write(config_path, issuer=jwks_server, extensions=access(["m"]))
        await eventually_status(gw, 401)
        _, headers, _ = await gw.call()
        assert headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        tokens.clock.now = time.time()  # the gateway runs on the real clock
        bearer = {"Authorization": f"Bearer {tokens.token()}"}
        assert (await gw.call(headers=bearer))[0] == 200
        assert (await gw.call(model="secret", headers=bearer))[0] == 403
        assert auth_enabled(gw) == 1
        assert reloads(gw, "applied") == 1

        # the tenant's allowed models change: "m" is now refused, "secret" allowed
        write(config_path, issuer=jwks_server, extensions=access(["secret"]))
        await eventually_status(gw, 403, headers=bearer)
        a, b = servers
        before = len(a.received), len(b.received)
        _, _, body = await gw.call(headers=bearer)
        assert b"tenant 'team-a' is not allowed to use model 'm'" in body
        assert (await gw.call(headers={}))[0] == 401
        assert (await gw.call(model="secret", headers=bearer))[0] == 200
        assert reloads(gw, "applied") == 2
        # refused requests never went upstream
        assert (len(a.received), len(b.received)) == (before[0], before[1] + 1)


async def test_reload_that_sets_then_lifts_a_rate_limit(tmp_path: Path, client_ssl: ssl.SSLContext) -> None:
    """The rate limiter reads its tenants' limits once, when it is built: a reload's new limits must
    come with the guard the reload builds, and lifting them must lift them."""
    write(tmp_path / "igwc.yaml", issuer=None)
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        reloading_gateway(tmp_path, servers, client_ssl=client_ssl) as (gw, config_path),
    ):
        for _ in range(3):
            assert (await gw.call())[0] == 200  # no limit

        limited = {"rateLimits": {"default": {"requestsPerSecond": 0.001, "burst": 1}}}
        write(config_path, issuer=None, extensions=limited)
        await eventually_status(gw, 429)  # the burst of one spent, the next is refused
        assert (await gw.call())[0] == 429
        assert reloads(gw, "applied") == 1

        write(config_path, issuer=None)
        await eventually_status(gw, 200)
        for _ in range(3):
            assert (await gw.call())[0] == 200
        assert reloads(gw, "applied") == 2


async def test_reload_with_a_failing_guard_keeps_the_old_guard_and_config(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    write(tmp_path / "igwc.yaml", issuer=jwks_server, extensions=access(["m"]))
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        reloading_gateway(tmp_path, servers, client_ssl=client_ssl) as (gw, config_path),
    ):
        tokens.clock.now = time.time()
        bearer = {"Authorization": f"Bearer {tokens.token()}"}
        assert (await gw.call(headers=bearer))[0] == 200
        guard = gw.state.guard

        # 1. a guard setting the guard refuses: a duplicate tenant override (refused by the config's
        # own check since session s39, before the guard is built: named by its path either way)
        dup = {"rateLimits": {"tenants": [{"tenant": "t", "requestsPerSecond": 1}] * 2}}
        write(config_path, issuer=jwks_server, extensions={**access(["secret"]), **dup})
        await wait_until(lambda: reloads(gw, "rejected") == 1, timeout_s=5)
        error = gw.state.readiness()[1]["config_reload_error"]
        assert "rateLimits.tenants[1].tenant" in error, error
        assert gw.state.guard is guard

        # 2. an issuer whose keys cannot be loaded: the new guard never becomes ready
        await jwks_server.stop()
        write(config_path, issuer=None, extensions=access(["secret"]))  # open mode: applied at once
        write(config_path, issuer=jwks_server, extensions=access(["secret"]))
        # (the two writes may coalesce into one poll; either way the unreachable issuer is rejected)
        await wait_until(lambda: reloads(gw, "rejected") == 2, timeout_s=8)
        ready, detail = gw.state.readiness()
        assert "request guard not ready after 1s" in detail["config_reload_error"]
        running_guard = gw.state.guard
        assert running_guard is guard or running_guard.readiness().detail.startswith(
            "authentication DISABLED"
        )
        expected_auth = 1 if running_guard is guard else 0
        assert auth_enabled(gw) == expected_auth  # the gauge describes the guard that serves
        assert ready == running_guard.readiness().ready


async def test_a_reload_whose_guard_was_not_ready_is_applied_once_the_issuer_is_back(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext
) -> None:
    """Worker 0 and a follower of ``igw serve --workers 2`` (two reloaders on one file, as there):
    worker 0 reloads a change of the tenant's models and fetches the issuer's keys; the issuer fails
    the follower's fetch, so the follower rejects the change. Once the issuer answers again the
    follower applies it without the file changing - before, its digest was settled, and it served the
    old models (another tenant's access) until the file changed again while worker 0 served the new."""
    config_path = tmp_path / "igwc.yaml"
    write(config_path, issuer=jwks_server, extensions=access(["m"]))
    registry = CollectorRegistry()
    factory = RequestGuardFactory(registry=registry, jwks_ssl_context=client_ssl)
    workers: list[tuple[GatewayState, ConfigReloader]] = []
    for _ in range(2):
        config = load_gateway_config(config_path)
        guard = factory(config)
        await guard.start()
        await wait_until(lambda g=guard: g.readiness().ready, timeout_s=5)  # type: ignore[misc]
        state = GatewayState(config, guard=guard, clock=time.monotonic, rng=random.Random(0))
        reloader = ConfigReloader(config_path, state=state, guard_factory=factory, guard_ready_timeout_s=0.3)
        workers.append((state, reloader))
    (leader, leading), (follower, following) = workers
    following.follows = True
    leading.on_changed = following.nudge  # worker 0's announcement over the scrape channel
    jwks_server.mode = "status"  # the issuer fails: worker 0's guard below is built by hand first

    def models(state: GatewayState) -> object:
        return state.runtime.config.extensions["authorization"]["modelAccess"][0]["models"]

    try:
        write(config_path, issuer=jwks_server, extensions=access(["secret"]))
        # Worker 0 got the keys (its check runs while the issuer answers), the follower did not.
        jwks_server.mode = "ok"
        assert await leading.check() is True
        jwks_server.mode = "status"
        assert await following.check() is False
        assert models(leader) == ["secret"]
        assert models(follower) == ["m"]
        assert "request guard not ready" in (follower.config_error or "")
        leading.start()
        following.start()
        await asyncio.sleep(0.5)
        assert models(follower) == ["m"]  # the issuer still fails: the old config and guard stay

        jwks_server.mode = "ok"  # the issuer is back; the file has not changed
        await wait_until(lambda: models(follower) == ["secret"], timeout_s=5)
        assert follower.config_error is None
        assert following.retrying is False
        assert models(leader) == ["secret"]
    finally:
        for state, reloader in workers:
            await reloader.stop()
            await state.guard.close()


async def test_a_request_waiting_for_a_rotated_key_is_answered_across_a_reload(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory, keys: Keys
) -> None:
    """A token signed with a key the issuer just added makes its request wait for a JWKS refetch. A
    reload that replaces the guard meanwhile closes the old one at once: before session s40 that
    cancelled the refetch under the request, whose connection was dropped without an answer
    (aiohttp's ServerDisconnectedError at the client); now the refetch finishes and answers it."""
    write(tmp_path / "igwc.yaml", issuer=jwks_server, extensions=access(["m"]))
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        reloading_gateway(tmp_path, servers, client_ssl=client_ssl) as (gw, config_path),
    ):
        tokens.clock.now = time.time()
        assert (await gw.call(headers={"Authorization": f"Bearer {tokens.token()}"}))[0] == 200
        jwks_server.set_keys(keys.rsa, keys.rsa2)  # rotation: a new kid appears
        jwks_server.delay_s = 2.0  # the old guard's refetch is slow ...
        rotated = {"Authorization": f"Bearer {tokens.token(keys.rsa2)}"}
        waiting = asyncio.create_task(gw.call(headers=rotated))
        await wait_until(lambda: jwks_server.hits.get("/jwks", 0) >= 2, timeout_s=5)
        jwks_server.delay_s = 0.0  # ... the new guard's is not: the swap happens mid-refetch
        write(config_path, issuer=jwks_server, extensions=access(["m", "secret"]))
        await wait_until(lambda: reloads(gw, "applied") == 1, timeout_s=8)
        status, _, _ = await waiting
        assert status == 200
        assert (await gw.call(headers=rotated))[0] == 200  # and the new guard knows the key


async def test_a_reload_whose_token_cap_the_running_listener_cannot_carry_is_refused_whole(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """``igw serve --max-header-bytes 8212`` with the default cap of 8,192 starts (the cap fits); a
    reload that raised ``maxTokenBytes`` to 16,000 passed the config's own rule (its
    ``serverLimits.maxHeaderBytes`` defaults to 16,384) and was applied before session s42, though the
    listener keeps the limit it started with: every token over 8,192 bytes got a 431 naming no token.
    Now the reload is refused as a whole, naming the file, and a cap that fits is applied."""
    write(tmp_path / "igwc.yaml", issuer=jwks_server)
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        reloading_gateway(
            tmp_path, servers, client_ssl=client_ssl, limits=ServerLimits(max_header_field_bytes=8212)
        ) as (gw, config_path),
    ):
        tokens.clock.now = time.time()
        bearer = {"Authorization": f"Bearer {tokens.token()}"}
        assert (await gw.call(headers=bearer))[0] == 200
        guard, config = gw.state.guard, gw.state.runtime.config

        write(config_path, issuer=jwks_server, extensions={"authorization": {"maxTokenBytes": 16000}})
        await wait_until(lambda: reloads(gw, "rejected") == 1, timeout_s=5)
        error = gw.state.readiness()[1]["config_reload_error"]
        assert error.startswith(f"{config_path}: spec.extensions.authorization.maxTokenBytes 16000"), error
        assert "listener runs with maxHeaderBytes 8212" in error
        assert gw.state.guard is guard
        assert gw.state.runtime.config is config
        assert reloads(gw, "applied") == 0
        assert gw.registry.get_sample_value("igw_config_last_reload_successful") == 0
        assert (await gw.call(headers=bearer))[0] == 200

        write(config_path, issuer=jwks_server, extensions={"authorization": {"maxTokenBytes": 4096}})
        await wait_until(lambda: reloads(gw, "applied") == 1, timeout_s=5)
        assert gw.state.runtime.config.extensions["authorization"]["maxTokenBytes"] == 4096
        assert (await gw.call(headers=bearer))[0] == 200


async def test_a_reload_that_changes_the_provider_drops_cached_verdicts(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """Pinned (session s48 probe): a token verified, and cached, under the old audiences is refused
    once a reload changes them, and again once ``requiredClaims`` changes: the new guard has its
    own verified-token cache, so no verdict of the old provider settings applies."""

    def write_provider(path: Path, **provider: Any) -> None:
        document = doc(issuer=jwks_server.issuer, jwks_uri=jwks_server.jwks_uri, extensions=FAST_RELOAD)
        document["spec"]["auth"]["jwt"]["provider"].update(provider)
        path.write_text(yaml.safe_dump(document))

    write(tmp_path / "igwc.yaml", issuer=jwks_server)
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        reloading_gateway(tmp_path, servers, client_ssl=client_ssl) as (gw, config_path),
    ):
        tokens.clock.now = time.time()  # the gateway runs on the real clock
        bearer = {"Authorization": f"Bearer {tokens.token(exp=int(time.time()) + 3600)}"}
        for _ in range(3):  # verified once, then cache hits
            assert (await gw.call(headers=bearer))[0] == 200
        write_provider(config_path, audiences=["another-audience"])
        await eventually_status(gw, 401, headers=bearer)
        write_provider(config_path)
        await eventually_status(gw, 200, headers=bearer)
        write_provider(
            config_path, requiredClaims=[{"name": "tenant", "valueType": "String", "values": ["team-b"]}]
        )
        await eventually_status(gw, 401, headers=bearer)
        assert reloads(gw, "applied") == 3
