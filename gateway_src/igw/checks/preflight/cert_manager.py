"""IGW-PF008: cert-manager is running - as the EKS add-on or as its own Deployment.

The inference add-on lists cert-manager among the dependencies its install requires, and configs
with ``spec.tls: {}`` (or an empty ``acmArn``) have their certificate issued through it; the message
names those configs, because for them TLS never comes up without it.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import Missing
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity, Status
from igw.checks.preflight._deployments import component_status, named

META = CheckMeta(
    id="IGW-PF008",
    title="cert-manager running",
    command=Command.PREFLIGHT,
    category="dependencies",
    severity=Severity.HIGH,
    description="cert-manager is a required dependency of the inference add-on and issues the gateway's "
    "certificate when spec.tls asks for auto-issue.",
    remediation="Install the cert-manager EKS add-on (>= v1.18.2-eksbuild.2).",
)


def _auto_issue_configs(ctx: CheckContext) -> str:
    configs = ctx.inventory.kube.of("InferenceGatewayConfig")
    if isinstance(configs, Missing):
        return ""
    needing = [c for c in configs if (tls := section(c, "tls")) is not None and not tls.get("acmArn")]
    return ", ".join(ref(c) for c in needing[:3])


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    addons = ctx.inventory.aws.addons
    addon = addons.get("cert-manager") if not isinstance(addons, Missing) else None
    if addon is not None and addon.status in (None, "ACTIVE", "UPDATING"):
        state = f", status {addon.status}" if addon.status else " (declared)"
        yield r.passed("EKS add-on cert-manager", f"version {addon.version}{state}")
        return
    who = _auto_issue_configs(ctx)
    for result in component_status(ctx, r, what="cert-manager", matches=named("cert-manager")):
        if result.status is Status.FAIL and who:
            yield r.fail(result.resource, f"{result.message}; TLS auto-issue of {who} depends on it")
        elif result.status is Status.WARN and who:
            yield r.warn(
                result.resource,
                f"{result.message}; TLS auto-issue of {who} depends on it",
                severity=Severity.MEDIUM,
            )
        else:
            yield result


CHECK = FunctionCheck(META, _run)
