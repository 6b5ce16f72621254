"""The pod ports behind the in-cluster Services a gateway reaches, for its NetworkPolicy.

A NetworkPolicy matches a connection after the Service's DNAT: the destination is the pod's IP and its
``targetPort``, not the Service's port. Before session s42 the operator opened only the port a config
names (the JWKS URL's, ``bbr.defaultBackend.port``): for ``https://jwks.auth.svc:443`` in front of pods
listening on 8443, an enforcing CNI dropped every key fetch and every token was refused, with nothing
saying why. Here the operator reads each such Service (and, for a named ``targetPort``, the ports of
the pods it selects) and opens the ports the packets really go to, to the pods the Service selects
(its ``spec.selector`` as the rule's ``podSelector``, in its namespace): the Service port's own too
when the pods listen on it, since the config's rule for it may be an ``ipBlock`` one, which some CNIs
(Cilium) never match with a pod's address. A Service is named by its cluster DNS
name or, through the pods' search path, by ``<name>.<namespace>`` or a bare ``<name>`` (in the config's
namespace); the operator's OTLP collector and CloudWatch agent are resolved the same way. What it
cannot read or resolve (RBAC narrowed by ``operator.namespaces``, no Service yet, a Service without a
selector, pods not yet up) is reported with the ``networkPolicy.extraEgress`` rule that would open it;
a short name that is no Service, or whose would-be namespace does not exist (``idp.corp`` read by an
operator whose RBAC does not reach ``corp``), is taken for a host outside the cluster, and not reported.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from igw.gateway.emf_sink import AgentEndpoint

HTTPS_PORT: Final = 443
HTTP_PORT: Final = 80
REDIS_PORT: Final = 6379
DEFAULT_BACKEND_PORT: Final = 8000
_SVC_LABEL: Final = "svc"
_CLUSTER_DOMAIN: Final = ["cluster", "local"]
"""The default cluster domain: ``<name>.<namespace>.svc.cluster.local`` names a Service for certain."""
_SERVICE_NAME: Final = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
"""A Service's name (an RFC 1035 label)."""
_NAMESPACE_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace's name (an RFC 1123 label)."""
_NOT_SERVICES: Final = frozenset({"localhost"})
READ_TTL_S: Final = 2.0
"""How long a Service read or pod list is reused by the passes of other configs
(:class:`CachedReader`): below the operator's default resync (5 s), so each resync reads each once."""


class ServiceReader(Protocol):
    """What resolution needs from the API (:class:`igw.operator.kube.Kube` has it)."""

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]: ...


class CachedReader:
    """A :class:`ServiceReader` that reuses each answer for ``ttl_s`` seconds of ``clock``.

    Every pass of every config resolved its Services afresh: 50 configs sharing one JWKS Service
    behind a named port and one default backend made 150 identical reads per resync (5 s apart by
    default), 18 % of the operator's API requests. Passes of other configs within ``ttl_s`` now reuse
    them; a refusal is not kept (the next pass asks again), and expired answers are dropped as new
    ones come in, so the cache holds at most what ``ttl_s`` of passes read."""

    def __init__(self, reader: ServiceReader, clock: Callable[[], float], ttl_s: float = READ_TTL_S) -> None:
        self._reader = reader
        self._clock = clock
        self._ttl_s = ttl_s
        self._answers: dict[tuple[str, ...], tuple[float, Any]] = {}

    def _fresh(self, key: tuple[str, ...]) -> tuple[bool, Any]:
        kept = self._answers.get(key)
        if kept is not None and self._clock() - kept[0] < self._ttl_s:
            return True, kept[1]
        return False, None

    def _keep(self, key: tuple[str, ...], answer: Any) -> None:
        now = self._clock()
        for stale in [k for k, (at, _) in self._answers.items() if now - at >= self._ttl_s]:
            del self._answers[stale]
        self._answers[key] = (now, answer)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, as read at most ``ttl_s`` ago."""
        key = ("get", api_version, kind, namespace, name)
        found, answer = self._fresh(key)
        if not found:
            answer = await self._reader.get(api_version, kind, namespace, name)
            self._keep(key, answer)
        return answer  # type: ignore[no-any-return]

    async def list(
        self, api_version: str, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects, as listed at most ``ttl_s`` ago."""
        key = ("list", api_version, kind, namespace or "", label_selector or "")
        found, answer = self._fresh(key)
        if not found:
            answer = await self._reader.list(api_version, kind, namespace, label_selector=label_selector)
            self._keep(key, answer)
        return answer  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class ServiceRef:
    """A Service port a config makes the gateway connect to, and the field that names it."""

    namespace: str
    name: str
    port: int
    source: str
    protocol: str = "TCP"
    explicit: bool = True
    """Whether the host names a Service for certain (``<name>.<namespace>.svc[.<cluster domain>]``).
    A short name (``<name>.<namespace>``, or ``<name>`` in the config's namespace) reaches a Service
    through the pods' DNS search path, but may as well be a host outside the cluster: when no such
    Service exists, that is no problem to report."""


