"""IGW-AU306: the gateway's ``/metrics``, detailed ``/readyz`` and decision debug API are not served on the
port its load balancer exposes.

Without a management port (``igw serve --management-port`` or ``spec.extensions.management.port``),
``igw serve`` answers those paths on the inference port, where JWT auth does not guard them: anyone who
reaches the endpoint reads every model-server pod's address and scrape error, the worker's pid, and
the tenant/model/adapter names in the metrics' labels. Graded by how far that port reaches: HIGH when
an internet-facing load balancer (a LoadBalancer Service, or an ALB Ingress backend, selecting the
gateway's pods) forwards to it, LOW when only internal clients do. A management port that a load
balancer itself forwards to is graded the same way. ``igw operator`` and the Helm chart always run
their gateways with a management port the load balancer never reaches.

Gateway workloads are the containers that run ``igw serve`` (argv ``igw serve ...``, or ``serve ...``
in an ``inference-gateway`` image).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from igw.checks.audit._selecting import service_selects
from igw.checks.audit._workloads import workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Manifest
from igw.checks.k8s import container_args, containers, name_of, namespace_of, ref, spec, template_labels
from igw.checks.loadbalancers import alb_classes, from_ingress, from_service
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU306",
    title="Metrics and pod detail off the load balancer's port",
    command=Command.AUDIT,
    category="exposure",
    severity=Severity.HIGH,
    description="On one port, igw serve answers /metrics (tenant, model and adapter labels), /readyz (every "
    "model-server pod's address and scrape error) and /debug/decisions to anyone who reaches the "
    "endpoint; JWT auth guards only the inference routes.",
    remediation="Run igw serve with --management-port (or spec.extensions.management.port) and keep that "
    "port out of every LoadBalancer Service and Ingress (igw operator and the Helm chart do).",
)

MANAGEMENT_FLAG: Final = "--management-port"
GATEWAY_IMAGE: Final = "inference-gateway"
DEFAULT_SERVING_PORT: Final = 8080
"""``igw serve --port``'s default."""


@dataclass(frozen=True, slots=True)
class Exposure:
    """A load balancer (its resource name and scheme) forwarding to Service ports of a gateway's pods."""

    resource: str
    scheme: str
    target_ports: tuple[int | str, ...]


def _serve_argv(container: Mapping[str, Any]) -> list[str] | None:
    """``container``'s ``igw serve`` arguments (after ``serve``); ``None`` if it runs something else."""
    argv = container_args(container)
    for index, token in enumerate(argv[:3]):
        if token != "serve":
            continue
        before = argv[:index]
        if any(t.rsplit("/", 1)[-1] == "igw" for t in before) or GATEWAY_IMAGE in str(
            container.get("image", "")
        ):
            return argv[index + 1 :]
    return None


def _flag(argv: Sequence[str], flag: str) -> str | None:
    for index, token in enumerate(argv):
        if token == flag and index + 1 < len(argv):
            return argv[index + 1]
        if token.startswith(f"{flag}="):
            return token.split("=", 1)[1]
    return None


def _configured_port(ctx: CheckContext, namespace: str) -> int | None:
    """``spec.extensions.management.port`` of an InferenceGatewayConfig in ``namespace`` (what a gateway
    there serves, when its file is that object's spec)."""
    configs = ctx.inventory.kube.of("InferenceGatewayConfig")
    for config in configs if isinstance(configs, list) else []:
        if namespace_of(config) != namespace:
            continue
        extensions = spec(config).get("extensions")
        management = extensions.get("management") if isinstance(extensions, Mapping) else None
        port = management.get("port") if isinstance(management, Mapping) else None
        if isinstance(port, int):
            return port
    return None


def _objects(ctx: CheckContext, kind: str) -> list[Manifest]:
    found = ctx.inventory.kube.of(kind)
    return found if isinstance(found, list) else []


def _service_targets(service: Manifest, port_filter: object = None) -> tuple[int | str, ...]:
    """The ``targetPort`` of each of ``service``'s ports (its ``port`` when unset), or of the one
    ``port_filter`` names (an Ingress backend's ``{number: N}`` or ``{name: NAME}``)."""
    targets: list[int | str] = []
    for port in spec(service).get("ports") or []:
        if not isinstance(port, Mapping):
            continue
        if isinstance(port_filter, Mapping) and not (
            port.get("port") == port_filter.get("number") or port.get("name") == port_filter.get("name")
        ):
            continue
        target = port.get("targetPort", port.get("port"))
        if isinstance(target, int | str):
            targets.append(target)
    return tuple(targets)


