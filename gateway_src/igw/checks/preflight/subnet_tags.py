"""IGW-PF005: subnets are tagged so the Load Balancer Controller can place the gateway's load balancer.

The gateway's load balancers are internal (LBC default), which needs ``kubernetes.io/role/internal-elb=1``;
``kubernetes.io/role/elb=1`` only serves internet-facing ones.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.model import CheckMeta, Command, Result, Severity

INTERNAL = "kubernetes.io/role/internal-elb"
PUBLIC = "kubernetes.io/role/elb"

META = CheckMeta(
    id="IGW-PF005",
    title="Subnets tagged for load balancers",
    command=Command.PREFLIGHT,
    category="network",
    severity=Severity.HIGH,
    description=f"At least one subnet carries {INTERNAL}=1 (internal load balancers).",
    remediation=f"Tag the cluster's private subnets with {INTERNAL}=1 (and public ones with {PUBLIC}=1 if an "
    "internet-facing load balancer is intended).",
)


def _tagged(tags: dict[str, str], key: str) -> bool:
    return tags.get(key) in ("1", "")


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    subnets = list(need(ctx.inventory.aws.subnets))
    if not subnets:
        yield r.fail("subnets", "no subnets found for the cluster")
        return
    internal = [s.id for s in subnets if _tagged(dict(s.tags), INTERNAL)]
    public = [s.id for s in subnets if _tagged(dict(s.tags), PUBLIC)]
    if internal:
        yield r.passed(
            "subnets", f"{len(internal)} subnet(s) tagged {INTERNAL}: {', '.join(sorted(internal))}"
        )
    elif public:
        yield r.warn(
            "subnets",
            f"only {PUBLIC} tags ({', '.join(sorted(public))}); an internal load balancer "
            "has no subnet to use",
            severity=Severity.MEDIUM,
        )
    else:
        yield r.fail("subnets", f"none of {len(subnets)} subnet(s) carries {INTERNAL} or {PUBLIC}")


CHECK = FunctionCheck(META, _run)
