"""IGW-AU208: a router forwards verified tokens only to gateways that verify (and strip) them.

With ``forwardAuthorization: true`` the router keeps the caller's ``Authorization``. A tier-1 gateway
without ``spec.auth`` is in open mode, whose guard strips no ``Authorization``
(:class:`igw.security.guard.SecurityGuard`): the caller's bearer token reaches the model-server pods,
their logs and whatever they call. The token buys nothing there either: an open gateway grants no
tenant, so ``objectiveAccess`` cannot work (docs/global-router.md "Caller identity at the clusters").
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._tiers import CALLER_IDENTITY_DOC, tier_pairs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU208",
    title="Global router forwards tokens only to clusters that verify them",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.MEDIUM,
    description="A GlobalRouterConfig with spec.auth and spec.authorization.forwardAuthorization: true in "
    "front of a cluster whose InferenceGatewayConfig has no spec.auth: an open gateway passes "
    "Authorization through, so every caller's bearer token reaches the model-server pods.",
    remediation="Give that cluster's InferenceGatewayConfig spec.auth with the router's issuer, an audience "
    "the callers' tokens carry and the same tenantClaim (it verifies, then strips the token), or set "
    "forwardAuthorization: false on the router if the cluster is meant to trust it. "
    f"See {CALLER_IDENTITY_DOC}.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for pair in tier_pairs(ctx):
        if not (pair.router_verifies and pair.router_forwards):
            yield r.passed(pair.resource, "the router forwards no verified token (no forwardAuthorization)")
        elif pair.gateway_verifies:
            yield r.passed(pair.resource, f"{pair.gateway_ref} verifies the forwarded token and strips it")
        else:
            yield r.fail(
                pair.resource,
                f"the router forwards callers' verified tokens (forwardAuthorization) to {pair.gateway_ref}, "
                "which has no spec.auth and passes Authorization through: the tokens reach its "
                "model-server pods",
            )


CHECK = FunctionCheck(META, _run)
