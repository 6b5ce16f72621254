"""IGW-AU102: every HTTPS/TLS listener uses a TLS policy on our allow-list.

The AWS default ELBSecurityPolicy-2016-08 (what you get when no policy is set) accepts TLS 1.0 and
fails; policies we do not know warn instead of passing. A name is graded without the whitespace
around it: ``"ELBSecurityPolicy-TLS-1-0-2015-04 "`` (a stray space in YAML) was an unknown policy, a
MEDIUM warning, where the policy it names accepts TLS 1.0; the finding quotes the name as written.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity, refs
from igw.checks.tls_policies import PolicyGrade, grade

META = CheckMeta(
    id="IGW-AU102",
    title="Load-balancer TLS policy on the allow-list",
    command=Command.AUDIT,
    category="tls",
    severity=Severity.HIGH,
    description="HTTPS/TLS listeners must use a TLS 1.2+/1.3 policy with forward-secret ciphers.",
    remediation="Set alb.ingress.kubernetes.io/ssl-policy (Ingress), service.beta.kubernetes.io/"
    "aws-load-balancer-ssl-negotiation-policy (Service) or the listener's SslPolicy to "
    "ELBSecurityPolicy-TLS13-1-2-Res-PQ-2025-09 (or another TLS13 policy).",
    cross_refs=refs("Checkov:CKV_AWS_103", "Trivy:AWS-0047", "SecurityHub:ELB.17", "CIS-EKS:5.4.5"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for lb in load_balancers(ctx):
        for listener in lb.listeners:
            if listener.protocol not in ("HTTPS", "TLS") or listener.ssl_policy is None:
                continue
            resource = f"{lb.resource} listener {listener.protocol}:{listener.port}"
            source = lb.source_of("sslPolicy")
            written = listener.ssl_policy
            policy = written.strip()
            implicit = "" if listener.ssl_policy_explicit else " (the default when no policy is set)"
            if policy != written:
                implicit = f" (written {written!r}, with whitespace no ELB policy name has)"
            verdict = grade(policy)
            if verdict is PolicyGrade.ALLOWED and policy != written:
                yield r.warn(
                    resource,
                    f"{source}policy {policy}{implicit}: ELB knows no policy of that name as written; "
                    "write the name alone",
                    severity=Severity.MEDIUM,
                )
            elif verdict is PolicyGrade.ALLOWED:
                yield r.passed(resource, f"{source}policy {policy}")
            elif verdict is PolicyGrade.DENIED:
                yield r.fail(
                    resource,
                    f"{source}effective policy {policy}{implicit} allows TLS 1.0/1.1 or weak ciphers",
                )
            elif verdict is PolicyGrade.LEGACY:
                yield r.warn(
                    resource,
                    f"{source}policy {policy}{implicit} is TLS 1.2 but keeps CBC/SHA-1 ciphers",
                    severity=Severity.LOW,
                )
            else:
                yield r.warn(
                    resource,
                    f"{source}unknown policy {policy}{implicit}: not on the allow-list, review it",
                    severity=Severity.MEDIUM,
                )


CHECK = FunctionCheck(META, _run)
