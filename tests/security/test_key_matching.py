"""Which JWKS keys a token is checked against, and how many: a token that names no key of the set
is bounded by ``jwks.maxKeysPerToken`` (an unauthenticated flood of forged kid-less tokens cost one
signature check per key, up to ``maxKeys``, before session s40), and a token whose ``kid`` no key
carries matches the keys published without one, as Envoy's jwt_verify_lib does (before session s40
it matched nothing).

Through the real guard against a real HTTPS issuer on loopback; the reason of each refusal is read
from ``igw_auth_denied_total``."""

from __future__ import annotations

from typing import Any

import pytest

from igw.gateway.guards import GuardDenied
from tests.security.helpers import GuardMaker, JwksServer, Keys, SigningKey, TokenFactory, bearer, mint


def _without_kid(key: SigningKey) -> dict[str, Any]:
    jwk = key.public_jwk()
    del jwk["kid"]
    return jwk


def _copies(key: SigningKey, count: int) -> list[dict[str, Any]]:
    """``count`` JWKs of ``key``'s public key under distinct kids: as many keys bound to its alg."""
    return [{**key.public_jwk(), "kid": f"{key.kid}-{n}"} for n in range(count)]


async def _refusal_reason(make_guard: GuardMaker, guard: object, token: str) -> str:
    before = _denials(make_guard)
    with pytest.raises(GuardDenied) as info:
        await guard.authenticate(bearer(token))  # type: ignore[attr-defined]
    assert info.value.status == 401
    after = _denials(make_guard)
    (reason,) = [r for r, n in after.items() if n > before.get(r, 0)]
    return reason


def _denials(make_guard: GuardMaker) -> dict[str, float]:
    registry = make_guard.registries[-1]
    return {
        sample.labels["reason"]: sample.value
        for metric in registry.collect()
        if metric.name == "igw_auth_denied"
        for sample in metric.samples
        if sample.name == "igw_auth_denied_total"
    }


