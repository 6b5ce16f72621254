"""IGW-AU101: traffic to the gateway is encrypted - ``spec.tls``, gateway-side TLS, or a TLS load balancer.

Only the gateway's own front end counts: a Service or Ingress in the config's namespace named after
the config (or after its operator-created Service ``<name>-gateway``), or an Ingress whose backend is
that Service, or a load balancer the AWS side tags with that Service. An HTTPS listener elsewhere in
the cluster says nothing about this gateway.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import Manifest, Missing, need
from igw.checks.k8s import name_of, namespace_of, ref, spec
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


def _service_names(config: Manifest) -> set[str]:
    return {name_of(config), f"{name_of(config)}-gateway"}


def _ingress_backends(ingress: Manifest) -> set[str]:
    """Service names an Ingress routes to (default backend and every rule path)."""
    body = spec(ingress)
    backends = [body.get("defaultBackend") or {}]
    for rule in body.get("rules") or []:
        for path in ((rule or {}).get("http") or {}).get("paths") or []:
            backends.append((path or {}).get("backend") or {})
    return {
        str((b.get("service") or {}).get("name"))
        for b in backends
        if isinstance(b, dict) and b.get("service")
    }


def _own_front_ends(ctx: CheckContext, config: Manifest) -> set[str]:
    """Resources (``Kind ns/name``) that front this config's gateway, from the Kubernetes side."""
    names, namespace = _service_names(config), namespace_of(config)
    own: set[str] = set()
    for kind in ("Service", "Ingress"):
        objects = ctx.inventory.kube.of(kind)
        if isinstance(objects, Missing):
            continue
        for obj in objects:
            if namespace_of(obj) != namespace:
                continue
            if name_of(obj) in names or (kind == "Ingress" and _ingress_backends(obj) & names):
                own.add(ref(obj))
    return own


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    configs = need(ctx.inventory.kube.of("InferenceGatewayConfig"))
    balancers = load_balancers(ctx)
    for config in configs:
        own = _own_front_ends(ctx, config)
        services = {f"{namespace_of(config)}/{name}" for name in _service_names(config)}
        tls_lbs = [
            lb.resource
            for lb in balancers
            if (lb.resource in own or any(service in lb.resource for service in services))
            and any(li.protocol in ("HTTPS", "TLS") for li in lb.listeners)
        ]
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
                ref(config),
                "no TLS: no spec.tls, no gateway TLS, and no HTTPS/TLS listener on the gateway's own "
                f"Service/Ingress ({', '.join(sorted(own)) or 'none found'})",
            )


CHECK = FunctionCheck(META, _run)