@dataclass(frozen=True, slots=True)
class OpenedPods:
    """Pod ports to open to the pods one Service selects: those of ``namespace`` matching ``selector``."""

    namespace: str
    selector: tuple[tuple[str, str], ...]
    """The Service's ``spec.selector``, sorted: the egress rule's ``podSelector``, so only the Service's
    backends are reached, not every pod of its namespace."""
    ports: tuple[tuple[int, str], ...]
    """``(port, protocol)``, the Service port's own too when the pods listen on it: the config's rule for
    that port may be an ``ipBlock`` one, which some CNIs (Cilium) never match with a pod's address."""


@dataclass(frozen=True, slots=True)
class ServiceEgress:
    """The pod ports behind the Services of one config, and what could not be resolved."""

    opened: tuple[OpenedPods, ...] = ()
    """Pod ports to open, per namespace and Service selector."""
    unresolved: tuple[str, ...] = field(default=())
    """One sentence per Service port whose pod port is unknown, naming the field and the remedy."""
    opened_sources: frozenset[str] = frozenset()
    """The fields (:attr:`ServiceRef.source`) whose Service's pods :attr:`opened` reaches: the
    default backend's model-server rule (:mod:`igw.operator.model_egress`) is not needed for it then."""


def _service_of_host(host: str, namespace: str) -> tuple[str, str, bool] | None:
    """``(namespace, name, explicit)`` of the Service ``host`` may name from a pod of ``namespace``:
    ``<name>.<namespace>.svc`` with or without the default cluster domain (explicit), or through the
    pods' DNS search path ``<name>.<namespace>`` and a bare ``<name>`` in ``namespace`` (short names,
    which may be hosts outside the cluster); ``None`` for an IP address, ``localhost`` or any other name.
    ``<name>.<namespace>.svc.<other domain>`` is a Service under a custom cluster domain or a host
    outside the cluster (``auth.payments.svc.corp.example.com``), which the operator cannot tell apart:
    not explicit, so a missing Service is not reported."""
    host = host.rstrip(".").lower()
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None
    labels = host.split(".")
    if len(labels) >= 3 and labels[2] == _SVC_LABEL:
        if not (_SERVICE_NAME.fullmatch(labels[0]) and _NAMESPACE_NAME.fullmatch(labels[1])):
            return None
        return labels[1], labels[0], labels[3:] in ([], _CLUSTER_DOMAIN)
    if len(labels) == 2 and _SERVICE_NAME.fullmatch(labels[0]) and _NAMESPACE_NAME.fullmatch(labels[1]):
        return labels[1], labels[0], False
    if len(labels) == 1 and _SERVICE_NAME.fullmatch(labels[0]) and labels[0] not in _NOT_SERVICES:
        return namespace, labels[0], False
    return None


def _ref_of_url(
    url: object, default_port: int, namespace: str, source: str, protocol: str = "TCP"
) -> ServiceRef | None:
    """The Service port ``url`` connects to when its host is a Service's name (:func:`_service_of_host`)."""
    try:
        parts = urlsplit(str(url))
        port = parts.port or default_port
    except ValueError:
        return None
    found = _service_of_host(parts.hostname or "", namespace)
    if found is None:
        return None
    return ServiceRef(found[0], found[1], port, source, protocol, found[2])


def _redis_refs(spec: Mapping[str, Any], namespace: str) -> list[ServiceRef]:
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
        ref = _ref_of_url(url, REDIS_PORT, namespace, source) if url else None
        if ref is not None:
            refs.append(ref)
    return refs


