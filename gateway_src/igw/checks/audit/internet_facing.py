"""IGW-AU301: load balancers are internal unless internet exposure is an explicit, approved choice.

Approve with ``--allow-internet-facing`` or the annotation ``igw.dev/internet-facing-approved: "true"``.
A Service left to the legacy in-tree provider is internet-facing *by default* - that fails harder.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU301",
    title="Load balancer scheme internal (or approved)",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.MEDIUM,
    description="An internet-facing load balancer puts the model endpoint on the internet.",
    remediation="Use scheme internal (alb.ingress.kubernetes.io/scheme / service.beta.kubernetes.io/"
    "aws-load-balancer-scheme), or approve the exposure explicitly.",
    cross_refs=refs("Trivy:AWS-0053", "Checkov:CKV2_AWS_28"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for lb in load_balancers(ctx):
        source = lb.source_of("scheme")
        if lb.scheme != "internet-facing":
            yield r.passed(lb.resource, f"{source}scheme {lb.scheme}")
        elif lb.internet_facing_approved or ctx.options.allow_internet_facing:
            yield r.passed(lb.resource, f"{source}internet-facing, explicitly approved")
        elif not lb.scheme_explicit:
            yield r.fail(
                lb.resource,
                "internet-facing by default (legacy in-tree load balancer, no scheme set)",
                severity=Severity.HIGH,
            )
        else:
            yield r.warn(lb.resource, f"{source}internet-facing and not approved")


CHECK = FunctionCheck(META, _run)
