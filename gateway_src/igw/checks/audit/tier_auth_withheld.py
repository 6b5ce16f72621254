"""IGW-AU207: a router that verifies callers and keeps their tokens fronts no authenticating gateway.

With ``spec.auth`` on and ``spec.authorization.forwardAuthorization`` not ``true`` the router's guard
strips the caller's ``Authorization`` before forwarding. A tier-1 gateway with its own ``spec.auth``
then sees no token and answers 401, which the router turns into a 502 ``upstream_auth_misconfigured``
(since session s47): every caller the router verified is refused by that cluster, in production, on
the first request. The audit sees it before traffic when it holds both tiers' configurations
(linked by the gateway's heartbeat, :mod:`igw.checks.audit._tiers`).
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._tiers import CALLER_IDENTITY_DOC, tier_pairs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU207",
    title="Global router forwards tokens to clusters that verify them",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.HIGH,
    description="A GlobalRouterConfig with spec.auth that does not forward its callers' tokens "
    "(spec.authorization.forwardAuthorization not true), in front of a cluster whose "
    "InferenceGatewayConfig has spec.auth: every verified caller gets 502 upstream_auth_misconfigured "
    "from that cluster.",
    remediation="Either set spec.authorization.forwardAuthorization: true on the GlobalRouterConfig, the "
    "cluster's gateway verifying the same issuer, an audience the callers' tokens carry and the same "
    "tenantClaim (over an https endpoint), or remove spec.auth from that cluster's "
    f"InferenceGatewayConfig (the router then vouches for the caller). See {CALLER_IDENTITY_DOC}.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for pair in tier_pairs(ctx):
        if not pair.router_verifies:
            yield r.passed(
                pair.resource, "the router authenticates nobody: callers' tokens pass on as they came"
            )
        elif pair.router_forwards:
            yield r.passed(pair.resource, "the router forwards callers' tokens (forwardAuthorization)")
        elif not pair.gateway_verifies:
            yield r.passed(
                pair.resource, f"{pair.gateway_ref} authenticates nobody: the router vouches for callers"
            )
        else:
            yield r.fail(
                pair.resource,
                f"the router verifies callers and strips their tokens (spec.authorization."
                f"forwardAuthorization is not true), but {pair.gateway_ref} has spec.auth: every verified "
                f"caller gets 502 upstream_auth_misconfigured from cluster {pair.cluster}",
            )


CHECK = FunctionCheck(META, _run)
