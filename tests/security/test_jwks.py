"""The JWKS cache against a real HTTPS issuer on loopback: cold start (A8), outages of every kind
and recovery (A7, J28), unknown-kid floods (A5, J4), rotation under traffic (A6, J26, J27), single
flight, background refresh, OIDC discovery, and a multi-token request during an outage (A12)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from typing import Any

import pytest
import trustme
from multidict import CIMultiDict

from igw.gateway.guards import GuardDenied
from igw.security.jwks import COLD_RETRY_CAP_S
from tests.security.helpers import (
    GuardMaker,
    JwksServer,
    Keys,
    TokenFactory,
    bearer,
    mint,
    wait_until,
)

SHORT = {"authorization": {"jwks": {"fetchTimeout": "300ms"}}}


async def refused(guard: object, headers: object) -> GuardDenied:
    with pytest.raises(GuardDenied) as info:
        await guard.authenticate(headers)  # type: ignore[attr-defined]
    assert info.value.status == 401
    return info.value


async def test_a8_cold_start_with_issuer_down_is_not_ready_and_refuses(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    jwks_server.mode, jwks_server.status = "status", 503
    guard = await make_guard(wait_ready=False, real_clock=True)
    tokens.clock.now = time.time()
    assert guard.jwks is not None
    jwks = guard.jwks
    await wait_until(lambda: jwks.last_error is not None, timeout_s=5)
    readiness = guard.readiness()
    assert not readiness.ready
    assert "JWKS not loaded" in readiness.detail
    assert "HTTP 503" in readiness.detail
    for _ in range(3):
        await refused(guard, bearer(tokens.token()))  # never 200 without verification
    jwks_server.mode = "ok"
    # Ready within the capped retry backoff of the issuer recovering: the next attempt is already
    # scheduled no later than that (asserted on the cache's own schedule, not on a wall clock) ...
    assert jwks._next_refresh_in() <= COLD_RETRY_CAP_S
    # ... and it happens; generous bound, a loaded machine may run the retry late.
    await wait_until(lambda: guard.readiness().ready, timeout_s=30)
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated
    assert make_guard.metric("igw_jwks_ready") == 1


async def test_cold_start_fetch_is_single_flight(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    jwks_server.delay_s = 0.2
    guard = await make_guard(wait_ready=False)
    results = await asyncio.gather(*(guard.authenticate(bearer(tokens.token())) for _ in range(50)))
    assert all(p.authenticated for p in results)
    assert jwks_server.fetches == 1


@pytest.mark.parametrize(
    "mode",
    ["slow", "status-500", "status-404", "tls-error", "html", "huge", "redirect_http", "redirect_other_host"],
)
async def test_a7_j28_issuer_outage_keeps_last_good_keys_until_max_stale_then_fails_closed(
    mode: str, make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, ca: trustme.CA
) -> None:
    guard = await make_guard(
        extensions={"authorization": {"jwks": {"fetchTimeout": "1500ms", "maxStale": "1h"}}}
    )
    good = bearer(tokens.token())
    assert (await guard.authenticate(good)).authenticated
    if mode == "slow":
        jwks_server.delay_s = 3.0
    elif mode.startswith("status-"):
        jwks_server.mode, jwks_server.status = "status", int(mode.split("-")[1])
    elif mode == "tls-error":
        assert jwks_server.ssl_context is not None
        trustme.CA().issue_cert("127.0.0.1").configure_cert(jwks_server.ssl_context)  # untrusted cert
    else:
        jwks_server.mode = mode
    jwks = guard.jwks
    assert jwks is not None
    tokens.clock.advance(301)  # past the TTL
    refreshed = asyncio.Event()
    lag_probe = asyncio.create_task(_max_loop_lag(refreshed))
    await asyncio.sleep(0)  # the probe's first sleep begins before the refresh does
    await jwks.refresh()
    refreshed.set()
    # A blocking fetch would stall the loop for the whole 1.5 s fetch timeout ("slow" mode). The
    # bound leaves a loaded machine's scheduling 1 s (a 300 ms timeout and a 0.25 s bound failed
    # once in 10 runs at a load of 8 on 2 cores: 0.2500 s of lag) without letting such a stall pass.
    assert await lag_probe < 1.0, "a failing fetch must never block the event loop"
    assert jwks.last_error is not None
    good = bearer(tokens.token())
    assert (await guard.authenticate(good)).authenticated, "stale keys keep verifying"
    assert guard.readiness().ready
    assert "stale" in guard.readiness().detail
    tokens.clock.advance(3600)  # beyond max stale
    fresh = bearer(tokens.token())
    await refused(guard, fresh)
    assert not guard.readiness().ready
    assert "fail closed" in guard.readiness().detail
    failures = make_guard.metric("igw_jwks_fetch_total", {"result": "failure"})
    assert failures is not None
    assert failures >= 1
    # recovery: the next request after the (cold) retry backoff fetches again
    if mode == "tls-error":
        assert jwks_server.ssl_context is not None
        ca.issue_cert("127.0.0.1").configure_cert(jwks_server.ssl_context)
    jwks_server.mode, jwks_server.delay_s = "ok", 0.0
    tokens.clock.advance(3)
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated
    assert guard.readiness().ready


async def _max_loop_lag(done: asyncio.Event) -> float:
    """The longest the event loop was late waking a 5 ms sleep until ``done`` is set (a refresh has
    ended): a fetch that blocked the loop shows as one lag as long as the fetch."""
    worst = 0.0
    while not done.is_set():
        before = time.monotonic()
        await asyncio.sleep(0.005)
        worst = max(worst, time.monotonic() - before - 0.005)
    return worst


async def test_a5_j4_unknown_kid_flood_refetches_at_most_once_per_cooldown(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    guard = await make_guard(extensions={"authorization": {"jwks": {"unknownKidCooldown": "10s"}}})
    start_fetches = jwks_server.fetches
    rng = random.Random(7)
    claims = tokens.claims(exp=int(tokens.clock()) + 3600)
    window_s, step_s = 30.0, 0.05
    elapsed = 0.0
    valid = bearer(tokens.token(exp=int(tokens.clock()) + 3600))
    while elapsed < window_s:
        kid = f"kid-{rng.getrandbits(64):x}"
        forged = mint(keys.attacker, claims, header={"alg": "RS256", "kid": kid})
        await refused(guard, bearer(forged))
        assert (await guard.authenticate(valid)).authenticated  # valid traffic unaffected
        tokens.clock.advance(step_s)
        elapsed += step_s
    flood_fetches = jwks_server.fetches - start_fetches
    assert 1 <= flood_fetches <= math.ceil(window_s / 10) + 1
    assert make_guard.metric("igw_auth_denied_total", {"reason": "no_matching_key"}) == 600


async def test_an_unknown_kid_looked_up_as_a_fetch_ends_refetches(
    make_guard: GuardMaker, jwks_server: JwksServer
) -> None:
    """A lookup that runs after a fetch's task ended but before the event loop turned (a request
    handled in the same pass, a burst of lookups that never suspends) starts a fetch of its own for an
    unknown ``kid``. It joined the finished fetch instead (before session s41): nothing refetched, no
    cooldown started, and the flood test above saw 0 refetches in about one run of five under load.
    The probe runs in the fetch task's first done callback, exactly that moment."""
    guard = await make_guard()
    jwks = guard.jwks
    assert jwks is not None
    loop = asyncio.get_running_loop()
    previous = loop.get_task_factory()
    armed = [True]
    suspended: list[bool] = []

    def probe(_: object) -> None:
        lookup = jwks.candidates(kid="kid-published-a-moment-ago", alg="RS256")
        try:
            lookup.send(None)
        except StopIteration:
            suspended.append(False)  # answered at once: it joined the finished fetch
        else:
            suspended.append(True)  # waits on a fetch of its own (which goes on without it)
            lookup.close()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Future[Any]:
        task = asyncio.Task(coro, loop=loop)
        if armed[0] and getattr(coro, "__qualname__", "") == "JwksCache._fetch_and_install":
            armed[0] = False
            task.add_done_callback(probe)  # before the cache's own callback, which clears it
        return task

    before = jwks_server.fetches
    loop.set_task_factory(factory)
    try:
        await jwks.refresh()
    finally:
        loop.set_task_factory(previous)
    assert suspended == [True]
    await wait_until(lambda: jwks_server.fetches == before + 2, timeout_s=30)


