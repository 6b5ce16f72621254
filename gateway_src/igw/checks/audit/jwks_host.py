"""IGW-AU204: the JWKS host is not in private, loopback or link-local ranges (SSRF to metadata/internal).

IP literals are judged by range; well-known internal names (``localhost``, instance metadata,
``*.cluster.local``, ``*.internal``) too. Other host names are not resolved here - an audit must not
depend on the auditor's DNS view.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from urllib.parse import urlsplit

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers
from igw.checks.inventory import need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

FORBIDDEN_NAMES = (
    "localhost",
    "metadata",
    "metadata.google.internal",
    "instance-data",
    "instance-data.ec2.internal",
)
INTERNAL_SUFFIXES = (".localhost", ".cluster.local", ".svc", ".internal", ".local")

META = CheckMeta(
    id="IGW-AU204",
    title="JWKS host not private or link-local",
    command=Command.AUDIT,
    category="jwt",
    severity=Severity.HIGH,
    description="A JWKS URI pointing at a private, loopback or link-local address lets a config writer "
    "make the "
    "gateway fetch internal endpoints (e.g. 169.254.169.254) and trust whatever answers.",
    remediation="Point remoteJWKS.uri at the IdP's public https endpoint.",
)


def classify(host: str) -> tuple[Severity, str] | None:
    """``(severity, why)`` for a risky host, ``None`` when it looks public."""
    name = host.strip("[]").lower().rstrip(".")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        if name in FORBIDDEN_NAMES:
            return Severity.HIGH, f"{name} is a local or metadata host"
        if name.endswith(INTERNAL_SUFFIXES):
            return Severity.MEDIUM, f"{name} is a cluster/VPC-internal name"
        return None
    if address.is_link_local:
        return Severity.HIGH, f"{address} is link-local (instance metadata range)"
    if address.is_loopback:
        return Severity.HIGH, f"{address} is loopback"
    if address.is_private or address.is_reserved or address.is_unspecified:
        return Severity.HIGH, f"{address} is a private/reserved address"
    return None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        for provider in jwt_providers(config):
            resource = f"{ref(config)} provider {provider.get('name', '?')}"
            jwks = provider.get("remoteJWKS")
            uri = str(jwks.get("uri") or "") if isinstance(jwks, dict) else ""
            host = urlsplit(uri).hostname if uri else None
            if not host:
                yield r.fail(resource, f"JWKS URI {uri!r} has no host")
                continue
            risk = classify(host)
            if risk is None:
                yield r.passed(resource, f"JWKS host {host}")
            elif risk[0] is Severity.HIGH:
                yield r.fail(resource, f"JWKS host {risk[1]}")
            else:
                yield r.warn(resource, f"JWKS host {risk[1]}", severity=risk[0])


CHECK = FunctionCheck(META, _run)
