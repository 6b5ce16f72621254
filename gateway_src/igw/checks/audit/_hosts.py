"""Host names the audit treats as this machine: a connection to them never leaves it."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a URL's host name) is ``localhost`` or a loopback address."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listed_names(value: object) -> list[str]:
    """A manifest's list of names (an Ingress's ``tls[].hosts``, a Certificate's ``dnsNames``) as
    strings; anything else lists none. A string there is a YAML slip Kubernetes refuses, and it was
    read letter by letter (each letter a host the certificate did not cover)."""
    return [str(name) for name in value] if isinstance(value, list) else []