async def test_a6_j27_j26_rotation_under_traffic(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    jwks_server.set_keys(keys.rsa)
    guard = await make_guard()
    signer = [keys.rsa]
    failures: list[str] = []
    stop = asyncio.Event()
    sent = 0

    async def traffic() -> None:
        nonlocal sent
        while not stop.is_set():
            key = signer[0]
            try:
                await guard.authenticate(bearer(tokens.token(key, jti=str(sent))))
            except GuardDenied:
                failures.append(key.kid)
            sent += 1
            await asyncio.sleep(0)

    async def after(requests: int) -> None:
        """Phases by requests sent, not by wall time (a loaded machine signs and verifies slowly)."""
        target = sent + requests
        await wait_until(lambda: sent >= target, timeout_s=120)

    runner = asyncio.create_task(traffic())
    await after(15)
    jwks_server.set_keys(keys.rsa, keys.rsa2)  # 1. publish kid2
    await after(15)
    signer[0] = keys.rsa2  # 2. the issuer switches signer: first kid2 token triggers one refetch
    await after(30)
    stop.set()
    await runner
    assert sent >= 60
    assert failures == [], "no false 401 during rotation"
    old_token = bearer(tokens.token(keys.rsa))
    assert (await guard.authenticate(old_token)).authenticated  # kid1 still published
    jwks_server.set_keys(keys.rsa2)  # 3. remove kid1
    tokens.clock.advance(301)  # next TTL refresh picks up the removal
    assert guard.jwks is not None
    await guard.jwks.refresh()
    await refused(guard, old_token)  # J26: even though this exact token was cached as valid
    assert (await guard.authenticate(bearer(tokens.token(keys.rsa2)))).authenticated


async def test_background_refresh_happens_without_traffic(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    guard = await make_guard(extensions={"authorization": {"jwks": {"ttl": "1s"}}})
    first = jwks_server.fetches
    assert guard.jwks is not None
    await asyncio.sleep(1.5)  # longer than the TTL in real time, but the injected clock stands still
    assert jwks_server.fetches == first, "the refresher must read the injected clock, not the wall clock"
    tokens.clock.advance(2)  # past the TTL on the injected clock; no request is made
    # The refresher rechecks the injected clock after its (real) 1 s sleep; generous bound for load.
    await wait_until(lambda: jwks_server.fetches > first, timeout_s=30)


async def test_a12_multiple_tokens_during_outage_is_refused_without_crash(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    guard = await make_guard(extensions=SHORT)
    jwks_server.mode, jwks_server.status = "status", 500
    tokens.clock.advance(90_000)  # beyond the default max stale: JWKS unusable
    headers: CIMultiDict[str] = CIMultiDict()
    headers.add("Authorization", f"Bearer {tokens.token()}")
    headers.add("Authorization", "Bearer garbage")
    await asyncio.gather(*(refused(guard, headers) for _ in range(20)))
    await refused(guard, bearer(tokens.token()))
    assert make_guard.metric("igw_auth_denied_total", {"reason": "jwks_unavailable"}) == 1


async def test_issuer_checks_happen_before_any_jwks_fetch(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    """Envoy's order: wrong issuer / expired tokens never cause a fetch, even at cold start."""
    jwks_server.mode, jwks_server.status = "status", 500
    guard = await make_guard(wait_ready=False)
    assert guard.jwks is not None
    jwks = guard.jwks
    await wait_until(lambda: jwks.last_error is not None, timeout_s=5)
    before = jwks_server.fetches
    await refused(guard, bearer(tokens.token(iss="https://other")))
    await refused(guard, bearer(tokens.token(exp=int(tokens.clock()) - 3600)))
    assert jwks_server.fetches == before


async def test_oidc_discovery_uses_discovered_jwks_uri(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    jwks_server.discovery = {"issuer": jwks_server.issuer, "jwks_uri": f"{jwks_server.base}/keys2"}
    guard = await make_guard(extensions={"authorization": {"oidcDiscovery": True}})
    assert jwks_server.hits.get("/keys2") == 1
    assert "/jwks" not in jwks_server.hits
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated


@pytest.mark.parametrize(
    "discovery",
    [
        {"issuer": "https://impostor.example", "jwks_uri": "/keys2"},
        {"issuer": "ISSUER", "jwks_uri": "http://127.0.0.1/keys2"},
        {"issuer": "ISSUER"},
        {"issuer": "ISSUER", "jwks_uri": "https://[::1/keys2"},
        None,
    ],
    ids=[
        "issuer-mismatch",
        "jwks-uri-not-https",
        "no-jwks-uri",
        "jwks-uri-malformed",
        "no-discovery-document",
    ],
)
async def test_oidc_discovery_failure_falls_back_to_remote_jwks_uri(
    discovery: dict[str, str] | None, make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    if discovery is not None:
        discovery = {k: v.replace("ISSUER", jwks_server.issuer) for k, v in discovery.items()}
        if discovery.get("jwks_uri") == "/keys2":
            discovery["jwks_uri"] = f"{jwks_server.base}/keys2"
    jwks_server.discovery = discovery
    guard = await make_guard(extensions={"authorization": {"oidcDiscovery": True}})
    assert jwks_server.hits.get("/keys2", 0) == 0
    assert jwks_server.hits["/jwks"] == 1
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated


async def test_one_malformed_key_leaves_the_rest_of_the_set_usable(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """J22: a JWK whose ``alg`` is a list (or whose OKP ``crv`` is) is skipped like any unusable
    key. Before session s39 it raised ``TypeError`` out of the fetch: the whole set was unusable,
    the gateway never became ready, and every request started a fetch of its own."""
    jwks_server.set_keys(keys.rsa, extra=[{**keys.rsa2.public_jwk(), "alg": ["RS256"]}])
    guard = await make_guard()
    assert guard.jwks is not None
    assert guard.jwks.last_error is None
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated


async def test_a_malformed_redirect_is_a_failed_fetch_with_backoff_not_one_fetch_per_request(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    """J28: an issuer (or a proxy in front of it) redirecting to a ``Location`` no URL parser
    accepts is a fetch failure like the others: reported, retried on the backoff schedule. Before
    session s39 yarl's ``ValueError`` escaped the fetch, skipping the backoff: each of these 20
    requests fetched the JWKS again and was refused as an internal error."""
    jwks_server.mode = "redirect_malformed"
    guard = await make_guard(wait_ready=False)
    jwks = guard.jwks
    assert jwks is not None
    await wait_until(lambda: jwks.last_error is not None, timeout_s=5)
    assert "malformed" in guard.readiness().detail
    before = jwks_server.hits.get("/jwks", 0)
    for _ in range(20):
        await refused(guard, bearer(tokens.token()))
    assert jwks_server.hits.get("/jwks", 0) - before <= 1
    assert make_guard.metric("igw_auth_denied_total", {"reason": "internal_error"}) is None
    assert make_guard.metric("igw_auth_denied_total", {"reason": "jwks_unavailable"}) == 20


async def test_same_host_redirect_is_followed(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory
) -> None:
    jwks_server.mode = "redirect_same"
    guard = await make_guard()
    assert jwks_server.hits.get("/jwks-moved") == 1
    assert (await guard.authenticate(bearer(tokens.token()))).authenticated


def test_the_key_generation_moves_with_each_installed_key_set_and_is_read_without_a_call(keys: Keys) -> None:
    """``generation`` (read by the verifier for every authenticated request) goes up with each key set
    installed, and reading it runs no Python function (this module is interpreted in the compiled
    build: a property there is an interpreted call per request)."""
    import sys
    from types import FrameType

    from igw.security.jwks import JwksCache
    from igw.security.settings import JwksSettings

    cache = JwksCache(
        jwks_uri="https://issuer.example/jwks",
        issuer="https://issuer.example",
        settings=JwksSettings(),
        algorithms=["RS256"],
        clock=time.monotonic,
        rng=random.Random(1),
    )
    assert cache.generation == 0
    cache.load_document({"keys": [keys.rsa.public_jwk()]})
    assert cache.generation == 1
    cache.load_document({"keys": [keys.rsa.public_jwk(), keys.rsa2.public_jwk()]})
    assert cache.generation == 2
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        read = cache.generation
    finally:
        sys.setprofile(None)
    assert read == 2
    assert calls == []


async def test_closing_lets_a_fetch_that_requests_wait_on_finish_and_cancels_an_idle_one(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """A hot reload closes the replaced guard at once. A request waiting on its refetch (a new
    ``kid``) is answered by that fetch's keys (before session s40 the fetch was cancelled under it:
    CancelledError, a dropped connection); a refresh nobody waits on is still cancelled, so closing
    (and shutting down) does not wait for a slow issuer."""
    guard = await make_guard()
    jwks = guard.jwks
    assert jwks is not None
    jwks_server.set_keys(keys.rsa, keys.rsa2)
    jwks_server.delay_s = 1.0
    fetches = jwks_server.hits.get("/jwks", 0)
    waiting = asyncio.create_task(guard.authenticate(bearer(tokens.token(keys.rsa2))))
    await wait_until(lambda: jwks_server.hits.get("/jwks", 0) > fetches, timeout_s=5)
    await guard.close()
    assert (await waiting).authenticated

    idle = await make_guard()
    assert idle.jwks is not None
    fetches = jwks_server.hits.get("/jwks", 0)
    background = asyncio.create_task(idle.jwks.refresh())
    await wait_until(lambda: jwks_server.hits.get("/jwks", 0) > fetches, timeout_s=5)
    background.cancel()  # its only waiter gone: nobody waits on the fetch
    with contextlib.suppress(asyncio.CancelledError):
        await background
    started = time.monotonic()
    await idle.close()
    assert time.monotonic() - started < 0.5
