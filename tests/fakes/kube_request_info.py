"""What a request to the fake Kubernetes API server asks for, read from its path alone.

The API server authorizes a request on attributes its ``RequestInfoFactory`` reads from the URL
(group, resource, namespace, name, subresource) before any handler looks the resource up; so a caller
RBAC does not allow gets 403 for a resource that is not served too (a CRD not installed), and only
an allowed caller can learn it is not there (404). :mod:`tests.fakes.kube_api` authorizes on these
attributes, then routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RequestAttributes", "request_attributes"]

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
"""What follows ``namespaces/<name>/`` that is a Namespace's subresource, not a namespaced resource
(``RequestInfoFactory``'s ``namespaceSubresources``)."""


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """A resource request's authorization attributes (``group`` "" for the core API)."""

    group: str
    resource: str
    namespace: str
    name: str | None
    subresource: str | None


def request_attributes(parts: Sequence[str]) -> RequestAttributes | None:
    """The attributes of the request for the path ``parts`` (``/`` split, empty parts dropped), or
    ``None`` for a path that names no resource (discovery, ``/version``, an unknown prefix)."""
    if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
        group, rest = "", list(parts[2:])
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], list(parts[3:])
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    return RequestAttributes(group, resource, namespace, name, subresource)
