"""Work the guard's per-request path no longer does (issue 16, round 28 in docs/gateway.md):
counted with ``sys.setprofile`` (each Python call, coroutines included, and each call of a C
function), so each test fails when the cut work comes back; each answer is compared with what the
longer way gives (the arithmetic with ``min``/``max``, the header read through ``getattr``)."""

from __future__ import annotations

import itertools
import math

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from igw.gateway.guards import GuardDenied
from igw.security.guard import SecurityGuard, header_values
from igw.security.ratelimit.buckets import Bucket, tokens_needed
from igw.security.ratelimit.limiter import MAX_CHARGE_TOKENS, _charged
from igw.security.ratelimit.local import LocalBuckets
from igw.security.settings import TenantLimits
from tests.call_counts import counted
from tests.security.helpers import GuardMaker, TokenFactory


def proxy(*items: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(items))


def tokens_counted(make_guard: GuardMaker, kind: str) -> float:
    """``igw_tenant_tokens_total{kind}`` summed over tenants (the last guard's registry)."""
    total = 0.0
    for family in make_guard.registries[-1].collect():
        for sample in family.samples:
            if sample.name == "igw_tenant_tokens_total" and sample.labels.get("kind") == kind:
                total += sample.value
    return total


def test_a_requests_multidict_is_asked_directly_with_the_same_values() -> None:
    cases = [
        (),
        (("Authorization", "Bearer a"),),
        (("authorization", "Bearer a"), ("AUTHORIZATION", "Bearer b"), ("Host", "gw")),
        (("Host", "gw"),),
    ]
    for items in cases:
        headers = proxy(*items)
        with counted() as calls:
            values = header_values(headers, "authorization")
        assert calls["c:getattr"] == 0  # getattr, then a list copy of getall's list, before
        assert calls["c:getall"] == 1
        assert list(values) == [v for k, v in items if k.lower() == "authorization"]
        assert list(values) == list(header_values(dict(items), "authorization"))
        assert list(values) == list(headers.getall("authorization", ()))


async def test_authenticate_reads_the_multidict_as_it_did(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard()
    token = tokens.token()
    from_proxy = await guard.authenticate(proxy(("Authorization", f"Bearer {token}")))
    from_dict = await guard.authenticate({"Authorization": f"Bearer {token}"})
    assert from_proxy == from_dict
    assert from_proxy.authenticated
    twice = proxy(("Authorization", f"Bearer {token}"), ("authorization", f"Bearer {token}"))
    with pytest.raises(GuardDenied) as refused:
        await guard.authenticate(twice)
    assert refused.value.status == 401
    assert make_guard.metric("igw_auth_denied_total", {"reason": "multiple_authorization_headers"}) == 1
    api_key = await guard.authenticate(proxy(("x-api-key", token)))
    assert api_key == from_dict


async def test_no_limit_admits_and_accounts_without_a_coroutine_or_min_max(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard()
    assert isinstance(guard, SecurityGuard)
    assert guard.limiter is not None
    principal = await guard.authenticate({"Authorization": f"Bearer {tokens.token()}"})
    with counted() as calls:
        await guard.admit(principal, model="m", est_tokens=100)
        await guard.account(principal, model="m", prompt_tokens=20, completion_tokens=16)
        await guard.account(principal, model="m", prompt_tokens=-5, completion_tokens=MAX_CHARGE_TOKENS + 9)
    assert calls["admit"] == 1  # the guard's: the limiter's admit, a coroutine, ran too before
    assert calls["account"] == 2  # the guard's: the limiter's account and account_with ran too
    assert calls["account_with"] == calls["debit"] == calls["admit_limited"] == 0
    assert calls["c:min"] == calls["c:max"] == 0  # nine min/max calls a request before
    assert tokens_counted(make_guard, "prompt") == 20
    assert tokens_counted(make_guard, "completion") == 16 + MAX_CHARGE_TOKENS


async def test_a_token_limit_is_debited_once_per_request_as_before(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    limits = {"backend": "local", "default": {"tokensPerMinute": 600, "requestsPerSecond": 1, "burst": 5}}
    guard = await make_guard(extensions={"rateLimits": limits})
    limiter = guard.limiter
    assert limiter is not None
    buckets = limiter._backend
    assert isinstance(buckets, LocalBuckets)
    principal = await guard.authenticate({"Authorization": f"Bearer {tokens.token()}"})
    await guard.admit(principal, model="m", est_tokens=100)  # the tables' first sweep (a max) is past
    with counted() as calls:
        await guard.admit(principal, model="m", est_tokens=100)
        await guard.account(principal, model="m", prompt_tokens=300, completion_tokens=250)
    assert calls["debit"] == 1
    assert calls["account_all"] == 1
    assert calls["account"] == 1  # the guard's: LocalBuckets.account was a coroutine per debit before
    assert calls["c:min"] == calls["c:max"] == 0
    (level,) = [b.level for b in buckets._tokens.buckets.values()]
    assert level == 600 - 550
    # the debt is what it was: 100 tokens needed, 50 held, refilled at 10/s
    with pytest.raises(GuardDenied) as refused:
        await guard.admit(principal, model="m", est_tokens=100)
    assert refused.value.status == 429
    retry_after = int(refused.value.headers["Retry-After"])
    assert 5 <= retry_after <= 6 + 1  # (100 - 50) / 10 s, spread as before (retry_spread)
    (requests,) = [b.level for b in buckets._requests.buckets.values()]
    assert requests == 3.0  # two admitted, the refused request took none


def _old_refill(bucket: Bucket, *, now: float, rate: float, capacity: float) -> None:
    elapsed = max(0.0, now - bucket.updated_at)
    bucket.level = min(capacity, bucket.level + elapsed * rate)
    bucket.updated_at = max(bucket.updated_at, now)


def test_the_arithmetic_equals_the_min_max_forms() -> None:
    for count in (-(2**70), -5, -1, 0, 1, 2, 36, MAX_CHARGE_TOKENS - 1, MAX_CHARGE_TOKENS, 2**31, 2**70):
        assert _charged(count) == min(max(0, count), MAX_CHARGE_TOKENS)
        assert type(_charged(count)) is int
    levels = (-1e9, -3.5, 0.0, 0.5, 1.0, 5.0, 600.0, 1e12)
    times = (0.0, 99.5, 100.0, 100.25, 1e9)
    rates = (0.0, 0.001, 1.0, 10.0, 1e9)
    capacities = (0.0, 1.0, 5.0, 600.0, math.inf)
    for level, updated, now, rate, capacity in itertools.product(levels, times, times, rates, capacities):
        new, old = Bucket(level=level, updated_at=updated), Bucket(level=level, updated_at=updated)
        new.refill(now=now, rate=rate, capacity=capacity)
        _old_refill(old, now=now, rate=rate, capacity=capacity)
        assert (new.level, new.updated_at) == (old.level, old.updated_at)
    for tpm, burst in ((600.0, None), (600.0, 1), (60.0, 100), (1e9, None), (0.5, None)):
        limits = TenantLimits(tokens_per_minute=tpm, token_burst=burst)
        for est in (-(2**40), -1, 0, 1, 2, 99, 100, 101, 600, 10**12):
            need = tokens_needed(limits, est)
            assert need == float(max(1, min(max(0, est), int(limits.token_capacity))))
            assert type(need) is float
