"""A9 clock-skew edges (injected clock) and requiredClaims String / StringArray semantics."""

from __future__ import annotations

from typing import Any

import pytest

from igw.config.model import RequiredClaim
from igw.security.claims import ClaimRules, validate_claims
from igw.security.token import TokenRejected
from tests.security.helpers import GuardMaker, TokenFactory, bearer

NOW = 1_900_000_000.0
ISSUER = "https://idp.example"


def rules(*, skew: float = 60, required: tuple[RequiredClaim, ...] = ()) -> ClaimRules:
    return ClaimRules(
        issuer=ISSUER,
        audiences=frozenset({"api"}),
        required_claims=required,
        clock_skew_s=skew,
        max_lifetime_s=None,
    )


def claims(**extra: Any) -> dict[str, Any]:
    return {"iss": ISSUER, "aud": "api", "exp": NOW + 600, **extra}


def verdict(payload: dict[str, Any], **kw: Any) -> str:
    try:
        validate_claims(payload, rules=rules(**kw), now=NOW)
    except TokenRejected as exc:
        return exc.reason
    return "ok"


@pytest.mark.parametrize("skew", [60, 10, 0])
@pytest.mark.parametrize(
    ("claim", "offset_sign", "reason"),
    [("exp", -1, "expired"), ("nbf", +1, "not_yet_valid"), ("iat", +1, "issued_in_future")],
)
def test_a9_skew_edges(skew: int, claim: str, offset_sign: int, reason: str) -> None:
    """Accept at ±(skew-1 s); refuse at ±(skew+1 s)."""
    inside = NOW + offset_sign * (skew - 1) if skew else NOW + offset_sign * -1
    outside = NOW + offset_sign * (skew + 1)
    assert verdict(claims(**{claim: inside}), skew=skew) == "ok"
    assert verdict(claims(**{claim: outside}), skew=skew) == reason


def test_exp_exactly_at_skew_boundary_is_refused() -> None:
    """``now >= exp + skew`` refuses (RFC 7519: the current time must be *before* exp)."""
    assert verdict(claims(exp=NOW - 60)) == "expired"
    assert verdict(claims(exp=NOW - 59.999)) == "ok"


def test_nbf_exactly_at_skew_boundary_is_accepted() -> None:
    assert verdict(claims(nbf=NOW + 60)) == "ok"
    assert verdict(claims(nbf=NOW + 60.001)) == "not_yet_valid"


async def test_a9_skew_through_the_guard_with_configured_skew(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard(extensions={"authorization": {"clockSkew": "10s"}})
    now = int(tokens.clock())
    assert (await guard.authenticate(bearer(tokens.token(exp=now - 9)))).authenticated
    assert (await guard.authenticate(bearer(tokens.token(nbf=now + 9)))).authenticated
    for token in (tokens.token(exp=now - 11), tokens.token(nbf=now + 11), tokens.token(iat=now + 11)):
        with pytest.raises(Exception, match="missing or invalid bearer token"):
            await guard.authenticate(bearer(token))


STRING = RequiredClaim(name="tier", value_type="String", values=("gold", "silver"))
ARRAY = RequiredClaim(name="groups", value_type="StringArray", values=("ml", "admins"))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"tier": "gold", "groups": ["ml"]}, "ok"),
        ({"tier": "silver", "groups": ["x", "admins"]}, "ok"),
        ({"tier": "bronze", "groups": ["ml"]}, "required_claim_mismatch"),
        ({"tier": "GOLD", "groups": ["ml"]}, "required_claim_mismatch"),
        ({"tier": ["gold"], "groups": ["ml"]}, "required_claim_mismatch"),
        ({"groups": ["ml"]}, "required_claim_mismatch"),
        ({"tier": "gold", "groups": "ml"}, "required_claim_mismatch"),
        ({"tier": "gold", "groups": []}, "required_claim_mismatch"),
        ({"tier": "gold", "groups": ["x", "y"]}, "required_claim_mismatch"),
        ({"tier": "gold", "groups": ["ml", 1]}, "required_claim_mismatch"),
        ({"tier": "gold"}, "required_claim_mismatch"),
    ],
    ids=[
        "both-match",
        "array-any-of",
        "string-not-listed",
        "string-case-differs",
        "string-rule-given-array",
        "string-claim-missing",
        "array-rule-given-string",
        "array-empty",
        "array-no-element-listed",
        "array-non-string-element",
        "array-claim-missing",
    ],
)
def test_required_claims_default_deny(extra: dict[str, Any], expected: str) -> None:
    assert verdict(claims(**extra), required=(STRING, ARRAY)) == expected


async def test_required_claims_through_the_guard(make_guard: GuardMaker, tokens: TokenFactory) -> None:
    guard = await make_guard(required_claims=(ARRAY,), audiences=())
    assert (await guard.authenticate(bearer(tokens.token(groups=["ml"], aud="anything")))).authenticated
    with pytest.raises(Exception, match="missing or invalid bearer token"):
        await guard.authenticate(bearer(tokens.token(groups=["other"])))
    assert make_guard.metric("igw_auth_denied_total", {"reason": "required_claim_mismatch"}) == 1


NESTED = RequiredClaim(name="realm_access.roles", value_type="StringArray", values=("inference",))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"realm_access": {"roles": ["offline", "inference"]}}, "ok"),
        ({"realm_access.roles": ["inference"]}, "ok"),
        ({"realm_access": {"roles": ["offline"]}}, "required_claim_mismatch"),
        ({"realm_access": ["inference"]}, "required_claim_mismatch"),
        ({"realm_access": {}}, "required_claim_mismatch"),
        ({}, "required_claim_mismatch"),
    ],
    ids=["nested-match", "top-level-dotted-name", "nested-no-match", "parent-not-object", "absent", "none"],
)
def test_a_dotted_required_claim_name_reaches_into_nested_objects(
    extra: dict[str, Any], expected: str
) -> None:
    """Envoy Gateway's JWT claim rules (what AWS's gateway configures) name a nested claim with dots,
    as Keycloak's ``realm_access.roles``; before session s39 only a top-level claim of that literal
    name was read, so such a rule refused every token."""
    assert verdict(claims(**extra), required=(NESTED,)) == expected


async def test_a_nested_required_claim_through_the_guard(
    make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    guard = await make_guard(required_claims=(NESTED,))
    allowed = tokens.token(realm_access={"roles": ["inference"]})
    assert (await guard.authenticate(bearer(allowed))).authenticated
    with pytest.raises(Exception, match="missing or invalid bearer token"):
        await guard.authenticate(bearer(tokens.token(realm_access={"roles": ["other"]})))


def test_sub_must_be_a_string() -> None:
    assert verdict(claims(sub=5)) == "sub_not_string"
    assert verdict(claims(sub=None)) == "sub_not_string"
    assert verdict(claims(jti=7)) == "jti_not_string"
