"""A ``kid`` the issuer reuses for new key material (session s49 probe): the key we hold under it was
rotated out, so it stops verifying at the next fetch even when the new material is unusable to us
(too-short RSA, another key type, ``use: enc``) and that fetch fails for want of a usable key."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.security.helpers import GuardMaker, JwksServer, Keys, SigningKey, TokenFactory, bearer
from tests.security.test_jwks import refused


def _weak_rsa_under_rsa_kid(keys: Keys) -> dict[str, Any]:
    return {**keys.weak_rsa.public_jwk(), "kid": keys.rsa.kid}  # RSA under 2048 bits


def _ec_under_rsa_kid(keys: Keys) -> dict[str, Any]:
    return {**keys.ec.public_jwk(), "kid": keys.rsa.kid, "alg": "RS256"}  # alg does not fit the type


def _enc_rsa_under_rsa_kid(keys: Keys) -> dict[str, Any]:
    return {**keys.rsa2.public_jwk(), "kid": keys.rsa.kid, "use": "enc"}


@pytest.mark.parametrize(
    "replacement",
    [_weak_rsa_under_rsa_kid, _ec_under_rsa_kid, _enc_rsa_under_rsa_kid],
    ids=["weak-rsa", "wrong-type", "use-enc"],
)
async def test_a_kid_reused_for_unusable_material_drops_the_old_key(
    make_guard: GuardMaker,
    jwks_server: JwksServer,
    tokens: TokenFactory,
    keys: Keys,
    replacement: Callable[[Keys], dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issuer rotates ``rsa-1`` to new material we refuse and marks ``ec-1`` ``use: enc``: no usable
    key, a failed fetch. ``ec-1`` (same material) keeps serving; ``rsa-1``'s old key verifies nothing
    from then on, cached verdicts included. Before s49 the old key verified for up to ``maxStale``
    because a JWK still carried its ``kid``."""
    jwks_server.set_keys(keys.rsa, keys.ec)
    guard = await make_guard()
    assert guard.jwks is not None
    rotated = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    kept = bearer(tokens.token(keys.ec, exp=int(tokens.clock()) + 86_400))
    assert (await guard.authenticate(rotated)).authenticated  # verified and cached
    generation = guard.jwks.generation
    new_rsa = replacement(keys)
    jwks_server.jwks = {"keys": [new_rsa, {**keys.ec.public_jwk(), "use": "enc"}]}
    with caplog.at_level(logging.WARNING, logger="igw.security.jwks"):
        await guard.jwks.refresh()
    assert guard.jwks.last_error == "JWKS has no usable keys"
    assert guard.jwks.generation > generation
    await refused(guard, rotated)
    assert (await guard.authenticate(kept)).authenticated
    assert guard.readiness().ready
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "now names different key material" in logged
    for member in ("n", "x", "y"):  # the new material is never echoed
        if member in new_rsa:
            assert new_rsa[member] not in logged


async def test_every_kid_reused_fails_closed_and_readyz_says_why(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    jwks_server.set_keys(keys.rsa)
    guard = await make_guard()
    assert guard.jwks is not None
    token = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    await guard.authenticate(token)
    jwks_server.jwks = {"keys": [_weak_rsa_under_rsa_kid(keys)]}
    await guard.jwks.refresh()
    await refused(guard, token)
    assert not guard.readiness().ready
    detail = guard.jwks.readiness_detail()
    assert "no longer lists any key in use" in detail
    assert "different key material" in detail
    assert keys.weak_rsa.public_jwk()["n"] not in detail
    assert make_guard.metric("igw_jwks_ready") == 0


async def test_a_kid_republished_with_the_same_material_keeps_its_key(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """Pinned: the same key under the same ``kid`` (refused here only for ``use: enc``), its modulus
    written with a leading zero byte (the same integer; some issuers pad), is still listed: a failed
    fetch keeps it serving and keeps cached verdicts."""
    jwks_server.set_keys(keys.rsa)
    guard = await make_guard()
    assert guard.jwks is not None
    generation = guard.jwks.generation
    token = bearer(tokens.token(keys.rsa, exp=int(tokens.clock()) + 86_400))
    await guard.authenticate(token)
    padded = _padded_n(keys.rsa)
    jwks_server.jwks = {"keys": [{**padded, "use": "enc"}]}
    await guard.jwks.refresh()
    assert guard.jwks.last_error == "JWKS has no usable keys"
    assert guard.jwks.generation == generation
    assert (await guard.authenticate(token)).authenticated


def _padded_n(key: SigningKey) -> dict[str, Any]:
    jwk = key.public_jwk()
    raw = base64.urlsafe_b64decode(jwk["n"] + "=" * (-len(jwk["n"]) % 4))
    jwk["n"] = base64.urlsafe_b64encode(b"\0" + raw).rstrip(b"=").decode("ascii")
    return jwk
