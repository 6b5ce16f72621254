"""IGW-AU501: IAM roles in scope grant no wildcard actions and carry no admin managed policy."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.iam import managed_policy_name, wildcard_actions
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

ADMIN_POLICIES = ("AdministratorAccess", "PowerUserAccess", "IAMFullAccess")

META = CheckMeta(
    id="IGW-AU501",
    title="No wildcard IAM actions",
    command=Command.AUDIT,
    category="iam",
    severity=Severity.HIGH,
    description="'*' or 'service:*' actions give a compromised pod far more than it needs.",
    remediation="List the exact actions (the gateway needs four acm: actions); use resource ARNs, not '*'.",
    cross_refs=refs("cdk-nag:AwsSolutions-IAM5", "cdk-nag:AwsSolutions-IAM4"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for role in need(ctx.inventory.aws.roles):
        resource = f"IAM role {role.name}"
        admin = [a for a in role.managed_policy_arns if managed_policy_name(a) in ADMIN_POLICIES]
        wild = wildcard_actions(role)
        if admin:
            yield r.fail(
                resource,
                f"attached {', '.join(managed_policy_name(a) for a in admin)}",
                severity=Severity.CRITICAL,
            )
        elif any(action == "*" for _, action in wild):
            yield r.fail(resource, "allows every action ('*')", severity=Severity.CRITICAL)
        elif wild:
            shown = ", ".join(sorted({f"{action} ({policy})" for policy, action in wild}))
            yield r.fail(resource, f"wildcard actions: {shown}")
        else:
            yield r.passed(resource, "explicit actions only")


CHECK = FunctionCheck(META, _run)
