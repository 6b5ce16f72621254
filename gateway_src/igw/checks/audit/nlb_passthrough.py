"""IGW-AU305: NLB listeners pass raw TCP to the gateway.

An NLB in TCP pass-through hands half-open and slow (slowloris) connections straight to the gateway
pods, and carries plaintext unless the gateway terminates TLS itself; an ALB only forwards complete
requests.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU305",
    title="No raw TCP pass-through to the gateway",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.LOW,
    description="TCP listeners expose the gateway to slowloris/half-open connections and plaintext traffic.",
    remediation="Prefer an ALB (Ingress), or terminate TLS on the NLB (aws-load-balancer-ssl-cert) and "
    "keep the "
    "gateway's header/idle timeouts tight.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for lb in load_balancers(ctx):
        if lb.type != "network":
            continue
        tcp = [li for li in lb.listeners if li.protocol == "TCP"]
        if tcp:
            ports = ", ".join(str(li.port) for li in tcp)
            yield r.warn(
                lb.resource,
                f"TCP pass-through on {ports}: slowloris exposure, plaintext unless the "
                "gateway terminates TLS",
            )
        else:
            yield r.passed(lb.resource, "TLS listeners only")


CHECK = FunctionCheck(META, _run)
