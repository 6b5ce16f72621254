"""A11 claim -> header forwarding, tenant identity, per-model authorization (403), header stripping,
and the open mode (``spec.auth`` absent) being loud about it."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from igw.gateway.guards import ANONYMOUS, GuardDenied
from tests.security.helpers import GuardMaker, TokenFactory, bearer

FORWARD = {
    "authorization": {
        "forwardClaims": [
            {"claim": "sub", "header": "X-Igw-Subject"},
            {"claim": "groups", "header": "x-igw-groups"},
            {"claim": "org.id", "header": "x-igw-org"},
            {"claim": "level", "header": "x-igw-level"},
        ]
    }
}


async def test_a11_claims_are_forwarded_as_headers(make_guard: GuardMaker, tokens: TokenFactory) -> None:
    guard = await make_guard(extensions=FORWARD)
    principal = await guard.authenticate(
        bearer(tokens.token(groups=["ml", "admins"], org={"id": "o-1"}, level=3))
    )
    groups = base64.b64decode(principal.forward_headers["x-igw-groups"])
    assert json.loads(groups) == ["ml", "admins"]
    assert principal.forward_headers == {
        "x-igw-tenant": "team-a",
        "x-igw-subject": "user-1",
        "x-igw-groups": principal.forward_headers["x-igw-groups"],
        "x-igw-org": "o-1",
        "x-igw-level": "3",
    }
    assert guard.stripped_request_headers == {
        "authorization",
        "x-api-key",
        "x-igw-tenant",
        "x-igw-subject",
        "x-igw-groups",
        "x-igw-org",
        "x-igw-level",
    }


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("sub", "user\r\nX-Injected: 1"),
        ("sub", "user\nx"),
        ("sub", "nul\x00byte"),
        ("sub", "tab\tchar"),
        ("sub", "é-non-ascii"),
        ("sub", "x" * 1025),
        ("tenant", "team\r\nX-Evil: 1"),
        ("tenant", "t" * 257),
        ("tenant", ""),
        ("tenant", 42),
        ("groups", ["a" * 2000]),
    ],
    ids=[
        "A11-crlf",
        "A11-lf",
        "A11-nul",
        "A11-tab",
        "A11-non-ascii",
        "A11-oversized",
        "A11-tenant-crlf",
        "A11-tenant-oversized",
        "A11-tenant-empty",
        "A11-tenant-not-string",
        "A11-array-oversized",
    ],
)
async def test_a11_unsafe_forwarded_values_are_refused(
    claim: str, value: object, make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard(extensions=FORWARD)
    with pytest.raises(GuardDenied) as info:
        await guard.authenticate(bearer(tokens.token(**{claim: value})))
    assert info.value.status == 401


async def test_forward_authorization_opt_in(make_guard: GuardMaker) -> None:
    guard = await make_guard(extensions={"authorization": {"forwardAuthorization": True, "tenantHeader": ""}})
    assert guard.stripped_request_headers == frozenset()


async def test_require_tenant(make_guard: GuardMaker, tokens: TokenFactory) -> None:
    guard = await make_guard(extensions={"authorization": {"requireTenant": True, "tenantClaim": "org.id"}})
    principal = await guard.authenticate(bearer(tokens.token(org={"id": "acme"})))
    assert principal.tenant == "acme"
    with pytest.raises(GuardDenied):
        await guard.authenticate(bearer(tokens.token()))
    assert make_guard.metric("igw_auth_denied_total", {"reason": "tenant_missing"}) == 1


async def test_a_verified_tenant_named_like_the_anonymous_tenant_is_refused(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    """Before session s39 such a token shared the anonymous callers' bucket and series: with
    ``burst: 1`` its one request left a caller without a tenant claim a 429."""
    guard = await make_guard(
        extensions={
            "authorization": {"tenantClaim": "org"},
            "rateLimits": {"anonymousTenant": "nobody", "default": {"requestsPerSecond": 0.001, "burst": 1}},
        }
    )
    with pytest.raises(GuardDenied) as info:
        await guard.authenticate(bearer(tokens.token(org="nobody")))
    assert info.value.status == 401
    assert make_guard.metric("igw_auth_denied_total", {"reason": "tenant_reserved"}) == 1
    tenantless = await guard.authenticate(bearer(tokens.token()))
    await guard.admit(tenantless, model="m", est_tokens=1)  # its bucket is still full
    # the default anonymousTenant is an ordinary tenant name once another is configured
    assert (await guard.authenticate(bearer(tokens.token(org="anonymous")))).tenant == "anonymous"


ACCESS = {
    "authorization": {
        "modelAccess": [
            {"claim": "tenant", "values": ["team-a"], "models": ["llama-3-8b", "mistral-*"]},
            {"claim": "groups", "values": ["admins"], "models": ["*"]},
        ]
    }
}


@pytest.mark.parametrize(
    ("claims", "model", "allowed"),
    [
        ({}, "llama-3-8b", True),
        ({}, "mistral-7b-lora-sql", True),
        ({}, "llama-3-70b", False),
        ({"tenant": "team-b"}, "llama-3-8b", False),
        ({"tenant": "team-b", "groups": ["admins"]}, "llama-3-70b", True),
        ({"tenant": "team-b", "groups": "admins"}, "anything", True),
        ({"tenant": "team-b", "groups": ["ADMINS"]}, "anything", False),
    ],
    ids=["exact", "glob", "other-model", "other-tenant", "group-array", "group-string", "case-sensitive"],
)
async def test_per_model_authorization(
    claims: dict[str, object], model: str, allowed: bool, make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard(extensions=ACCESS)
    principal = await guard.authenticate(bearer(tokens.token(**claims)))
    if allowed:
        guard.authorize(principal, model=model)
        return
    with pytest.raises(GuardDenied) as info:
        guard.authorize(principal, model=model)
    denied = info.value
    assert denied.status == 403
    assert denied.code == "model_not_allowed"
    assert model in denied.message
    assert principal.tenant is not None
    assert principal.tenant in denied.message
    assert (
        make_guard.metric("igw_tenant_requests_total", {"tenant": principal.tenant, "outcome": "forbidden"})
        == 1
    )


async def test_without_rules_every_model_is_allowed(make_guard: GuardMaker, tokens: TokenFactory) -> None:
    guard = await make_guard()
    principal = await guard.authenticate(bearer(tokens.token()))
    guard.authorize(principal, model="any-model")


async def test_open_mode_is_loud_and_still_strips_identity_headers(
    make_guard: GuardMaker, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="igw.security"):
        guard = await make_guard(auth=False, extensions=FORWARD)
    assert "authentication DISABLED" in caplog.text
    assert make_guard.metric("igw_auth_enabled") == 0
    readiness = guard.readiness()
    assert readiness.ready
    assert "spec.auth is not set" in readiness.detail
    assert await guard.authenticate({"X-Igw-Tenant": "spoofed"}) is ANONYMOUS
    assert "x-igw-tenant" in guard.stripped_request_headers
    assert "x-igw-subject" in guard.stripped_request_headers
    assert "authorization" not in guard.stripped_request_headers  # passed through when we do not check it


async def test_per_tenant_prefix_caches_are_said_to_need_authentication(
    make_guard: GuardMaker, caplog: pytest.LogCaptureFixture, tokens: TokenFactory
) -> None:
    isolation = {"authorization": {"prefixCacheIsolation": "tenant"}}
    with caplog.at_level(logging.WARNING, logger="igw.security"):
        guard = await make_guard(auth=False, extensions=isolation)
    assert "prefixCacheIsolation: tenant has no effect while spec.auth is not set" in caplog.text
    assert (await guard.authenticate({})).cache_salt is None
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="igw.security"):
        guard = await make_guard(extensions=isolation)
    assert "prefixCacheIsolation" not in caplog.text
    one = await guard.authenticate(bearer(tokens.token(tenant="t1")))
    two = await guard.authenticate(bearer(tokens.token(tenant="t2", sub="other")))
    assert one.cache_salt is not None
    assert two.cache_salt not in {None, one.cache_salt}


async def test_auth_mode_gauge(make_guard: GuardMaker) -> None:
    await make_guard()
    assert make_guard.metric("igw_auth_enabled") == 1
