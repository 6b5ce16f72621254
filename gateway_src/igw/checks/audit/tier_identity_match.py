"""IGW-AU209: a router and a cluster's gateway verifying one forwarded token agree on it.

Behind a router with ``forwardAuthorization: true`` a gateway with ``spec.auth`` verifies the same
token again (the deployment docs/global-router.md "Caller identity at the clusters" describes for
``objectiveAccess``). It refuses a token whose ``iss`` is not its issuer exactly (every forwarded
token then gets a 401: HIGH), or whose ``aud`` names none of its audiences (a router audience it does
not accept lets some verified callers through the router only); a different ``tenantClaim`` gives
each caller another tenant at the cluster than at the router, so its rate limits and reserved
objectives are not the ones the router enforced. A ``requiredClaims`` rule of the gateway that the
router's rules do not imply refuses some callers the router verified (MEDIUM; HIGH when the two
rules admit no common value: another ``valueType``, or ``String`` values that do not meet). The
reverse, a gateway requiring less than the router, is no finding: every request through the router
meets the router's rules, and what the cluster accepts when reached directly is its own policy
(IGW-AU203); the passing result names those claims.
"""

from __future__ import annotations

from igw.checks.audit._tiers import (
    TierPair,
    audiences,
    issuers,
    required_claims,
    tenant_claim,
    tier_check,
)
from igw.checks.framework import Reporter
from igw.checks.model import Result, Severity


def _verdict(pair: TierPair, r: Reporter) -> Result:
    if not (pair.router_verifies and pair.router_forwards and pair.gateway_verifies):
        return r.passed(pair.resource, "no forwarded token is verified at both tiers (IGW-AU207, IGW-AU208)")
    problems: list[str] = []
    severity = Severity.MEDIUM
    router_issuers, gateway_issuers = issuers(pair.router), issuers(pair.gateway)
    if not router_issuers <= gateway_issuers:
        severity = Severity.HIGH
        problems.append(
            f"issuer {', '.join(sorted(router_issuers - gateway_issuers))} is not {pair.gateway_ref}'s "
            f"({', '.join(sorted(gateway_issuers)) or 'none'}): it refuses every forwarded token (401)"
        )
    router_audiences, gateway_audiences = audiences(pair.router), audiences(pair.gateway)
    if gateway_audiences is not None and (router_audiences is None or router_audiences - gateway_audiences):
        missing = (
            "any audience"
            if router_audiences is None
            else ", ".join(sorted(router_audiences - gateway_audiences))
        )
        problems.append(
            f"the router accepts {missing} but {pair.gateway_ref} only "
            f"{', '.join(sorted(gateway_audiences))}: callers verified by the router are refused there"
        )
    router_claim = tenant_claim(pair.router, "authorization")
    gateway_claim = tenant_claim(pair.gateway, "extensions", "authorization")
    if router_claim != gateway_claim:
        problems.append(
            f"tenantClaim {router_claim!r} at the router, {gateway_claim!r} at {pair.gateway_ref}: a "
            "caller is another tenant at the cluster (objectiveAccess, rate limits)"
        )
    claim_problems, refuses_every = _claim_problems(pair)
    problems += claim_problems
    if refuses_every:
        severity = Severity.HIGH
    if problems:
        return r.fail(pair.resource, "; ".join(problems), severity=severity)
    looser = _claims_not_required(pair)
    return r.passed(
        pair.resource,
        f"{pair.gateway_ref} verifies the forwarded token as the router does"
        + (
            f" (it does not require the router's claim {', '.join(looser)}: callers reaching the "
            "cluster directly are not held to it)"
            if looser
            else ""
        ),
    )


def _claim_problems(pair: TierPair) -> tuple[list[str], bool]:
    """Each of the gateway's ``requiredClaims`` rules that a token the router accepted may fail, and
    whether one of them fails every such token (HIGH, as for another issuer)."""
    router_rules = required_claims(pair.router)
    problems: list[str] = []
    refuses_every = False
    for name, rules in sorted(required_claims(pair.gateway).items()):
        held = router_rules.get(name, [])
        for rule in rules:
            if any(mine.implies(rule) for mine in held):
                continue
            at_router = ", ".join(str(mine) for mine in held)
            if any(mine.excludes(rule) for mine in held):
                refuses_every = True
                problems.append(
                    f"claim {name!r} must be {at_router} at the router, {rule} at {pair.gateway_ref}: "
                    "it refuses every forwarded token (401)"
                )
            elif held:
                problems.append(
                    f"claim {name!r}: the router accepts {at_router} but {pair.gateway_ref} only {rule}: "
                    "callers verified by the router are refused there (401)"
                )
            else:
                problems.append(
                    f"{pair.gateway_ref} requires claim {name!r} ({rule}) and the router does not: "
                    "callers verified by the router without it are refused there (401)"
                )
    return problems, refuses_every


def _claims_not_required(pair: TierPair) -> list[str]:
    """The router's required claims the gateway does not hold tokens to as strictly. Not a finding:
    every request through the router meets them; what the cluster accepts when reached directly is
    its own policy (IGW-AU203)."""
    gateway_rules = required_claims(pair.gateway)
    return [
        repr(name)
        for name, rules in sorted(required_claims(pair.router).items())
        if not all(any(theirs.implies(mine) for theirs in gateway_rules.get(name, [])) for mine in rules)
    ]


CHECK = tier_check(
    "IGW-AU209",
    "Global router and clusters verify tokens alike",
    Severity.MEDIUM,
    "A GlobalRouterConfig forwarding its callers' tokens to a cluster whose "
    "InferenceGatewayConfig verifies them with another issuer (HIGH: every forwarded token is "
    "refused), audiences that leave out one of the router's, requiredClaims the router does not "
    "enforce as strictly (HIGH when no token can pass both), or another tenantClaim: objectiveAccess "
    "and per-tenant limits cannot work across the tiers.",
    "Give the cluster's InferenceGatewayConfig spec.auth.jwt.provider the router's issuer, "
    "audiences that include the router's, no requiredClaims rule the router does not also hold (same "
    "claim and valueType, its values among the gateway's), and spec.extensions.authorization.tenantClaim "
    "equal to the router's spec.authorization.tenantClaim.",
    _verdict,
)
