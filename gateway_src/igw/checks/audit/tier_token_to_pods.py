"""IGW-AU208: a router forwards verified tokens only to gateways that verify (and strip) them.

With ``forwardAuthorization: true`` the router keeps the caller's ``Authorization``. A tier-1 gateway
without ``spec.auth`` is in open mode, whose guard strips no ``Authorization``
(:class:`igw.security.guard.SecurityGuard`): the caller's bearer token reaches the model-server pods,
their logs and whatever they call. The token buys nothing there either: an open gateway grants no
tenant, so ``objectiveAccess`` cannot work (docs/global-router.md "Caller identity at the clusters").
"""

from __future__ import annotations

from igw.checks.audit._tiers import TierPair, tier_check
from igw.checks.framework import Reporter
from igw.checks.model import Result, Severity


def _verdict(pair: TierPair, r: Reporter) -> Result:
    if not (pair.router_verifies and pair.router_forwards):
        return r.passed(pair.resource, "the router forwards no verified token (no forwardAuthorization)")
    if pair.gateway_verifies:
        return r.passed(pair.resource, f"{pair.gateway_ref} verifies the forwarded token and strips it")
    return r.fail(
        pair.resource,
        f"the router forwards callers' verified tokens (forwardAuthorization) to {pair.gateway_ref}, "
        "which has no spec.auth and passes Authorization through: the tokens reach its "
        "model-server pods",
    )


CHECK = tier_check(
    "IGW-AU208",
    "Global router forwards tokens only to clusters that verify them",
    Severity.MEDIUM,
    "A GlobalRouterConfig with spec.auth and spec.authorization.forwardAuthorization: true in "
    "front of a cluster whose InferenceGatewayConfig has no spec.auth: an open gateway passes "
    "Authorization through, so every caller's bearer token reaches the model-server pods.",
    "Give that cluster's InferenceGatewayConfig spec.auth with the router's issuer, an audience "
    "the callers' tokens carry and the same tenantClaim (it verifies, then strips the token), or set "
    "forwardAuthorization: false on the router if the cluster is meant to trust it.",
    _verdict,
)
