"""IGW-PF004: the gateway's IAM role exists and may import certificates into ACM.

TLS auto-issue is on by default and the controller reads the role at start, so the role must exist
with the ACM permissions *before* the add-on is installed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from igw.addon.pins import ADDON_NAME
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.iam import GATEWAY_ACTIONS, allows, is_gateway_role
from igw.checks.inventory import IamRole, Missing, need
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.preflight._gateway_install import awss_installed, ours_installed

META = CheckMeta(
    id="IGW-PF004",
    title="Gateway IAM role present with the ACM permissions it needs",
    command=Command.PREFLIGHT,
    category="iam",
    severity=Severity.HIGH,
    description="The gateway's service-account role must allow " + ", ".join(GATEWAY_ACTIONS) + ".",
    remediation="Create the role (IRSA or Pod Identity) with the managed policy "
    "AmazonSageMakerHyperPodInferenceGatewayAccess and pass it as inferenceGateway.serviceAccount.roleArn.",
)


def _addon_role_arns(ctx: CheckContext) -> set[str]:
    """Roles our add-on is configured with (IRSA role, Pod Identity roles, configuration values)."""
    addons = ctx.inventory.aws.addons
    addon = None if isinstance(addons, Missing) else addons.get(ADDON_NAME)
    if addon is None:
        return set()
    arns = {*addon.pod_identity_role_arns}
    if addon.service_account_role_arn:
        arns.add(addon.service_account_role_arn)
    try:
        values = json.loads(addon.configuration_values or "{}")
        arn = ((values.get("inferenceGateway") or {}).get("serviceAccount") or {}).get("roleArn")
    except (ValueError, AttributeError):
        arn = None
    if arn:
        arns.add(str(arn))
    return arns


def _candidates(ctx: CheckContext, roles: list[IamRole]) -> list[IamRole]:
    """``--gateway-role-arn`` if given; else roles the add-on names; else roles trusting the gateway's SA."""
    wanted = ctx.options.gateway_role_arn
    if wanted:
        return [r for r in roles if wanted in (r.arn, r.name)]
    configured = _addon_role_arns(ctx)
    return [r for r in roles if r.arn in configured or is_gateway_role(r)]


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    if not ctx.options.gateway_role_arn and ours_installed(ctx) and not awss_installed(ctx):
        need(Missing("our gateway calls no AWS API: no IAM role to check"))
    roles = list(need(ctx.inventory.aws.roles))
    found = _candidates(ctx, roles)
    if not found:
        which = ctx.options.gateway_role_arn or "trusting the gateway's service account"
        yield r.fail("IAM role (gateway)", f"no role {which} found")
        return
    for role in found:
        missing = [a for a in GATEWAY_ACTIONS if not allows(role, a)]
        if missing:
            yield r.fail(f"IAM role {role.name}", f"not allowed: {', '.join(missing)}")
        else:
            yield r.passed(f"IAM role {role.name}", "allows every ACM action the gateway needs")


CHECK = FunctionCheck(META, _run)
