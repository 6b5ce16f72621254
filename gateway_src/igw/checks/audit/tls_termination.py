"""IGW-AU101: traffic to the gateway is encrypted - ``spec.tls``, gateway-side TLS, or a TLS load balancer."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import need
from igw.checks.k8s import ref
from igw.checks.loadbalancers import load_balancers
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU101",
    title="TLS termination configured",
    command=Command.AUDIT,
    category="tls",
    severity=Severity.HIGH,
    description="Without spec.tls (or spec.extensions.tlsTermination, or a TLS listener in front) prompts, "
    "completions and bearer tokens cross the network in clear text.",
    remediation="Set spec.tls.acmArn (or spec.tls: {} to auto-issue through cert-manager).",
    cross_refs=refs("CIS-EKS:5.4.5", "Polaris:tlsSettingsMissing", "Checkov:CKV_AWS_2"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    configs = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    tls_lbs = [
        lb.resource
        for lb in load_balancers(ctx)
        if any(li.protocol in ("HTTPS", "TLS") for li in lb.listeners)
    ]
    for config in configs:
        tls = section(config, "tls")
        if tls is not None:
            how = (
                f"ACM certificate {tls['acmArn']}"
                if tls.get("acmArn")
                else "auto-issued through cert-manager"
            )
            yield r.passed(ref(config), f"spec.tls: {how}")
        elif section(config, "extensions", "tlsTermination") is not None:
            yield r.passed(ref(config), "TLS terminated by the gateway pods (spec.extensions.tlsTermination)")
        elif tls_lbs:
            yield r.passed(ref(config), f"no spec.tls; TLS terminates at {', '.join(tls_lbs[:3])}")
        else:
            yield r.fail(
                ref(config), "no TLS anywhere: no spec.tls, no gateway TLS, no HTTPS/TLS load balancer"
            )


CHECK = FunctionCheck(META, _run)
