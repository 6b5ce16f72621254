"""IGW-AU502: role trust is scoped to one service account (IRSA ``:sub``/``:aud``, or Pod Identity)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.iam import trust_problems
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU502",
    title="Role trust scoped to the service account",
    command=Command.AUDIT,
    category="iam",
    severity=Severity.HIGH,
    description="A web-identity trust without an exact ':sub' lets any pod in the cluster assume the role.",
    remediation="Condition StringEquals {'<oidc>:sub': 'system:serviceaccount:NAMESPACE:SA', "
    "'<oidc>:aud': 'sts.amazonaws.com'}, or use EKS Pod Identity.",
    cross_refs=refs("CIS-EKS:5.2.1"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for role in need(ctx.inventory.aws.roles):
        resource = f"IAM role {role.name}"
        if not isinstance(role.trust_policy, Mapping):
            yield r.warn(
                resource, f"trust policy not readable here ({role.trust_policy!r})", severity=Severity.LOW
            )
            continue
        problems = trust_problems(role)
        if problems:
            critical = any("any AWS principal" in p for p in problems)
            yield r.fail(resource, "; ".join(problems), severity=Severity.CRITICAL if critical else None)
        else:
            yield r.passed(resource, "trust scoped")


CHECK = FunctionCheck(META, _run)
