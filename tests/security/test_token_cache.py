"""The verified-token cache: bounded by exp, max age, JWKS generation and size; counted in metrics."""

from __future__ import annotations

import pytest

from igw.gateway.guards import GuardDenied, Principal
from igw.security.token_cache import VerifiedTokenCache
from tests.security.helpers import GuardMaker, JwksServer, TokenFactory, bearer

P = Principal(subject="s", tenant="t", authenticated=True)


def test_entry_never_outlives_expiry_or_max_age() -> None:
    cache = VerifiedTokenCache(max_entries=10, max_age_s=60)
    cache.put("tok", P, now=100, expires_at=130, generation=1)
    assert cache.get("tok", now=129.9, generation=1) is P
    assert cache.get("tok", now=130, generation=1) is None
    cache.put("tok", P, now=100, expires_at=1000, generation=1)
    assert cache.get("tok", now=159.9, generation=1) is P
    assert cache.get("tok", now=160, generation=1) is None


def test_entry_is_dropped_when_the_key_set_changes() -> None:
    cache = VerifiedTokenCache(max_entries=10, max_age_s=60)
    cache.put("tok", P, now=0, expires_at=100, generation=1)
    assert cache.get("tok", now=1, generation=2) is None
    assert len(cache) == 0


def test_lru_bound_and_disabled_cache() -> None:
    cache = VerifiedTokenCache(max_entries=2, max_age_s=60)
    for token in ("a", "b"):
        cache.put(token, P, now=0, expires_at=100, generation=1)
    assert cache.get("a", now=1, generation=1) is P  # a is now most recent
    cache.put("c", P, now=0, expires_at=100, generation=1)
    assert cache.get("b", now=1, generation=1) is None
    assert cache.get("a", now=1, generation=1) is P
    off = VerifiedTokenCache(max_entries=0, max_age_s=60)
    off.put("a", P, now=0, expires_at=100, generation=1)
    assert off.get("a", now=1, generation=1) is None
    assert not off.enabled


async def test_cached_token_is_refused_once_expired(make_guard: GuardMaker, tokens: TokenFactory) -> None:
    guard = await make_guard()
    now = int(tokens.clock())
    token = bearer(tokens.token(exp=now + 30))
    for _ in range(3):
        await guard.authenticate(token)
    assert make_guard.metric("igw_auth_token_cache_total", {"result": "hit"}) == 2
    assert make_guard.metric("igw_auth_token_cache_total", {"result": "miss"}) == 1
    tokens.clock.advance(30 + 60)  # exp + default skew
    with pytest.raises(GuardDenied):
        await guard.authenticate(token)


async def test_cached_token_is_refused_when_keys_are_too_stale(
    make_guard: GuardMaker, tokens: TokenFactory, jwks_server: JwksServer
) -> None:
    guard = await make_guard(
        extensions={"authorization": {"jwks": {"maxStale": "1h"}, "verifiedTokenCache": {"maxAge": "2h"}}}
    )
    token = bearer(tokens.token(exp=int(tokens.clock()) + 86_400))
    await guard.authenticate(token)
    jwks_server.mode, jwks_server.status = "status", 500
    tokens.clock.advance(3601)
    with pytest.raises(GuardDenied):
        await guard.authenticate(token)
