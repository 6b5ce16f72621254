"""IGW-AU204: the JWKS host is not in private, loopback or link-local ranges (SSRF to metadata/internal).

IP literals are judged by range; well-known internal names (``localhost``, instance metadata,
``*.cluster.local``, ``*.internal``) too. Other host names are not resolved here - an audit must not
depend on the auditor's DNS view.

An IPv4 address has more spellings than the dotted quad: the C resolver the gateway's HTTP client
connects through (``getaddrinfo``, ``inet_aton`` rules) reads ``2852039166``, ``0xa9fea9fe``,
``0251.0376.0251.0376`` and ``169.254.43518`` all as 169.254.169.254. :mod:`ipaddress` refuses them, so
they passed as public names; they are read as the resolver reads them (no lookup: a literal).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterator
from typing import Final
from urllib.parse import urlsplit

from igw.checks.audit._jwt_configs import jwt_configs
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import jwt_providers
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
_INET_ATON: Final = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}$")
"""One to four dot-separated decimal, octal (leading 0) or hex (0x) parts: what ``inet_aton`` accepts
as an IPv4 address (anchored: glibc's own parser also stops at a space and ignores the rest)."""

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


def ip_literal(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host name is a literal of, as the resolver reads it; ``None`` for a DNS name."""
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if not _INET_ATON.match(name):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:  # a part out of range (``256.1.1.1``, ``0x1ffffffff``): not an address at all
        return None


def classify(host: str) -> tuple[Severity, str] | None:
    """``(severity, why)`` for a risky host, ``None`` when it looks public."""
    name = host.strip("[]").lower().rstrip(".")
    address = ip_literal(name)
    if address is None:
        if name in FORBIDDEN_NAMES:
            return Severity.HIGH, f"{name} is a local or metadata host"
        if name.endswith(INTERNAL_SUFFIXES):
            return Severity.MEDIUM, f"{name} is a cluster/VPC-internal name"
        return None
    shown = str(address) if str(address) == name else f"{name} ({address})"
    if address.is_link_local:
        return Severity.HIGH, f"{shown} is link-local (instance metadata range)"
    if address.is_loopback:
        return Severity.HIGH, f"{shown} is loopback"
    if address.is_private or address.is_reserved or address.is_unspecified:
        return Severity.HIGH, f"{shown} is a private/reserved address"
    return None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in (found.config for found in jwt_configs(ctx)):
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
