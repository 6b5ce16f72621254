"""IGW-PF007: the AWS Load Balancer Controller is running (it creates the gateway's ALB/NLB).

It may be installed on its own (chart ``aws-load-balancer-controller``) or bundled in the add-on.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.checks.preflight._deployments import component_status, named

META = CheckMeta(
    id="IGW-PF007",
    title="AWS Load Balancer Controller running",
    command=Command.PREFLIGHT,
    category="dependencies",
    severity=Severity.HIGH,
    description="Without the controller the gateway's Service/Ingress never gets a load balancer.",
    remediation="Install the aws-load-balancer-controller chart (eks-charts) with its IAM role, or enable "
    "alb.enabled in the add-on configuration.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    yield from component_status(
        ctx, r, what="aws-load-balancer-controller", matches=named("aws-load-balancer-controller")
    )


CHECK = FunctionCheck(META, _run)
