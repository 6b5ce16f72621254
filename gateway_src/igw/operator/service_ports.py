"""The pod ports behind the in-cluster Services a gateway reaches, for its NetworkPolicy.

A NetworkPolicy matches a connection after the Service's DNAT: the destination is the pod's IP and its
``targetPort``, not the Service's port. Before session s42 the operator opened only the port a config
names (the JWKS URL's, ``bbr.defaultBackend.port``): for ``https://jwks.auth.svc:443`` in front of pods
listening on 8443, an enforcing CNI dropped every key fetch and every token was refused, with nothing
saying why. Here the operator reads each such Service (and, for a named ``targetPort``, the ports of
the pods it selects) and opens the ports the packets really go to, to that namespace's pods. What it
cannot read or resolve (RBAC narrowed by ``operator.namespaces``, no Service yet, a Service without a
selector, pods not yet up) is reported with the ``networkPolicy.extraEgress`` rule that would open it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

HTTPS_PORT: Final = 443
REDIS_PORT: Final = 6379
DEFAULT_BACKEND_PORT: Final = 8000
_SVC_LABEL: Final = "svc"


class ServiceReader(Protocol):
    """What resolution needs from the API (:class:`igw.operator.kube.Kube` has it)."""

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class ServiceRef:
    """A Service port a config makes the gateway connect to, and the field that names it."""

    namespace: str
    name: str
    port: int
    source: str


@dataclass(frozen=True, slots=True)
class ServiceEgress:
    """The pod ports behind the Services of one config, and what could not be resolved."""

    opened: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """``(namespace, ports)``: pod ports to open to that namespace's pods (only those that differ from
    the Service port; the Service port itself is opened by the config's own rules)."""
    unresolved: tuple[str, ...] = field(default=())
    """One sentence per Service port whose pod port is unknown, naming the field and the remedy."""


def _service_of_url(url: object, default_port: int) -> tuple[str, str, int] | None:
    """``(namespace, name, port)`` when ``url``'s host is a Service's cluster DNS name
    (``<name>.<namespace>.svc`` with or without the cluster domain)."""
    try:
        parts = urlsplit(str(url))
        port = parts.port or default_port
    except ValueError:
        return None
    labels = (parts.hostname or "").rstrip(".").split(".")
    if len(labels) >= 3 and labels[2] == _SVC_LABEL and labels[0] and labels[1]:
        return labels[1], labels[0], port
    return None


def _redis_refs(spec: Mapping[str, Any]) -> list[ServiceRef]:
    """The Redis stores (shared rate limits, the global heartbeat store) at a Service's DNS name."""
    extensions = spec.get("extensions") or {}
    urls: list[tuple[str, object]] = []
    limits = extensions.get("rateLimits") or {}
    if isinstance(limits, Mapping) and limits.get("backend") == "redis":
        urls.append(("spec.extensions.rateLimits.redis.url", (limits.get("redis") or {}).get("url")))
    heartbeat = extensions.get("globalHeartbeat")
    if isinstance(heartbeat, Mapping):
        urls.append(("spec.extensions.globalHeartbeat.redis.url", (heartbeat.get("redis") or {}).get("url")))
    refs: list[ServiceRef] = []
    for source, url in urls:
        found = _service_of_url(url, REDIS_PORT) if url else None
        if found is not None:
            refs.append(ServiceRef(found[0], found[1], found[2], source))
    return refs


def service_refs(igwc: Mapping[str, Any]) -> list[ServiceRef]:
    """The in-cluster Service ports ``igwc`` makes its gateways connect to: the JWKS URL's and, with
    ``oidcDiscovery``, the issuer's, and the Redis stores' when their host is a Service's DNS name, and
    ``bbr.defaultBackend``."""
    spec = igwc.get("spec") or {}
    namespace = str((igwc.get("metadata") or {}).get("namespace") or "default")
    refs: list[ServiceRef] = _redis_refs(spec)
    provider = ((spec.get("auth") or {}).get("jwt") or {}).get("provider")
    if isinstance(provider, Mapping):
        urls = [("spec.auth.jwt.provider.remoteJWKS.uri", (provider.get("remoteJWKS") or {}).get("uri"))]
        authorization = (spec.get("extensions") or {}).get("authorization") or {}
        if isinstance(authorization, Mapping) and authorization.get("oidcDiscovery") is True:
            urls.append(("spec.auth.jwt.provider.issuer", provider.get("issuer")))
        for source, url in urls:
            found = _service_of_url(url, HTTPS_PORT) if url else None
            if found is not None:
                refs.append(ServiceRef(found[0], found[1], found[2], source))
    backend = (spec.get("bbr") or {}).get("defaultBackend")
    if isinstance(backend, Mapping) and backend.get("name"):
        port = int(backend.get("port", DEFAULT_BACKEND_PORT))
        refs.append(ServiceRef(namespace, str(backend["name"]), port, "spec.bbr.defaultBackend"))
    return refs


