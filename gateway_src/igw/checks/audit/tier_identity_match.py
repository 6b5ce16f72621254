"""IGW-AU209: a router and a cluster's gateway verifying one forwarded token agree on it.

Behind a router with ``forwardAuthorization: true`` a gateway with ``spec.auth`` verifies the same
token again (the deployment docs/global-router.md "Caller identity at the clusters" describes for
``objectiveAccess``). It refuses a token whose ``iss`` is not its issuer exactly (every forwarded
token then gets a 401: HIGH), or whose ``aud`` names none of its audiences (a router audience it does
not accept lets some verified callers through the router only); a different ``tenantClaim`` gives
each caller another tenant at the cluster than at the router, so its rate limits and reserved
objectives are not the ones the router enforced.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._tiers import CALLER_IDENTITY_DOC, audiences, issuers, tenant_claim, tier_pairs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU209",
    title="Global router and clusters verify tokens alike",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.MEDIUM,
    description="A GlobalRouterConfig forwarding its callers' tokens to a cluster whose "
    "InferenceGatewayConfig verifies them with another issuer (HIGH: every forwarded token is "
    "refused), audiences that leave out one of the router's, or another tenantClaim: objectiveAccess "
    "and per-tenant limits cannot work across the tiers.",
    remediation="Give the cluster's InferenceGatewayConfig spec.auth.jwt.provider the router's issuer, "
    "audiences that include the router's, and spec.extensions.authorization.tenantClaim equal to the "
    f"router's spec.authorization.tenantClaim. See {CALLER_IDENTITY_DOC}.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for pair in tier_pairs(ctx):
        if not (pair.router_verifies and pair.router_forwards and pair.gateway_verifies):
            yield r.passed(
                pair.resource, "no forwarded token is verified at both tiers (IGW-AU207, IGW-AU208)"
            )
            continue
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
        if gateway_audiences is not None and (
            router_audiences is None or router_audiences - gateway_audiences
        ):
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
        if problems:
            yield r.fail(pair.resource, "; ".join(problems), severity=severity)
        else:
            yield r.passed(
                pair.resource, f"{pair.gateway_ref} verifies the forwarded token as the router does"
            )


CHECK = FunctionCheck(META, _run)