def _endpoint_refs(
    otlp_endpoint: str, emf_endpoint: AgentEndpoint | None, namespace: str
) -> list[ServiceRef]:
    """The operator's OTLP collector and CloudWatch agent (``--gateway-otlp-endpoint``,
    ``--gateway-emf-endpoint``) when their host is a Service's name: every gateway sends there."""
    refs: list[ServiceRef] = []
    if otlp_endpoint:
        default = HTTPS_PORT if urlsplit(otlp_endpoint).scheme == "https" else HTTP_PORT
        ref = _ref_of_url(otlp_endpoint, default, namespace, "--gateway-otlp-endpoint")
        if ref is not None:
            refs.append(ref)
    if emf_endpoint is not None:
        found = _service_of_host(emf_endpoint.host, namespace)
        if found is not None:
            source, protocol = "--gateway-emf-endpoint", emf_endpoint.protocol.upper()
            refs.append(ServiceRef(found[0], found[1], emf_endpoint.port, source, protocol, found[2]))
    return refs


def service_refs(
    igwc: Mapping[str, Any], *, otlp_endpoint: str = "", emf_endpoint: AgentEndpoint | None = None
) -> list[ServiceRef]:
    """The in-cluster Service ports ``igwc`` makes its gateways connect to: the JWKS URL's and, with
    ``oidcDiscovery``, the issuer's, and the Redis stores' when their host is a Service's name (the
    cluster DNS name or, through the pods' search path, a short one), ``bbr.defaultBackend``, and the
    operator's OTLP collector and CloudWatch agent (``otlp_endpoint``, ``emf_endpoint``)."""
    spec = igwc.get("spec") or {}
    namespace = str((igwc.get("metadata") or {}).get("namespace") or "default")
    refs: list[ServiceRef] = _redis_refs(spec, namespace)
    provider = ((spec.get("auth") or {}).get("jwt") or {}).get("provider")
    if isinstance(provider, Mapping):
        urls = [("spec.auth.jwt.provider.remoteJWKS.uri", (provider.get("remoteJWKS") or {}).get("uri"))]
        authorization = (spec.get("extensions") or {}).get("authorization") or {}
        if isinstance(authorization, Mapping) and authorization.get("oidcDiscovery") is True:
            urls.append(("spec.auth.jwt.provider.issuer", provider.get("issuer")))
        for source, url in urls:
            ref = _ref_of_url(url, HTTPS_PORT, namespace, source) if url else None
            if ref is not None:
                refs.append(ref)
    backend = (spec.get("bbr") or {}).get("defaultBackend")
    if isinstance(backend, Mapping) and backend.get("name"):
        port = int(backend.get("port", DEFAULT_BACKEND_PORT))
        refs.append(ServiceRef(namespace, str(backend["name"]), port, "spec.bbr.defaultBackend"))
    refs.extend(_endpoint_refs(otlp_endpoint, emf_endpoint, namespace))
    return refs


def _service_port(service: Mapping[str, Any], port: int, protocol: str) -> Mapping[str, Any] | None:
    for entry in (service.get("spec") or {}).get("ports") or []:
        if not isinstance(entry, Mapping):
            continue
        if entry.get("port") == port and entry.get("protocol", "TCP") == protocol:
            return entry
    return None


def named_container_ports(pods: Iterable[Mapping[str, Any]], name: str, protocol: str = "TCP") -> set[int]:
    """The ``protocol`` container ports called ``name`` in ``pods`` (a Service's named ``targetPort``)."""
    found: set[int] = set()
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            for entry in container.get("ports") or []:
                if entry.get("name") == name and entry.get("protocol", "TCP") == protocol:
                    found.add(int(entry["containerPort"]))
    return found


def _selector(service: Mapping[str, Any]) -> dict[str, str]:
    """The Service's ``spec.selector`` (empty for one whose endpoints are managed by hand)."""
    selector = (service.get("spec") or {}).get("selector") or {}
    return {str(key): str(value) for key, value in selector.items()} if isinstance(selector, Mapping) else {}


