"""IGW-AU304: ALBs drop invalid header fields (request smuggling / header injection hardening)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU304",
    title="ALB drops invalid header fields",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.MEDIUM,
    description="routing.http.drop_invalid_header_fields.enabled defaults to false.",
    remediation="alb.ingress.kubernetes.io/load-balancer-attributes: "
    "routing.http.drop_invalid_header_fields.enabled=true",
    cross_refs=refs("SecurityHub:ELB.4", "Checkov:CKV_AWS_131", "Trivy:AWS-0052"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for lb in load_balancers(ctx):
        if lb.type != "application" or lb.drop_invalid_header_fields is None:
            continue
        source = lb.source_of("loadBalancerAttributes")
        if lb.drop_invalid_header_fields:
            yield r.passed(lb.resource, f"{source}drops invalid header fields")
        else:
            yield r.fail(lb.resource, f"{source}routing.http.drop_invalid_header_fields.enabled is false")


CHECK = FunctionCheck(META, _run)
