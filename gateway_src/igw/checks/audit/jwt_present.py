"""IGW-AU201: ``spec.auth.jwt`` is configured - without it anyone who reaches the endpoint is served.

CRITICAL instead of HIGH when a load balancer in scope is internet-facing, or when the config itself
asks ``igw operator`` for one (``spec.extensions.dataPlane`` with ``scheme: internet-facing`` and the
default ``serviceType: LoadBalancer``): then a folder holding only the InferenceGatewayConfig still
shows the exposure. Nothing is derived from an AWS-shaped config without that extension: it says
nothing about how the gateway is exposed (AWS's managed gateway, an Ingress, a chart's Service), and
assuming the operator's Service there reported load balancers that do not exist.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers
from igw.checks.inventory import Manifest, MissingFact, need
from igw.checks.k8s import ref, spec
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


def _asks_for_internet_facing(config: Manifest) -> bool:
    """The config's own ``spec.extensions.dataPlane`` makes the operator's Service an internet-facing NLB."""
    extensions = spec(config).get("extensions")
    data_plane = extensions.get("dataPlane") if isinstance(extensions, Mapping) else None
    if not isinstance(data_plane, Mapping):
        return False
    service_type = data_plane.get("serviceType", "LoadBalancer")
    return service_type == "LoadBalancer" and data_plane.get("scheme") == "internet-facing"


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
        elif _asks_for_internet_facing(config):
            yield r.fail(
                ref(config),
                "no spec.auth.jwt and spec.extensions.dataPlane.scheme internet-facing: igw operator "
                "puts this gateway on an internet-facing load balancer, open to the internet",
                severity=Severity.CRITICAL,
            )
        else:
            yield r.fail(ref(config), "no spec.auth.jwt: anyone who can reach the endpoint is served")


CHECK = FunctionCheck(META, _run)