def _peer(namespace: str, selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A NetworkPolicy peer: the pods of ``namespace``, only those matching ``selector`` when given."""
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    if selector:
        peer["podSelector"] = {"matchLabels": dict(sorted(selector.items()))}
    return peer


def remedy(ref: ServiceRef, selector: Mapping[str, str] | None = None) -> str:
    """The ``networkPolicy.extraEgress`` rule (``--gateway-extra-egress``) that opens ``ref``'s pods:
    those its Service selects (``selector``) when that is known, else its namespace's."""
    peer = json.dumps(_peer(ref.namespace, selector))
    return f'{{"to": [{peer}], "ports": [{{"port": <the pods\' port>, "protocol": "{ref.protocol}"}}]}}'


async def _outside_the_cluster(kube: ServiceReader, ref: ServiceRef) -> bool:
    """Whether the short name ``ref`` came from names a host outside the cluster for certain: its
    would-be namespace does not exist (``idp.corp`` and no namespace ``corp``). The operator may read
    Namespaces when its RBAC is narrowed to some (kopf follows them), not Services elsewhere."""
    if ref.explicit:
        return False
    try:
        return await kube.get("v1", "Namespace", "", ref.namespace) is None
    except Exception:  # unknown: the Service may be there, so it is reported
        return False


async def _resolve(kube: ServiceReader, ref: ServiceRef) -> tuple[set[int] | None, dict[str, str], str]:
    """The pod ports behind ``ref`` and the selector of the pods listening on them, or ``None`` and why
    not (an empty set: nothing to open, as for an ExternalName Service or a short name that is no
    Service, :attr:`ServiceRef.explicit`)."""
    where = f"Service {ref.namespace}/{ref.name}"
    try:
        service = await kube.get("v1", "Service", ref.namespace, ref.name)
    except Exception as exc:  # an API refusal (RBAC narrowed to other namespaces) is reported
        if getattr(exc, "status", None) == 403:
            if await _outside_the_cluster(kube, ref):
                return set(), {}, ""
            return (
                None,
                {},
                f"{where} may not be read by the operator (403: its RBAC does not reach that namespace)",
            )
        return None, {}, f"{where} could not be read ({type(exc).__name__}: {getattr(exc, 'reason', exc)})"
    if service is None:
        return (None, {}, f"{where} does not exist") if ref.explicit else (set(), {}, "")
    if (service.get("spec") or {}).get("type") == "ExternalName":
        return set(), {}, ""
    entry = _service_port(service, ref.port, ref.protocol)
    if entry is None:
        return None, {}, f"{where} has no {ref.protocol} port {ref.port}"
    selector = _selector(service)
    if not selector:
        return None, {}, f"{where} selects no pods (its endpoints are managed by hand)"
    target = entry.get("targetPort", ref.port)
    if isinstance(target, int):
        return {target}, selector, ""
    if str(target).isdigit():
        return {int(target)}, selector, ""
    try:
        pods = await kube.list(
            "v1",
            "Pod",
            ref.namespace,
            label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        )
    except Exception as exc:
        reason = getattr(exc, "reason", exc)
        return None, selector, f"the pods of {where} could not be listed ({type(exc).__name__}: {reason})"
    ports = named_container_ports(pods, str(target), ref.protocol)
    if not ports:
        why = f"{where} maps port {ref.port} to the named port {target!r}, which no pod it selects has"
        return None, selector, why
    return ports, selector, ""


async def resolve(kube: ServiceReader, refs: Sequence[ServiceRef]) -> ServiceEgress:
    """The pod ports behind each of ``refs``, grouped by namespace and Service selector."""
    opened: dict[tuple[str, tuple[tuple[str, str], ...]], set[tuple[int, str]]] = {}
    unresolved: list[str] = []
    opened_sources: set[str] = set()
    for ref in refs:
        ports, selector, why = await _resolve(kube, ref)
        if ports is None:
            unresolved.append(
                f"{ref.source} ({ref.name}.{ref.namespace}.svc:{ref.port}): {why}, so the NetworkPolicy "
                f"opens port {ref.port} only; if the pods listen on another port, open it with "
                f"networkPolicy.extraEgress (igw operator --gateway-extra-egress): {remedy(ref, selector)}"
            )
            continue
        if ports:
            key = (ref.namespace, tuple(sorted(selector.items())))
            opened.setdefault(key, set()).update((port, ref.protocol) for port in ports)
            opened_sources.add(ref.source)
    return ServiceEgress(
        opened=tuple(
            OpenedPods(namespace, selector, tuple(sorted(ports)))
            for (namespace, selector), ports in sorted(opened.items())
        ),
        unresolved=tuple(unresolved),
        opened_sources=frozenset(opened_sources),
    )


def egress_rules(egress: ServiceEgress) -> list[dict[str, Any]]:
    """NetworkPolicy egress rules opening :attr:`ServiceEgress.opened` to the pods each Service selects
    (least privilege: before s42's third round, to every pod of the Service's namespace)."""
    return [
        {
            "to": [_peer(pods.namespace, dict(pods.selector))],
            "ports": [{"port": port, "protocol": protocol} for port, protocol in pods.ports],
        }
        for pods in egress.opened
    ]
