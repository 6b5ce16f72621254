"""IGW-AU302: inbound CIDRs are restricted; ``0.0.0.0/0`` on an internet-facing load balancer fails.

The Load Balancer Controller's default ``inbound-cidrs`` is ``0.0.0.0/0``.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.loadbalancers import OPEN_CIDRS, load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU302",
    title="Inbound CIDRs restricted",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.HIGH,
    description="Open inbound ranges (0.0.0.0/0, ::/0) let anyone who can route to the load balancer "
    "connect.",
    remediation="Set alb.ingress.kubernetes.io/inbound-cidrs or spec.loadBalancerSourceRanges (or the "
    "security "
    "group) to the client ranges that need access.",
    cross_refs=refs("cdk-nag:AwsSolutions-EC23"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for lb in load_balancers(ctx):
        if lb.inbound_cidrs is None:
            continue
        open_ranges = [c for c in lb.inbound_cidrs if c in OPEN_CIDRS]
        if not open_ranges:
            source = lb.source_of("inboundCIDRs")
            yield r.passed(lb.resource, f"{source}inbound {', '.join(lb.inbound_cidrs) or 'none'}")
        elif lb.scheme == "internet-facing":
            approved = lb.internet_facing_approved or ctx.options.allow_internet_facing
            yield r.fail(
                lb.resource,
                f"{lb.source_of('scheme', 'inboundCIDRs')}internet-facing and open to "
                f"{', '.join(open_ranges)}",
                severity=Severity.MEDIUM if approved else Severity.HIGH,
            )
        else:
            yield r.warn(
                lb.resource,
                f"{lb.source_of('scheme', 'inboundCIDRs')}internal but open to "
                f"{', '.join(open_ranges)} (whole VPC and peers)",
                severity=Severity.LOW,
            )


CHECK = FunctionCheck(META, _run)
