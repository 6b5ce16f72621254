"""Validation of a token's claims against ``spec.auth.jwt.provider`` (RFC 7519 §4.1, RFC 8725 §3.8-3.9).

Runs on the *unverified* payload before any key lookup (cheap checks first, like Envoy, so a wrong
issuer or an expired token never causes a JWKS fetch), and its verdict only counts once the
signature verified. Times use the injected clock; skew applies symmetrically:

- ``exp`` required, numeric (not bool), finite; refused when ``now >= exp + skew``;
- ``nbf`` / ``iat`` optional; refused when later than ``now + skew``;
- with ``maxTokenLifetime``: refused when ``exp - now > max_lifetime + skew``;
- ``iss`` must equal the configured issuer exactly (no prefix, case or trailing-slash games);
- ``aud`` (string or array of strings): any configured audience matches; checked only when
  audiences are configured, as Envoy does;
- ``sub`` and ``jti``, when present (even ``null``), must be strings;
- ``requiredClaims``: every rule must hold (default deny). ``String``: the claim is a string equal
  to one of the values. ``StringArray``: the claim is an array of strings with at least one
  element among the values. A missing or differently typed claim fails the rule. A dotted name
  (``realm_access.roles``) reaches into nested objects when no top-level claim has that name, as
  Envoy Gateway's JWT claim rules do (before session s39 only top-level names were read, so such
  a rule refused every token).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from igw.config.model import JwtProvider, RequiredClaim
from igw.security.token import reject


@dataclass(frozen=True, slots=True)
class ClaimRules:
    issuer: str
    audiences: frozenset[str]
    required_claims: tuple[RequiredClaim, ...]
    clock_skew_s: float
    max_lifetime_s: float | None

    @staticmethod
    def for_provider(
        provider: JwtProvider, *, clock_skew_s: float, max_lifetime_s: float | None
    ) -> ClaimRules:
        return ClaimRules(
            issuer=provider.issuer,
            audiences=frozenset(provider.audiences),
            required_claims=provider.required_claims,
            clock_skew_s=clock_skew_s,
            max_lifetime_s=max_lifetime_s,
        )


def validate_claims(claims: Mapping[str, Any], *, rules: ClaimRules, now: float) -> float:
    """Raise :class:`~igw.security.token.TokenRejected` unless the claims are acceptable; returns ``exp``."""
    if claims.get("iss") != rules.issuer:
        reject("issuer_mismatch")
    skew = rules.clock_skew_s
    exp = _numeric_date(claims, "exp")
    if exp is None:
        reject("exp_missing")
    if now >= exp + skew:
        reject("expired")
    nbf = _numeric_date(claims, "nbf")
    if nbf is not None and nbf > now + skew:
        reject("not_yet_valid")
    iat = _numeric_date(claims, "iat")
    if iat is not None and iat > now + skew:
        reject("issued_in_future")
    if rules.max_lifetime_s is not None and exp - now > rules.max_lifetime_s + skew:
        reject("lifetime_too_long")
    if rules.audiences and not _audience_matches(claims.get("aud"), rules.audiences):
        reject("audience_mismatch")
    for name in ("sub", "jti"):
        if name in claims and not isinstance(claims[name], str):
            reject(f"{name}_not_string")
    for rule in rules.required_claims:
        if not _required_claim_holds(claim_at(claims, rule.name), rule):
            reject("required_claim_mismatch")
    return exp


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The claim named ``path``: a top-level name first, then ``a.b.c`` as nested objects (Envoy
    Gateway's convention for claim names; ``requiredClaims``, ``tenantClaim``, ``forwardClaims``
    and ``modelAccess`` all read claims through it)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    if name not in claims:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        reject(f"{name}_not_numeric")
    as_float = float(value) if isinstance(value, float) or abs(value) < 2**53 else math.inf
    if not math.isfinite(as_float) or as_float < 0:
        reject(f"{name}_out_of_range")
    return as_float


def _audience_matches(aud: Any, audiences: frozenset[str]) -> bool:
    if isinstance(aud, str):
        return aud in audiences
    if isinstance(aud, list) and aud and all(isinstance(a, str) for a in aud):
        return any(a in audiences for a in aud)
    return False


def _required_claim_holds(value: Any, rule: RequiredClaim) -> bool:
    if rule.value_type == "String":
        return isinstance(value, str) and value in rule.values
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return any(v in rule.values for v in value)
    return False
