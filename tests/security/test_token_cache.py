"""The verified-token cache: bounded by exp, max age, JWKS generation and size; counted in metrics."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from igw.gateway.guards import GuardDenied, Principal
from igw.security.guard import SecurityGuard
from igw.security.token_cache import HOT_TOKENS, VerifiedTokenCache
from tests.compiled.tree import skip_compiled
from tests.security.helpers import GuardMaker, JwksServer, Keys, TokenFactory, bearer, mint, sign

P = Principal(subject="s", tenant="t", authenticated=True)


# ``hot``: the token was hit once before the checks, so they are answered by its exact string
# (the hot tokens, module docstring) rather than by its digest.
HOT = pytest.mark.parametrize("hot", [False, True], ids=["digest", "hot"])


@HOT
def test_entry_never_outlives_expiry_or_max_age(hot: bool) -> None:
    cache = VerifiedTokenCache(max_entries=10, max_age_s=60)
    cache.put("tok", P, now=100, expires_at=130, generation=1)
    assert not hot or cache.get("tok", now=100, generation=1) is P
    assert cache.get("tok", now=129.9, generation=1) is P
    assert cache.get("tok", now=130, generation=1) is None
    cache.put("tok", P, now=100, expires_at=1000, generation=1)
    assert not hot or cache.get("tok", now=100, generation=1) is P
    assert cache.get("tok", now=159.9, generation=1) is P
    assert cache.get("tok", now=160, generation=1) is None
    assert len(cache) == 0


@HOT
def test_entry_is_dropped_when_the_key_set_changes(hot: bool) -> None:
    cache = VerifiedTokenCache(max_entries=10, max_age_s=60)
    cache.put("tok", P, now=0, expires_at=100, generation=1)
    assert not hot or cache.get("tok", now=0, generation=1) is P
    assert cache.get("tok", now=1, generation=2) is None
    assert len(cache) == 0
    assert cache.get("tok", now=2, generation=1) is None  # dropped, not revived by the old generation


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


async def _stale_keys_setup(
    make_guard: GuardMaker, tokens: TokenFactory, jwks_server: JwksServer, *, uses: int
) -> tuple[SecurityGuard, Mapping[str, str]]:
    """A guard whose keys go stale after 1 h (maxStale) while its cache would keep a verdict 2 h,
    a day-long token used ``uses`` times, then the issuer failing every fetch."""
    guard = await make_guard(
        extensions={"authorization": {"jwks": {"maxStale": "1h"}, "verifiedTokenCache": {"maxAge": "2h"}}}
    )
    token = bearer(tokens.token(exp=int(tokens.clock()) + 86_400))
    for _ in range(uses):
        await guard.authenticate(token)
    jwks_server.mode, jwks_server.status = "status", 500
    return guard, token


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


# -- hot tokens (session s15): the same entries reached by the exact token string ---------------


_DIGEST_COUNTED = skip_compiled(
    "igw.security.token_cache",
    "VerifiedTokenCache._key is replaced by monkeypatch to count the digest path; compiled methods call "
    "it directly, so the count would stay empty (and an empty count is what one of these tests expects)",
)


def _digests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the digest path's uses (the hot path is the one that skips it)."""
    seen: list[str] = []
    digest = VerifiedTokenCache._key

    def counting(token: str) -> bytes:
        seen.append(token)
        return digest(token)

    monkeypatch.setattr(VerifiedTokenCache, "_key", staticmethod(counting))
    return seen


@_DIGEST_COUNTED
def test_a_repeated_token_is_found_without_digesting_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _digests(monkeypatch)
    cache = VerifiedTokenCache(max_entries=10, max_age_s=60)
    cache.put("tok", P, now=0, expires_at=100, generation=1)
    assert cache.get("tok", now=1, generation=1) is P  # digest path, then hot
    seen.clear()
    for t in range(2, 50):
        assert cache.get("tok", now=t, generation=1) is P
    assert seen == []


def test_an_evicted_or_replaced_entry_is_not_answered_from_the_hot_tokens() -> None:
    cache = VerifiedTokenCache(max_entries=1, max_age_s=60)
    cache.put("a", P, now=0, expires_at=100, generation=1)
    assert cache.get("a", now=1, generation=1) is P  # a is hot
    cache.put("c", P, now=2, expires_at=100, generation=1)  # evicts a (the only entry)
    assert cache.get("a", now=2, generation=1) is None
    assert cache.get("c", now=2, generation=1) is P
    other = Principal(subject="s2", tenant="t2", authenticated=True)
    cache.put("c", other, now=2, expires_at=100, generation=1)  # re-verified: a new entry
    assert cache.get("c", now=3, generation=1) is other
    assert cache.get("c", now=4, generation=1) is other
    cache.clear()
    assert cache.get("c", now=5, generation=1) is None


@_DIGEST_COUNTED
def test_hot_tokens_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = VerifiedTokenCache(max_entries=10_000, max_age_s=60)
    for i in range(3 * HOT_TOKENS):
        cache.put(f"t{i}", P, now=0, expires_at=100, generation=1)
        assert cache.get(f"t{i}", now=1, generation=1) is P
    assert len(cache._hot) <= HOT_TOKENS  # memory bound: HOT_TOKENS exact token strings
    seen = _digests(monkeypatch)
    assert cache.get("t0", now=2, generation=1) is P  # still cached, through the digest path
    assert seen == ["t0"]


