"""IGW-AU501: IAM roles in scope grant no wildcard actions and carry no admin managed policy.

``Action: "*"``, ``"*:*"`` and an Allow with ``NotAction`` are CRITICAL; ``service:*`` and
``iam:PassRole`` on every role (``Resource: "*"``) are HIGH.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.iam import managed_policy_name, pass_role_anywhere, wildcard_actions
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
    remediation="List the exact actions (the gateway needs four acm: actions), no NotAction; use resource "
    "ARNs, not '*' (iam:PassRole only on the roles the pod must pass).",
    cross_refs=refs("cdk-nag:AwsSolutions-IAM5", "cdk-nag:AwsSolutions-IAM4"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for role in need(ctx.inventory.aws.roles):
        resource = f"IAM role {role.name}"
        admin = [a for a in role.managed_policy_arns if managed_policy_name(a) in ADMIN_POLICIES]
        wild = wildcard_actions(role)
        pass_role = pass_role_anywhere(role)
        if admin:
            yield r.fail(
                resource,
                f"attached {', '.join(managed_policy_name(a) for a in admin)}",
                severity=Severity.CRITICAL,
            )
        elif every := sorted({policy for policy, action in wild if action == "*"}):
            yield r.fail(
                resource,
                f"allows every action ('*', '*:*' or an Allow with NotAction) in {', '.join(every)}",
                severity=Severity.CRITICAL,
            )
        elif wild or pass_role:
            shown = (
                [f"wildcard actions: {', '.join(sorted({f'{a} ({p})' for p, a in wild}))}"] if wild else []
            )
            if pass_role:
                shown.append(f"iam:PassRole on every role ({', '.join(sorted(set(pass_role)))})")
            yield r.fail(resource, "; ".join(shown))
        else:
            yield r.passed(resource, "explicit actions only")


CHECK = FunctionCheck(META, _run)