async def test_a_forged_kidless_token_against_many_keys_is_refused_before_any_signature_check(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """100 RS256 keys (the default maxKeys): a forged token without kid cost 100 signature checks
    (2.6 ms of CPU measured in session s40; 26 ms at 1,000 keys, 105 ms with EdDSA keys) and was
    refused as ``bad_signature``. Now it is refused as ``kid_required`` before any check."""
    jwks_server.jwks = {"keys": _copies(keys.rsa, 100)}
    guard = await make_guard()
    forged = mint(keys.attacker, tokens.claims(), header={"alg": "RS256", "typ": "JWT"})
    assert await _refusal_reason(make_guard, guard, forged) == "kid_required"
    # the issuer's own kid-less token is refused the same way: it names no key among 100
    own = mint(keys.rsa, tokens.claims(), header={"alg": "RS256", "typ": "JWT"})
    assert await _refusal_reason(make_guard, guard, own) == "kid_required"
    # a token naming its key costs one check and is accepted
    named = mint(keys.rsa, tokens.claims(), header={"alg": "RS256", "typ": "JWT", "kid": "rsa-1-7"})
    assert (await guard.authenticate(bearer(named))).authenticated


async def test_kidless_tokens_are_tried_against_up_to_max_keys_per_token_keys(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """Up to the cap (default 4: an issuer rotating keys publishes two or three per algorithm) a
    kid-less token is tried against each key bound to its alg; keys of other algorithms do not count."""
    jwks_server.jwks = {"keys": [keys.rsa2.public_jwk(), *_copies(keys.rsa, 3), *_copies(keys.ec, 5)]}
    guard = await make_guard()
    own = mint(keys.rsa, tokens.claims(), header={"alg": "RS256", "typ": "JWT"})
    assert (await guard.authenticate(bearer(own))).authenticated
    forged = mint(keys.attacker, tokens.claims(), header={"alg": "RS256", "typ": "JWT"})
    assert await _refusal_reason(make_guard, guard, forged) == "bad_signature"
    ec_token = mint(keys.ec, tokens.claims(), header={"alg": "ES256", "typ": "JWT"})
    assert await _refusal_reason(make_guard, guard, ec_token) == "kid_required"
    raised = await make_guard(extensions={"authorization": {"jwks": {"maxKeysPerToken": 5}}})
    assert (await raised.authenticate(bearer(ec_token))).authenticated


async def test_a_token_with_a_kid_matches_a_key_published_without_one_as_envoy_does(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """A JWKS written without kids (a static set copied by hand, an issuer that omits them) and tokens
    that carry one: Envoy's jwt_verify_lib skips a key only when both name a kid and they differ, so
    AWS's gateway accepts them; before session s40 every such token was refused (no_matching_key) and
    each cooldown window spent a JWKS refetch on it."""
    jwks_server.jwks = {"keys": [_without_kid(keys.rsa), _without_kid(keys.ec)]}
    guard = await make_guard()
    fetches = jwks_server.fetches
    for key in (keys.rsa, keys.ec):
        principal = await guard.authenticate(bearer(tokens.token(key)))
        assert principal.authenticated
    assert jwks_server.fetches == fetches, "a kid answered by keys without one is not a rotation"
    forged = mint(keys.attacker, tokens.claims(), alg="RS256")
    assert await _refusal_reason(make_guard, guard, forged) == "bad_signature"


async def test_an_unknown_kid_still_refetches_when_the_issuer_names_its_keys(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """A set mixing named keys and one without kid: a new kid is a rotation (one refetch within the
    cooldown, then the new key verifies), not a token for the key without kid."""
    jwks_server.jwks = {"keys": [_without_kid(keys.rsa), keys.ec.public_jwk()]}
    guard = await make_guard()
    jwks_server.set_keys(keys.ec, keys.rsa2, extra=[_without_kid(keys.rsa)])
    fetches = jwks_server.fetches
    assert (await guard.authenticate(bearer(tokens.token(keys.rsa2)))).authenticated
    assert jwks_server.fetches == fetches + 1
    # within the cooldown an unknown kid is tried against the key without kid, with no fetch
    assert (await guard.authenticate(bearer(tokens.token(keys.rsa, sub="other")))).authenticated
    assert jwks_server.fetches == fetches + 1


async def test_a_kid_naming_a_key_uses_that_key_alone(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """One check per token that names its key: a key published without kid is not tried after it
    (Envoy would try it; a token naming a key is that key's or nobody's)."""
    jwks_server.jwks = {"keys": [keys.rsa2.public_jwk(), _without_kid(keys.rsa)]}
    guard = await make_guard()
    claims = tokens.claims()
    header = {"alg": "RS256", "typ": "JWT", "kid": keys.rsa2.kid}
    signed_by_other = mint(keys.rsa, claims, header=header)
    assert await _refusal_reason(make_guard, guard, signed_by_other) == "bad_signature"


async def test_a_jwks_with_more_keys_per_algorithm_than_the_cap_is_logged_once_without_key_material(
    make_guard: GuardMaker,
    jwks_server: JwksServer,
    tokens: TokenFactory,
    keys: Keys,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An issuer that stamps no kid and publishes 6 RS256 keys without one: every token it signs is
    refused ``kid_required``. Before session s41 nothing in the log said so (only the denial metric's
    reason); now each load of such a set warns, naming the algorithm, the counts and the setting, once
    per shape of set (a refresh of the same set does not repeat it), and no key material."""
    published = [
        _without_kid(keys.rsa),
        *[{k: v for k, v in jwk.items() if k != "kid"} for jwk in _copies(keys.rsa2, 5)],
        keys.ec.public_jwk(),
    ]
    jwks_server.jwks = {"keys": published}
    with caplog.at_level("WARNING", logger="igw.security.jwks"):
        guard = await make_guard()
        own = mint(keys.rsa, tokens.claims(), header={"alg": "RS256", "typ": "JWT"})
        assert await _refusal_reason(make_guard, guard, own) == "kid_required"
        assert guard.jwks is not None
        await guard.jwks.refresh()  # the same set again: not logged again
    lines = [r.getMessage() for r in caplog.records if "maxKeysPerToken" in r.getMessage()]
    assert len(lines) == 1, lines
    (line,) = lines
    for part in ("RS256: 6 keys", "6 keys have no kid", "(4)", "kid_required", "jwks.maxKeysPerToken"):
        assert part in line
    assert "ES256" not in line  # one EC key: under the cap
    for jwk in published:
        for member in ("n", "x", "y"):
            if member in jwk:
                assert jwk[member] not in line
    # a set under the cap logs nothing; one over it again logs again
    caplog.clear()
    jwks_server.jwks = {"keys": [keys.rsa.public_jwk()]}
    with caplog.at_level("WARNING", logger="igw.security.jwks"):
        await guard.jwks.refresh()
        jwks_server.jwks = {"keys": published}
        await guard.jwks.refresh()
    assert len([r for r in caplog.records if "maxKeysPerToken" in r.getMessage()]) == 1


async def test_a_key_published_without_alg_verifies_one_algorithm_only(
    make_guard: GuardMaker, jwks_server: JwksServer, tokens: TokenFactory, keys: Keys
) -> None:
    """RFC 8725 section 3.1: one algorithm per key. An RSA key published without ``alg`` (as Entra ID
    publishes its keys) is bound to the first RSA algorithm of ``authorization.algorithms`` (RS256 by
    default); a PS256 token signed by the same key is refused ``no_matching_key``. Before s48 it
    verified with any of RS256/384/512 and PS256/384/512. Listing PS256 first binds it to PS256."""
    jwks_server.jwks = {"keys": [keys.rsa.public_jwk(with_alg=False)]}
    guard = await make_guard()
    rs256 = bearer(mint(keys.rsa, tokens.claims(), alg="RS256"))
    ps256 = bearer(mint(keys.rsa, tokens.claims(), alg="PS256"))
    assert (await guard.authenticate(rs256)).authenticated
    with pytest.raises(GuardDenied):
        await guard.authenticate(ps256)
    assert make_guard.metric("igw_auth_denied_total", {"reason": "no_matching_key"}) == 1
    ps_first = await make_guard(extensions={"authorization": {"algorithms": ["PS256", "RS256"]}})
    assert (await ps_first.authenticate(ps256)).authenticated
    with pytest.raises(GuardDenied):
        await ps_first.authenticate(rs256)