async def test_cached_token_is_refused_when_keys_are_too_stale(
    make_guard: GuardMaker, tokens: TokenFactory, jwks_server: JwksServer
) -> None:
    guard, token = await _stale_keys_setup(make_guard, tokens, jwks_server, uses=1)
    tokens.clock.advance(3601)
    with pytest.raises(GuardDenied):
        await guard.authenticate(token)


async def test_hot_cached_token_holds_until_the_keys_are_too_stale(
    make_guard: GuardMaker, tokens: TokenFactory, jwks_server: JwksServer
) -> None:
    guard, token = await _stale_keys_setup(make_guard, tokens, jwks_server, uses=3)  # verified, 2 hits
    tokens.clock.advance(3599)
    assert (await guard.authenticate(token)).authenticated  # stale keys, still within maxStale
    tokens.clock.advance(2)
    with pytest.raises(GuardDenied):
        await guard.authenticate(token)


async def test_a_forged_signature_never_shares_a_cached_verdict_and_refusals_evict_nothing(
    make_guard: GuardMaker, tokens: TokenFactory, keys: Keys
) -> None:
    """Pinned (session s48 probe): the cache is keyed by the whole token, signature included, so the
    header and payload of a cached token under any other signature are verified afresh and refused;
    refusals are not cached, so a flood of distinct forged tokens (1,000,000 in the s48 probe: RSS
    73.1 to 73.2 MB, the good token hit 10,000 times out of 10,000) neither grows the cache nor
    evicts a good entry, even at ``maxEntries: 2``."""
    guard = await make_guard(extensions={"authorization": {"verifiedTokenCache": {"maxEntries": 2}}})
    good = tokens.token()
    await guard.authenticate(bearer(good))  # verified and cached
    signing_input, signature = good.rsplit(".", 1)
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]  # one bit pattern changed
    for forged in (f"{signing_input}.{sign(signing_input, keys.attacker)}", f"{signing_input}.{flipped}"):
        with pytest.raises(GuardDenied):
            await guard.authenticate(bearer(forged))
    claims = tokens.claims()
    for i in range(200):
        forged = mint(keys.attacker, {**claims, "jti": str(i)}, header={"alg": "RS256", "kid": keys.rsa.kid})
        with pytest.raises(GuardDenied):
            await guard.authenticate(bearer(forged))
    hits = make_guard.metric("igw_auth_token_cache_total", {"result": "hit"}) or 0.0
    assert (await guard.authenticate(bearer(good))).authenticated
    assert make_guard.metric("igw_auth_token_cache_total", {"result": "hit"}) == hits + 1
    assert make_guard.metric("igw_auth_denied_total", {"reason": "bad_signature"}) == 202


# -- eviction (session s49): sampled LRU, not pure LRU -------------------------------------------


def _cycle_hits(cache: VerifiedTokenCache, distinct: int, passes: int) -> int:
    """Look up ``distinct`` tokens in turn, ``passes`` times, verifying (putting) each miss."""
    hits, now = 0, 0.0
    for _ in range(passes):
        for i in range(distinct):
            now += 1
            if cache.get(f"tok-{i}", now=now, generation=1) is not None:
                hits += 1
            else:
                cache.put(f"tok-{i}", P, now=now, expires_at=1e9, generation=1)
    return hits


@pytest.mark.parametrize(
    ("distinct", "passes", "at_least"), [(101, 20, 1700), (200, 11, 200)], ids=["capacity+1", "2x"]
)
def test_tokens_cycled_beyond_capacity_still_hit(distinct: int, passes: int, at_least: int) -> None:
    """Pure LRU evicted each token just before its next use: 0 hits of 2,020 look-ups at capacity+1,
    0 of 2,200 at twice the capacity (before s49). Two entries drawn at random keep most of the first
    and some of the second (seed 49: 1,874 and 321 hits)."""
    cache = VerifiedTokenCache(max_entries=100, max_age_s=1e9, rng=random.Random(49))
    assert _cycle_hits(cache, distinct, passes) >= at_least
    assert len(cache) == len(cache._keys) == 100  # bounded memory


def test_a_token_in_use_survives_a_flood_of_new_tokens() -> None:
    """A token sent on every request (answered by the hot tokens) is never the entry evicted while
    others are older: before s49 a hot hit did not refresh its recency, so it was evicted after
    ``maxEntries`` other insertions and re-verified."""
    cache = VerifiedTokenCache(max_entries=10, max_age_s=1e9)
    cache.put("mine", P, now=0, expires_at=1e9, generation=1)
    for i in range(1, 500):
        assert cache.get("mine", now=i, generation=1) is P, i
        cache.put(f"other-{i}", P, now=i, expires_at=1e9, generation=1)


def test_an_unusable_entry_is_evicted_before_a_usable_one() -> None:
    """An expired entry (or one of an old key set) goes first, however recently it was used."""
    cache = VerifiedTokenCache(max_entries=2, max_age_s=1e9)
    cache.put("long", P, now=0, expires_at=100, generation=1)
    cache.put("short", P, now=1, expires_at=10, generation=1)
    assert cache.get("short", now=5, generation=1) is P  # used more recently than "long"
    cache.put("new", P, now=20, expires_at=100, generation=1)  # "short" has expired
    assert cache.get("long", now=21, generation=1) is P
    assert cache.get("new", now=21, generation=1) is P