def _ingress_backends(ingress: Manifest) -> Iterator[Mapping[str, Any]]:
    body = spec(ingress)
    default = body.get("defaultBackend")
    if isinstance(default, Mapping) and isinstance(default.get("service"), Mapping):
        yield default["service"]
    for rule in body.get("rules") or []:
        http = rule.get("http") if isinstance(rule, Mapping) else None
        for path in (http.get("paths") or []) if isinstance(http, Mapping) else []:
            backend = path.get("backend") if isinstance(path, Mapping) else None
            if isinstance(backend, Mapping) and isinstance(backend.get("service"), Mapping):
                yield backend["service"]


def _exposures(ctx: CheckContext, workload: Manifest) -> list[Exposure]:
    """The load balancers that forward to ``workload``'s pods, with the target ports they reach."""
    namespace, labels = namespace_of(workload), template_labels(workload)
    services = [s for s in _objects(ctx, "Service") if service_selects(s, namespace, labels)]
    found: list[Exposure] = []
    for service in services:
        lb = from_service(service)
        if lb is not None:
            found.append(Exposure(lb.resource, lb.scheme, _service_targets(service)))
    by_name = {name_of(s): s for s in services}
    classes = alb_classes(ctx)
    for ingress in _objects(ctx, "Ingress"):
        lb = from_ingress(ingress, classes)
        if lb is None or namespace_of(ingress) != namespace:
            continue
        targets: list[int | str] = []
        for backend in _ingress_backends(ingress):
            backed = by_name.get(str(backend.get("name")))
            if backed is not None:
                targets.extend(_service_targets(backed, backend.get("port")))
        if targets:
            found.append(Exposure(lb.resource, lb.scheme, tuple(targets)))
    return found


def _reaches(exposure: Exposure, port: int, container: Mapping[str, Any]) -> bool:
    """``exposure`` forwards to container port ``port`` (by number, or by the container port's name)."""
    names = {
        str(p.get("name")): p.get("containerPort")
        for p in container.get("ports") or []
        if isinstance(p, Mapping) and p.get("name")
    }
    return any((names.get(t) if isinstance(t, str) else t) == port for t in exposure.target_ports)


def _grade(exposures: Sequence[Exposure]) -> tuple[Severity, str]:
    public = [e.resource for e in exposures if e.scheme == "internet-facing"]
    if public:
        return Severity.HIGH, f"the internet-facing {', '.join(public)}"
    if exposures:
        return Severity.LOW, f"the internal {', '.join(e.resource for e in exposures)}"
    return Severity.LOW, "every client of the gateway's port"


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload in workloads(ctx):
        for container in containers(workload):
            argv = _serve_argv(container)
            if argv is None:
                continue
            port_flag = _flag(argv, "--port") or str(DEFAULT_SERVING_PORT)
            serving = int(port_flag) if port_flag.isdigit() else DEFAULT_SERVING_PORT
            flag = _flag(argv, MANAGEMENT_FLAG)
            management = int(flag) if flag is not None and flag.isdigit() else None
            if management is None:
                management = _configured_port(ctx, namespace_of(workload))
            exposures = _exposures(ctx, workload)
            where = f"{ref(workload)} ({container.get('name', '?')})"
            if management is None:
                reaching = [e for e in exposures if _reaches(e, serving, container)] or exposures
                severity, who = _grade(reaching)
                yield r.fail(
                    where,
                    f"no management port: /metrics, the detailed /readyz (pod addresses, scrape errors) and "
                    f"/debug/decisions are served on port {serving} to {who}",
                    severity=severity,
                )
                continue
            leaking = [e for e in exposures if _reaches(e, management, container)]
            if leaking:
                severity, who = _grade(leaking)
                yield r.fail(where, f"management port {management} is forwarded by {who}", severity=severity)
            else:
                yield r.passed(
                    where, f"metrics and pod detail on management port {management}, behind no load balancer"
                )


CHECK = FunctionCheck(META, _run)
