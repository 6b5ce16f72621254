"""IGW-AU602: tenants are isolated - model access is restricted by token claims.

JWT alone authenticates; ``spec.extensions.authorization`` (``requireTenant``, ``modelAccess``)
decides which tenant may call which model.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU602",
    title="Tenant isolation configured",
    command=Command.AUDIT,
    category="tenancy",
    severity=Severity.MEDIUM,
    description="Without model-access rules every authenticated caller can use every model (and adapter).",
    remediation="Set spec.extensions.authorization.requireTenant: true and modelAccess rules per claim.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        authz = section(config, "extensions", "authorization")
        if section(config, "auth", "jwt") is None:
            yield r.fail(
                ref(config), "no authentication, so no tenant can be told apart", severity=Severity.HIGH
            )
        elif authz is None or not (authz.get("modelAccess") or authz.get("requireTenant")):
            yield r.warn(
                ref(config), "no modelAccess rules or requireTenant: every caller reaches every model"
            )
        else:
            rules = len(authz.get("modelAccess") or [])
            yield r.passed(
                ref(config),
                f"{rules} model-access rule(s), requireTenant={authz.get('requireTenant', False)}",
            )


CHECK = FunctionCheck(META, _run)
