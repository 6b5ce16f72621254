"""IGW-AU207: a router that verifies callers and keeps their tokens fronts no authenticating gateway.

With ``spec.auth`` on and ``spec.authorization.forwardAuthorization`` not ``true`` the router's guard
strips the caller's ``Authorization`` before forwarding. A tier-1 gateway with its own ``spec.auth``
then sees no token and answers 401, which the router turns into a 502 ``upstream_auth_misconfigured``
(since session s47): every caller the router verified is refused by that cluster, in production, on
the first request. The audit sees it before traffic when it holds both tiers' configurations
(linked by the gateway's heartbeat, :mod:`igw.checks.audit._tiers`).
"""

from __future__ import annotations

from igw.checks.audit._tiers import TierPair, tier_check
from igw.checks.framework import Reporter
from igw.checks.model import Result, Severity


def _verdict(pair: TierPair, r: Reporter) -> Result:
    if not pair.router_verifies:
        return r.passed(
            pair.resource, "the router authenticates nobody: callers' tokens pass on as they came"
        )
    if pair.router_forwards:
        return r.passed(pair.resource, "the router forwards callers' tokens (forwardAuthorization)")
    if not pair.gateway_verifies:
        return r.passed(
            pair.resource, f"{pair.gateway_ref} authenticates nobody: the router vouches for callers"
        )
    return r.fail(
        pair.resource,
        f"the router verifies callers and strips their tokens (spec.authorization."
        f"forwardAuthorization is not true), but {pair.gateway_ref} has spec.auth: every verified "
        f"caller gets 502 upstream_auth_misconfigured from cluster {pair.cluster}",
    )


CHECK = tier_check(
    "IGW-AU207",
    "Global router forwards tokens to clusters that verify them",
    Severity.HIGH,
    "A GlobalRouterConfig with spec.auth that does not forward its callers' tokens "
    "(spec.authorization.forwardAuthorization not true), in front of a cluster whose "
    "InferenceGatewayConfig has spec.auth: every verified caller gets 502 upstream_auth_misconfigured "
    "from that cluster.",
    "Either set spec.authorization.forwardAuthorization: true on the GlobalRouterConfig, the "
    "cluster's gateway verifying the same issuer, an audience the callers' tokens carry and the same "
    "tenantClaim (over an https endpoint), or remove spec.auth from that cluster's "
    "InferenceGatewayConfig (the router then vouches for the caller).",
    _verdict,
)