def _service_port(service: Mapping[str, Any], port: int) -> Mapping[str, Any] | None:
    for entry in (service.get("spec") or {}).get("ports") or []:
        if isinstance(entry, Mapping) and entry.get("port") == port and entry.get("protocol", "TCP") == "TCP":
            return entry
    return None


def named_container_ports(pods: Iterable[Mapping[str, Any]], name: str) -> set[int]:
    """The TCP container ports called ``name`` in ``pods`` (a Service's named ``targetPort``)."""
    found: set[int] = set()
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            for entry in container.get("ports") or []:
                if entry.get("name") == name and entry.get("protocol", "TCP") == "TCP":
                    found.add(int(entry["containerPort"]))
    return found


def _selector(service: Mapping[str, Any]) -> str:
    selector = (service.get("spec") or {}).get("selector") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))


def remedy(ref: ServiceRef) -> str:
    """The ``networkPolicy.extraEgress`` rule (``--gateway-extra-egress``) that opens ``ref``'s pods."""
    return (
        f'{{"to": [{{"namespaceSelector": {{"matchLabels": {{"kubernetes.io/metadata.name": '
        f'"{ref.namespace}"}}}}}}], "ports": [{{"port": <the pods\' port>, "protocol": "TCP"}}]}}'
    )


async def _resolve(kube: ServiceReader, ref: ServiceRef) -> tuple[set[int] | None, str]:
    """The pod ports behind ``ref``, or ``None`` and why not."""
    where = f"Service {ref.namespace}/{ref.name}"
    try:
        service = await kube.get("v1", "Service", ref.namespace, ref.name)
    except Exception as exc:  # an API refusal (RBAC narrowed to other namespaces) is reported
        if getattr(exc, "status", None) == 403:
            return (
                None,
                f"{where} may not be read by the operator (403: its RBAC does not reach that namespace)",
            )
        return None, f"{where} could not be read ({type(exc).__name__}: {getattr(exc, 'reason', exc)})"
    if service is None:
        return None, f"{where} does not exist"
    if (service.get("spec") or {}).get("type") == "ExternalName":
        return set(), ""
    entry = _service_port(service, ref.port)
    if entry is None:
        return None, f"{where} has no TCP port {ref.port}"
    target = entry.get("targetPort", ref.port)
    if isinstance(target, int):
        return {target}, ""
    if str(target).isdigit():
        return {int(target)}, ""
    selector = _selector(service)
    if not selector:
        return None, f"{where} maps port {ref.port} to the named port {target!r} and selects no pods"
    try:
        pods = await kube.list("v1", "Pod", ref.namespace, label_selector=selector)
    except Exception as exc:
        reason = getattr(exc, "reason", exc)
        return None, f"the pods of {where} could not be listed ({type(exc).__name__}: {reason})"
    ports = named_container_ports(pods, str(target))
    if not ports:
        return None, f"{where} maps port {ref.port} to the named port {target!r}, which no pod it selects has"
    return ports, ""


async def resolve(kube: ServiceReader, refs: Sequence[ServiceRef]) -> ServiceEgress:
    """The pod ports behind each of ``refs`` that differ from its Service port, grouped by namespace."""
    opened: dict[str, set[int]] = {}
    unresolved: list[str] = []
    for ref in refs:
        ports, why = await _resolve(kube, ref)
        if ports is None:
            unresolved.append(
                f"{ref.source} ({ref.name}.{ref.namespace}.svc:{ref.port}): {why}, so the NetworkPolicy "
                f"opens port {ref.port} only; if the pods listen on another port, open it with "
                f"networkPolicy.extraEgress (igw operator --gateway-extra-egress): {remedy(ref)}"
            )
            continue
        different = ports - {ref.port}
        if different:
            opened.setdefault(ref.namespace, set()).update(different)
    return ServiceEgress(
        opened=tuple((namespace, tuple(sorted(ports))) for namespace, ports in sorted(opened.items())),
        unresolved=tuple(unresolved),
    )


def egress_rules(egress: ServiceEgress) -> list[dict[str, Any]]:
    """NetworkPolicy egress rules opening :attr:`ServiceEgress.opened` to each namespace's pods."""
    return [
        {
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}],
            "ports": [{"port": port, "protocol": "TCP"} for port in ports],
        }
        for namespace, ports in egress.opened
    ]
