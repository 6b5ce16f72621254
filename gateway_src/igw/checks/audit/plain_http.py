"""IGW-AU303: no plain-HTTP listener serves traffic (an HTTP listener must redirect to HTTPS)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU303",
    title="No plain-HTTP listener without redirect",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.MEDIUM,
    description="An HTTP listener that forwards (instead of redirecting) carries prompts and tokens in "
    "clear.",
    remediation="Add alb.ingress.kubernetes.io/ssl-redirect: '443' (or a redirect default action), or drop "
    "the "
    "HTTP listener.",
    cross_refs=refs("SecurityHub:ELB.1", "Checkov:CKV2_AWS_20", "Trivy:AWS-0054", "Checkov:CKV_AWS_2"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for lb in load_balancers(ctx):
        if lb.type != "application":
            continue
        plain = [li for li in lb.listeners if li.protocol == "HTTP" and not li.redirects_to_https]
        if plain:
            ports = ", ".join(str(li.port) for li in plain)
            yield r.fail(lb.resource, f"HTTP listener(s) on {ports} forward without redirecting to HTTPS")
        else:
            yield r.passed(lb.resource, "no plain-HTTP listener serves traffic")


CHECK = FunctionCheck(META, _run)
