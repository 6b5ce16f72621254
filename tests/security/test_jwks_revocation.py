"""Revocation and expiry against the JWKS cache (session s48 probe): a key the issuer withdraws stops
verifying at the next fetch even when nothing usable is published beside it, and a token that
expires while its verification waits for a fetch is refused."""

from __future__ import annotations

import asyncio

from tests.security.helpers import GuardMaker, JwksServer, Keys, TokenFactory, bearer
from tests.security.test_jwks import refused


async def test_a_token_that_expires_while_waiting_for_a_fetch_is_refused(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """A token naming a just-published ``kid`` waits for the refetch; the clock passes its
    ``exp + clockSkew`` meanwhile. Before s48 the claims were judged on the clock read before the
    wait, so it was accepted (and cached) although expired when the verdict was given."""
    jwks_server.set_keys(keys.rsa)
    guard = await make_guard()
    jwks_server.set_keys(keys.rsa, keys.rsa2)
    jwks_server.delay_s = 0.5
    token = bearer(tokens.token(keys.rsa2, exp=int(tokens.clock()) + 1))  # skew 60 s: valid 61 s

    async def time_passes() -> None:
        await asyncio.sleep(0.2)  # the fetch is under way
        tokens.clock.advance(120)

    mover = asyncio.create_task(time_passes())
    await refused(guard, token)
    await mover
    assert make_guard.metric("igw_auth_denied_total", {"reason": "expired"}) == 1
    assert guard.jwks is not None
    published = guard.jwks.usable_keys()
    assert published is not None
    assert "rsa-2" in published.by_kid  # the fetch itself succeeded


async def test_a_withdrawn_key_stops_verifying_though_nothing_usable_replaces_it(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """The issuer drops a compromised key and publishes only a key we refuse (``use: enc``). The fetch
    is a failure (no usable key) and the other keys still serve, but the withdrawn one verifies
    nothing from then on, cached verdicts included. Before s48 it verified for up to ``maxStale``."""
    jwks_server.set_keys(keys.rsa, keys.ec)
    guard = await make_guard()
    assert guard.jwks is not None
    compromised = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    kept = bearer(tokens.token(keys.ec, exp=int(tokens.clock()) + 86_400))
    await guard.authenticate(compromised)  # verified and cached
    # every JWK of the document is refused: a failed fetch. ec-1 is still listed, so it keeps serving
    jwks_server.jwks = {
        "keys": [{**keys.ec.public_jwk(), "use": "enc"}, {**keys.rsa2.public_jwk(), "use": "enc"}]
    }
    await guard.jwks.refresh()
    assert guard.jwks.last_error == "JWKS has no usable keys"
    await refused(guard, compromised)
    assert (await guard.authenticate(kept)).authenticated


async def test_an_issuer_publishing_no_usable_key_at_all_fails_closed(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    jwks_server.set_keys(keys.rsa)
    guard = await make_guard()
    assert guard.jwks is not None
    token = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    await guard.authenticate(token)
    jwks_server.jwks = {"keys": [{**keys.rsa.public_jwk(), "kid": "rsa-1-old", "use": "enc"}]}
    await guard.jwks.refresh()
    assert jwks_server.fetches >= 2
    assert guard.jwks.last_error == "JWKS has no usable keys"
    await refused(guard, token)
    assert not guard.readiness().ready
    assert "no longer lists any key in use" in guard.jwks.readiness_detail()
    assert make_guard.metric("igw_jwks_keys") == 0
    assert make_guard.metric("igw_jwks_ready") == 0  # IgwJwksNotReady
    jwks_server.set_keys(keys.rsa)  # the issuer publishes it again: served after the next fetch
    tokens.clock.advance(5)
    await guard.jwks.refresh()
    assert (await guard.authenticate(token)).authenticated


async def test_a_failed_fetch_that_lists_the_keys_in_use_keeps_them(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """Pinned: a document with no usable key that still lists every key in use (by ``kid``, and by
    its public members for a key without one), and a document of no JWKS shape: the last good keys
    keep serving, as for any failed fetch, and cached verdicts are not dropped."""
    no_kid = {k: v for k, v in keys.ec.public_jwk().items() if k != "kid"}
    jwks_server.jwks = {"keys": [keys.rsa.public_jwk(), no_kid]}
    guard = await make_guard()
    assert guard.jwks is not None
    generation = guard.jwks.generation
    token = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    for document in (
        {"keys": [{**keys.rsa.public_jwk(), "use": "enc"}, {**no_kid, "use": "enc"}]},
        {"keys": "x"},
    ):
        jwks_server.jwks = document
        await guard.jwks.refresh()
        assert guard.jwks.last_error is not None
        assert guard.jwks.generation == generation
        assert (await guard.authenticate(token)).authenticated


async def test_a_refetch_of_the_same_keys_keeps_cached_verdicts(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """An unknown ``kid`` (anyone may send one) refetches the JWKS once per cooldown. When the issuer
    still publishes the same keys, cached verdicts stay (a hit, no signature check); before s48 every
    successful fetch emptied the verified-token cache, so such a token forced a re-verification of
    every active token every 30 s. A set that did change still drops them (attack case J26)."""
    jwks_server.set_keys(keys.rsa, keys.ec)
    guard = await make_guard()
    assert guard.jwks is not None
    token = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    await guard.authenticate(token)  # verified and cached
    unknown = bearer(tokens.token(keys.attacker, kid="nobody"))
    generation, fetches = guard.jwks.generation, jwks_server.fetches
    jwks_server.jwks = {"keys": list(reversed(jwks_server.jwks["keys"]))}  # same keys, other order
    await refused(guard, unknown)
    assert jwks_server.fetches == fetches + 1
    assert guard.jwks.generation == generation
    assert (await guard.authenticate(token)).authenticated
    assert make_guard.metric("igw_auth_token_cache_total", {"result": "hit"}) == 1

    for changed in (
        [keys.rsa.public_jwk(), keys.ec.public_jwk(), keys.rsa2.public_jwk()],  # a key added
        [keys.rsa.public_jwk(), {**keys.ec.public_jwk(), "kid": "ec-renamed"}],  # same key, new kid
    ):
        tokens.clock.advance(31)  # past the unknown-kid cooldown
        jwks_server.jwks = {"keys": changed}
        await refused(guard, unknown)
        assert guard.jwks.generation > generation
        generation = guard.jwks.generation
        misses = make_guard.metric("igw_auth_token_cache_total", {"result": "miss"})
        assert (await guard.authenticate(token)).authenticated
        assert make_guard.metric("igw_auth_token_cache_total", {"result": "miss"}) == (misses or 0) + 1
