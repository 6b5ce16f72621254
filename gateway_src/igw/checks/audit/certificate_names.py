"""IGW-AU104: every TLS host an Ingress serves is covered by the names of the cert-manager Certificate
that fills its secret (a SAN mismatch fails every client's hostname verification).

Only Ingress TLS entries whose ``secretName`` belongs to a Certificate in the same namespace are
judged; secrets managed some other way are outside what this check can know.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from igw.checks.audit._hosts import listed_names
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.k8s import namespace_of, ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU104",
    title="Certificate names cover the served hosts",
    command=Command.AUDIT,
    category="tls",
    severity=Severity.HIGH,
    description="Each host in an Ingress spec.tls entry must match a dnsName (or the commonName) of the "
    "Certificate that writes its secretName.",
    remediation="Add the host to the Certificate's spec.dnsNames (or use the ingress-shim annotation "
    "cert-manager.io/cluster-issuer so cert-manager derives the names from the Ingress).",
)


def covers(pattern: str, host: str) -> bool:
    """RFC 6125 matching: exact (case-insensitive) or a left-most ``*`` covering exactly one label."""
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = host.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == host


def _names(cert: Mapping[str, Any]) -> list[str]:
    names = listed_names(spec(cert).get("dnsNames"))
    common = spec(cert).get("commonName")
    return [*names, str(common)] if common else names


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    certificates = need(ctx.inventory.kube.of("Certificate"))
    ingresses = need(ctx.inventory.kube.of("Ingress"))
    by_secret = {(namespace_of(c), str(spec(c).get("secretName"))): c for c in certificates}
    for ingress in ingresses:
        for entry in spec(ingress).get("tls") or []:
            if not isinstance(entry, Mapping):
                continue
            cert = by_secret.get((namespace_of(ingress), str(entry.get("secretName"))))
            if cert is None:
                continue
            names = _names(cert)
            hosts = listed_names(entry.get("hosts"))
            uncovered = [h for h in hosts if not any(covers(n, h) for n in names)]
            resource = f"{ref(ingress)} secret {entry.get('secretName')}"
            if uncovered:
                yield r.fail(resource, f"{', '.join(uncovered)} not in {ref(cert)} names {names}")
            else:
                yield r.passed(resource, f"{len(hosts)} host(s) covered by {ref(cert)}")


CHECK = FunctionCheck(META, _run)
