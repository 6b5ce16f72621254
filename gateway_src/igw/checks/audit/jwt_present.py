"""IGW-AU201: ``spec.auth.jwt`` is configured - without it anyone who reaches the endpoint is served.

CRITICAL instead of HIGH when a load balancer in scope is internet-facing.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers
from igw.checks.inventory import MissingFact, need
from igw.checks.k8s import ref
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU201",
    title="JWT authentication configured (spec.auth.jwt)",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.HIGH,
    description="The gateway performs no request-level authentication unless spec.auth.jwt is set.",
    remediation="Add spec.auth.jwt.provider with issuer, remoteJWKS.uri and audiences (or requiredClaims).",
)


def _internet_facing(ctx: CheckContext) -> bool:
    try:
        return any(lb.scheme == "internet-facing" for lb in load_balancers(ctx))
    except MissingFact:
        return False


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    configs = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    public = _internet_facing(ctx)
    for config in configs:
        providers = jwt_providers(config)
        if providers:
            names = ", ".join(str(p.get("name", "?")) for p in providers)
            yield r.passed(ref(config), f"JWT provider(s): {names}")
        elif public:
            yield r.fail(
                ref(config),
                "no spec.auth.jwt and an internet-facing load balancer: the endpoint is open to the internet",
                severity=Severity.CRITICAL,
            )
        else:
            yield r.fail(ref(config), "no spec.auth.jwt: anyone who can reach the endpoint is served")


CHECK = FunctionCheck(META, _run)
