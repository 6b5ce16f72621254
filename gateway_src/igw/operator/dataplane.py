"""The data plane of one InferenceGatewayConfig, as the Kubernetes objects the operator applies.

Pure functions of the object and the operator's settings: a ConfigMap holding the admitted spec
(the operator writes it only after admission), a Deployment of ``igw serve`` pods that watch that
ConfigMap and hot-reload it (``--config-map``, see :mod:`igw.gateway.config_sync`), a Service
(an internal NLB through the AWS Load Balancer Controller unless the object says otherwise, with
the ACM certificate of ``spec.tls`` on a TLS listener), a ServiceAccount with a Role that only reads
pods and ConfigMaps in the object's namespace, a PodDisruptionBudget, a NetworkPolicy and, with
``spec.extensions.dataPlane.autoscaling`` bounds, a HorizontalPodAutoscaler. Every
object carries a controller owner reference to the InferenceGatewayConfig, so deleting the object
lets the garbage collector remove its data plane (model deployments are not owned and keep running).

The pods serve inference on :data:`GATEWAY_PORT` (the Service's only port) and ``/metrics``, the
detailed ``/readyz`` and the decision debug API on a management port of their own
(:func:`management_port`, see :mod:`igw.gateway.management`), which Prometheus finds through the
pods' ``prometheus.io/*`` annotations and the NetworkPolicy opens to pods of the cluster only. The
NetworkPolicy admits inference clients on the gateway port from the source CIDRs the operator is given
(:attr:`DataPlaneSettings.ingress_cidrs`, the chart's ``networkPolicy.ingressCidrs``), and none is made
when the operator runs without one (``networkPolicy.enabled: false``), as in the chart's gateway mode.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from igw.config.model import API_GROUP, API_VERSION, KIND
from igw.config.restart_only import restart_digest
from igw.config.rules import OPERATOR_SERVING_PORT
from igw.gateway.emf_sink import ENDPOINT_ENV as EMF_ENDPOINT_ENV
from igw.gateway.emf_sink import AgentEndpoint
from igw.gateway.tracing_options import ENDPOINT_ENV as OTLP_ENDPOINT_ENVS
from igw.gateway.worker_count import AUTO, CPU_REQUEST_ENV
from igw.gateway.worker_heartbeat import STUCK_AFTER_S
from igw.gateway.workers import WORKER_ENV
from igw.operator.model_egress import DEFAULT_BACKEND_SOURCE, model_server_rules
from igw.operator.placement import OFF_HYPERPOD_NODES, rolling_update, spread_constraints
from igw.operator.service_ports import ServiceEgress, egress_rules
from igw.operator.shutdown_timing import shutdown_timing

CONFIG_KEY: Final = "config.yaml"
CONFIG_DIR: Final = "/var/run/igw"
GATEWAY_PORT: Final = OPERATOR_SERVING_PORT
"""The inference port of every gateway pod (the only port the load balancer reaches)."""
MANAGEMENT_PORT: Final = 9090
"""The gateway pods' management listener (``/metrics``, detailed ``/readyz``, ``/debug/decisions``)
unless ``spec.extensions.management.port`` names another; reachable from pods in the cluster only."""
MANAGEMENT_PORT_NAME: Final = "metrics"
CONTAINER_NAME: Final = "gateway"
"""The gateway pods' one container (the downward API's ``resourceFieldRef`` names it)."""
CONFIG_LABEL: Final = f"{API_GROUP}/config"
RESTART_CONFIG_ANNOTATION: Final = f"{API_GROUP}/restart-config"
"""Pod-template annotation: the digest of the configuration ``igw serve`` reads only at start
(:func:`igw.config.restart_only.restart_digest`); a change of it rolls the gateway pods."""
MANAGED_BY: Final = "igw-operator"
TLS_POLICY: Final = "ELBSecurityPolicy-TLS13-1-2-2021-06"
DEFAULT_REPLICAS: Final = 2
HPA_API_VERSION: Final = "autoscaling/v2"
HPA_KIND: Final = "HorizontalPodAutoscaler"
NETWORK_POLICY_API_VERSION: Final = "networking.k8s.io/v1"
NETWORK_POLICY_KIND: Final = "NetworkPolicy"
DEFAULT_TARGET_CPU_PERCENT: Final = 70
"""``dataPlane.autoscaling.targetCPUUtilizationPercentage`` when not set (the CPU request's share)."""
SCALE_DOWN_WINDOW_S: Final = 300
"""The HPA's scale-down stabilisation: a gateway replica removed ends its streams (the shutdown
grace), so the count does not follow every dip of the load."""
REDIS_PORT: Final = 6379
HTTPS_PORT: Final = 443
NAME_SUFFIX: Final = "-gateway"
MAX_SERVICE_NAME: Final = 63
MAX_LABEL_VALUE: Final = 63
DIGEST_CHARS: Final = 8
_SERVICE_NAME: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


DEFAULT_HTTPS_EGRESS_CIDRS: Final = ("0.0.0.0/0", "::/0")
"""Where the gateway pods may reach HTTPS by default: anywhere, in both address families, so the
pods of an IPv6 cluster reach its API server (until session s40 IPv4 only: ``0.0.0.0/0``)."""

DEFAULT_INGRESS_CIDRS: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::/0")
"""Sources admitted on the gateway port by default: the private IPv4 ranges (the load balancer's
addresses with IP targets, pods of the VPC) and any IPv6 source (an IPv6 cluster's pods and load
balancers have addresses of the VPC's global block) - the chart's ``networkPolicy.ingressCidrs``
default. Before session s41 the operator's NetworkPolicy admitted every source on that port."""


@dataclass(frozen=True, slots=True)
class DataPlaneSettings:
    """What the operator puts into every data plane (from its command line / chart values)."""

    image: str = "public.ecr.aws/igw/inference-gateway:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    run_as_user: int = 10001
    """The image's non-root user (``gateway_src/Dockerfile``)."""
    https_egress_cidrs: tuple[str, ...] = DEFAULT_HTTPS_EGRESS_CIDRS
    """Destinations of the gateway pods' HTTPS egress (API server, JWKS, AWS APIs; ``igw operator
    --gateway-https-egress-cidr``, the chart's ``networkPolicy.httpsEgressCidrs``)."""
    network_policy: bool = True
    """Whether each data plane gets a NetworkPolicy (``igw operator --no-gateway-network-policy``, the
    chart's ``networkPolicy.enabled: false``): without one the operator deletes the one it made."""
    ingress_cidrs: tuple[str, ...] = DEFAULT_INGRESS_CIDRS
    """Sources admitted on the gateway port (clients, the load balancer; ``igw operator
    --gateway-ingress-cidr``, the chart's ``networkPolicy.ingressCidrs``)."""
    dns_cidrs: tuple[str, ...] = ()
    """Resolvers the pods reach on port 53 besides the kube-dns pods (``igw operator
    --gateway-dns-cidr``, the chart's ``networkPolicy.dnsCidrs``): a NodeLocal DNSCache on a
    link-local address (169.254.20.10/32 on EKS). Its pods run on the host network, which no pod
    selector matches, so without this an enforcing CNI dropped every lookup."""
    extra_egress: tuple[Mapping[str, Any], ...] = ()
    """NetworkPolicy egress rules added to every gateway's, after those derived from its config
    (``igw operator --gateway-extra-egress``, the chart's ``networkPolicy.extraEgress``; checked by
    :func:`igw.operator.egress_rules.parse_egress_rule`): destinations of the cluster rather than of a
    config, such as a NodeLocal DNSCache or an HTTPS proxy."""
    resources: Mapping[str, Any] = field(
        default_factory=lambda: {
            "requests": {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "256Mi"},
        }
    )
    """Gateway container requests/limits unless ``spec.podDefaults.resources`` sets them (the
    chart's gateway-mode defaults)."""
    termination_grace_s: int = 60
    """Seconds a terminating gateway pod gets (the chart's gateway-mode default)."""
    pre_stop_s: int = 15
    """preStop sleep: the pod keeps serving while the load balancer deregisters it."""
    workers: int | str = AUTO
    """``igw serve --workers`` of every gateway pod: a number, or ``auto`` (one per core of the pod's
    CPU request, which the pod learns from the downward API; see :mod:`igw.gateway.worker_count`)."""
    worker_timeout_s: float = STUCK_AFTER_S
    """``igw serve --worker-timeout`` of every gateway pod that runs more than one worker: seconds a
    worker's event loop may stay silent before the pod's parent kills it (0: off)."""
    emf_interval_s: int = 0
    """``igw serve --emf-interval`` of every gateway pod (0: no CloudWatch EMF documents)."""
    emf_endpoint: AgentEndpoint | None = None
    """With an interval: the CloudWatch agent's EMF listener the pods send to (``--emf-endpoint``,
    and NetworkPolicy egress to its port); ``None`` writes the documents to stdout."""
    otlp_endpoint: str = ""
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` of every gateway pod (switches tracing on; NetworkPolicy egress
    to its port); empty: no traces."""
    extra_env: tuple[tuple[str, str], ...] = ()
    """Variables (name, value) of every gateway pod (``--gateway-env``, the chart's
    ``operator.gatewayEnv``): the tracing settings (``OTEL_BSP_*``, ``OTEL_TRACES_SAMPLER*``,
    ``OTEL_SERVICE_NAME``, ...) that gateway mode sets through ``gateway.extraEnv``. A config's
    ``spec.podDefaults.env`` entry of the same name replaces one of these in its own pods. Before session
    s40 nothing set them fleet-wide: every config had to repeat them in ``podDefaults.env``."""

    def __post_init__(self) -> None:
        problem = gateway_env_problem(self.extra_env)
        if problem is not None:
            raise ValueError(problem)
        if not self.ingress_cidrs:
            # A NetworkPolicy rule with no source admits every source: the opposite of a short list.
            raise ValueError(
                "ingress_cidrs: at least one source CIDR (an empty list would admit every source)"
            )

    def worker_args(self) -> list[str]:
        """``igw serve --workers`` and ``--worker-timeout`` when not the single process it starts by
        default (the timeout is a worker group's check)."""
        if self.workers == AUTO or (isinstance(self.workers, int) and self.workers > 1):
            return ["--workers", str(self.workers), "--worker-timeout", repr(float(self.worker_timeout_s))]
        return []

    def worker_env(self) -> list[dict[str, Any]]:
        """With ``auto``: the container's CPU request in millicores, where ``auto`` reads it."""
        if self.workers != AUTO:
            return []
        request = {"containerName": CONTAINER_NAME, "resource": "requests.cpu", "divisor": "1m"}
        return [{"name": CPU_REQUEST_ENV, "valueFrom": {"resourceFieldRef": request}}]

    def observability_args(self) -> list[str]:
        """``igw serve`` options sending CloudWatch EMF documents, when an interval is set."""
        if self.emf_interval_s <= 0:
            return []
        endpoint = [] if self.emf_endpoint is None else ["--emf-endpoint", str(self.emf_endpoint)]
        return ["--emf-interval", str(self.emf_interval_s), *endpoint]

    def observability_egress(self) -> list[dict[str, Any]]:
        """NetworkPolicy egress rules for the EMF listener and the OTLP collector, where configured."""
        rules: list[dict[str, Any]] = []
        if self.emf_interval_s > 0 and self.emf_endpoint is not None:
            port = {"port": self.emf_endpoint.port, "protocol": self.emf_endpoint.protocol.upper()}
            rules.append({"ports": [port]})
        if self.otlp_endpoint:
            otlp = urlsplit(self.otlp_endpoint)
            port_number = otlp.port or (443 if otlp.scheme == "https" else 80)
            rules.append({"ports": [{"port": port_number, "protocol": "TCP"}]})
        return rules


TRACES_ENDPOINT_ENV, OTLP_ENDPOINT_ENV = OTLP_ENDPOINT_ENVS
RESERVED_ENV: Final = {
    CPU_REQUEST_ENV: "the operator (--gateway-workers auto)",
    OTLP_ENDPOINT_ENV: "--gateway-otlp-endpoint (which also opens the NetworkPolicy to its port)",
    TRACES_ENDPOINT_ENV: (
        "--gateway-otlp-endpoint (which also opens the NetworkPolicy to its port; this one would win over it)"
    ),
    EMF_ENDPOINT_ENV: "--gateway-emf-endpoint (which also opens the NetworkPolicy to its port)",
    WORKER_ENV: "igw serve itself (the role it gives each worker it starts)",
}
"""Variables :attr:`DataPlaneSettings.extra_env` may not set, and what sets each instead. Before
session s41 only the first two were refused: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` silently won
over ``--gateway-otlp-endpoint`` (the pods exported to a port the NetworkPolicy kept closed),
``AWS_EMF_AGENT_ENDPOINT`` sent EMF documents past it the same way, and ``IGW_WORKER`` made every
pod's first process take itself for a worker."""
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def gateway_env_problem(env: tuple[tuple[str, str], ...]) -> str | None:
    """Why ``env`` cannot be the gateway pods' extra variables (a name that is not a variable name,
    given twice, or one the operator sets itself: a pod's ``env`` is a list keyed by name, and the
    second entry of a name is refused by server-side apply), or ``None``."""
    seen: set[str] = set()
    for name, _ in env:
        if not _ENV_NAME.fullmatch(name):
            return f"--gateway-env {name!r}: not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
        if name in RESERVED_ENV:
            return f"--gateway-env {name}: set by {RESERVED_ENV[name]}, not here"
        if name in seen:
            return f"--gateway-env {name}: given more than once"
        seen.add(name)
    return None


def _digest(igwc_name: str) -> str:
    return hashlib.sha256(igwc_name.encode()).hexdigest()[:DIGEST_CHARS]


def base_name(igwc_name: str) -> str:
    """Name shared by the data-plane objects of the InferenceGatewayConfig ``igwc_name``.

    ``<name>-gateway`` when that is a valid Service name (an RFC 1035 label: at most 63 characters,
    lower-case letters, digits and ``-``, starting with a letter). An InferenceGatewayConfig's own
    name may be a 253-character DNS subdomain with dots or a leading digit, which the API server
    refuses for a Service: such names are shortened to ``<stem>-<digest>-gateway``, the digest of
    the full name keeping two long names that share a prefix apart.
    """
    plain = f"{igwc_name}{NAME_SUFFIX}"
    if len(plain) <= MAX_SERVICE_NAME and _SERVICE_NAME.fullmatch(plain):
        return plain
    stem = re.sub(r"[^a-z0-9-]", "-", igwc_name)
    if not stem[:1].isalpha():
        stem = f"gw-{stem}"
    room = MAX_SERVICE_NAME - len(NAME_SUFFIX) - DIGEST_CHARS - 1
    return f"{stem[:room].rstrip('-')}-{_digest(igwc_name)}{NAME_SUFFIX}"


def label_value(igwc_name: str) -> str:
    """``igwc_name`` as a label value: itself up to 63 characters, else shortened with its digest
    (label values are limited to 63 characters; a DNS-subdomain name has only valid characters)."""
    if len(igwc_name) <= MAX_LABEL_VALUE:
        return igwc_name
    room = MAX_LABEL_VALUE - DIGEST_CHARS - 1
    return f"{igwc_name[:room].rstrip('.-')}-{_digest(igwc_name)}"


def selector_labels(igwc_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "inference-gateway",
        "app.kubernetes.io/instance": label_value(igwc_name),
    }


def _labels(igwc_name: str) -> dict[str, str]:
    return {
        **selector_labels(igwc_name),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        CONFIG_LABEL: label_value(igwc_name),
    }


def owner_reference(igwc: Mapping[str, Any]) -> dict[str, Any]:
    meta = igwc["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def served_document(igwc: Mapping[str, Any]) -> dict[str, Any]:
    """The document the gateway serves: the object's identity and spec, nothing cluster-owned (a spec
    that is not an object stays as it is, for validation to name its type)."""
    meta = igwc["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": dict(spec) if isinstance(spec := igwc.get("spec") or {}, Mapping) else spec,
    }


def gateway_replicas(spec: Mapping[str, Any]) -> int:
    """The gateway serves every scheduler, so it runs as many replicas as the largest asks for."""
    schedulers = spec.get("schedulers") or []
    return max((int(s.get("replicas", DEFAULT_REPLICAS)) for s in schedulers), default=DEFAULT_REPLICAS)


def _data_plane_extension(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return (spec.get("extensions") or {}).get("dataPlane") or {}


def autoscaling(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec.extensions.dataPlane.autoscaling`` (admitted: bounds, or ``external: true`` alone), or
    ``None`` when the replicas are the schedulers' (:func:`gateway_replicas`)."""
    found = _data_plane_extension(spec).get("autoscaling")
    return found if isinstance(found, Mapping) else None


def initial_only_fields(obj: Mapping[str, Any], igwc: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``spec`` fields of the data-plane object ``obj`` the operator writes when it creates the
    object and never again: a Deployment's ``replicas`` while an autoscaler owns the count
    (``dataPlane.autoscaling``), so the operator's passes neither compare nor reset what the
    autoscaler set, and the two never undo each other's work (before, every resync put the
    schedulers' count back, and an autoscaler attached to the Deployment fought it)."""
    if obj.get("kind") == "Deployment" and autoscaling(igwc.get("spec") or {}) is not None:
        return ("replicas",)
    return ()


def horizontal_autoscaler(igwc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The gateway Deployment's HorizontalPodAutoscaler (``autoscaling/v2``, on CPU use relative to
    the container's request) when ``dataPlane.autoscaling`` gives bounds; ``None`` without
    autoscaling and with ``external: true`` (another autoscaler's)."""
    scaling = autoscaling(igwc.get("spec") or {})
    if scaling is None or scaling.get("external") is True:
        return None
    name = base_name(igwc["metadata"]["name"])
    target = int(scaling.get("targetCPUUtilizationPercentage", DEFAULT_TARGET_CPU_PERCENT))
    utilization = {"type": "Utilization", "averageUtilization": target}
    return {
        "apiVersion": HPA_API_VERSION,
        "kind": HPA_KIND,
        "metadata": _metadata(igwc, name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": int(scaling["minReplicas"]),
            "maxReplicas": int(scaling["maxReplicas"]),
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": utilization}}],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S}},
        },
    }


def management_port(spec: Mapping[str, Any]) -> int:
    """The gateway pods' management port: ``spec.extensions.management.port``, else
    :data:`MANAGEMENT_PORT` (the operator never runs a gateway whose metrics share the inference port)."""
    management = (spec.get("extensions") or {}).get("management") or {}
    return int(management.get("port") or MANAGEMENT_PORT)


def scrape_annotations(spec: Mapping[str, Any]) -> dict[str, str]:
    """The ``prometheus.io/*`` pod annotations that point a Prometheus using the common
    ``kubernetes-pods`` scrape job at the management port (``spec.podDefaults.annotations`` win)."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(management_port(spec)),
        "prometheus.io/path": "/metrics",
    }


def _metadata(igwc: Mapping[str, Any], name: str) -> dict[str, Any]:
    meta = igwc["metadata"]
    return {
        "name": name,
        "namespace": meta["namespace"],
        "labels": _labels(meta["name"]),
        "ownerReferences": [owner_reference(igwc)],
    }


def config_map(igwc: Mapping[str, Any]) -> dict[str, Any]:
    name = base_name(igwc["metadata"]["name"])
    text = yaml.safe_dump(served_document(igwc), sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(igwc, f"{name}-config"),
        "data": {CONFIG_KEY: text},
    }


def service_account(igwc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(igwc, base_name(igwc["metadata"]["name"])),
        "automountServiceAccountToken": True,
    }


def role(igwc: Mapping[str, Any]) -> dict[str, Any]:
    """Pod discovery and LoRA / EndpointPickerConfig ConfigMaps, read-only, this namespace only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(igwc, base_name(igwc["metadata"]["name"])),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        ],
    }


def role_binding(igwc: Mapping[str, Any]) -> dict[str, Any]:
    name = base_name(igwc["metadata"]["name"])
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(igwc, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": igwc["metadata"]["namespace"]}],
    }


def _pod_spec(igwc: Mapping[str, Any], settings: DataPlaneSettings) -> dict[str, Any]:
    spec = igwc.get("spec") or {}
    defaults = spec.get("podDefaults") or {}
    name = base_name(igwc["metadata"]["name"])
    timing = shutdown_timing(
        spec, termination_grace_s=settings.termination_grace_s, pre_stop_s=settings.pre_stop_s
    )
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": [
            "serve",
            "--config",
            f"{CONFIG_DIR}/{CONFIG_KEY}",
            "--config-map",
            f"{igwc['metadata']['namespace']}/{name}-config/{CONFIG_KEY}",
            "--in-cluster",
            "--port",
            str(GATEWAY_PORT),
            "--management-port",
            str(management_port(spec)),
            *timing.serve_args(),
            *settings.worker_args(),
            *settings.observability_args(),
        ],
        "ports": [
            {"name": "http", "containerPort": GATEWAY_PORT, "protocol": "TCP"},
            {"name": MANAGEMENT_PORT_NAME, "containerPort": management_port(spec), "protocol": "TCP"},
        ],
        # Readiness on the inference port (its /readyz answers 200/503 without detail): what the load
        # balancer checks, and a listener that stopped accepting takes the pod out. Liveness on the
        # management port: clients filling the inference port's connection limit must not get the
        # pod restarted.
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": MANAGEMENT_PORT_NAME}, "periodSeconds": 10},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR}],
        # Keep serving while the load balancer deregisters the pod, then drain in-flight streams.
        "lifecycle": {"preStop": {"sleep": {"seconds": settings.pre_stop_s}}},
    }
    container["resources"] = dict(defaults.get("resources") or settings.resources)
    for key in ("env", "envFrom"):
        if defaults.get(key):
            container[key] = defaults[key]
    own = settings.worker_env()
    if settings.otlp_endpoint:
        own.append({"name": OTLP_ENDPOINT_ENV, "value": settings.otlp_endpoint})
    pinned = {str(entry.get("name")) for entry in defaults.get("env") or [] if isinstance(entry, Mapping)}
    own.extend({"name": n, "value": v} for n, v in settings.extra_env if n not in pinned)
    if own:  # before podDefaults.env: a later entry of the same name wins
        container["env"] = [*own, *(defaults.get("env") or [])]
    pod: dict[str, Any] = {
        "serviceAccountName": name,
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": settings.run_as_user,
            "runAsGroup": settings.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationGracePeriodSeconds": timing.termination_grace_s,
        "containers": [container],
        "volumes": [{"name": "config", "emptyDir": {"sizeLimit": "1Mi"}}],
    }
    for key in ("nodeSelector", "tolerations"):
        if defaults.get(key):
            pod[key] = defaults[key]
    pod["affinity"] = defaults.get("affinity") or copy.deepcopy(dict(OFF_HYPERPOD_NODES))
    pod["topologySpreadConstraints"] = spread_constraints(selector_labels(igwc["metadata"]["name"]))
    return pod


def deployment(igwc: Mapping[str, Any], settings: DataPlaneSettings) -> dict[str, Any]:
    """``igw serve`` pods; a rolling update never drops below the desired count, unless the pods'
    ``spec.podDefaults.affinity`` requires them apart (:func:`~igw.operator.placement.rolling_update`)."""
    spec = igwc.get("spec") or {}
    igwc_name = igwc["metadata"]["name"]
    defaults = spec.get("podDefaults") or {}
    template_meta: dict[str, Any] = {
        "labels": {**dict(defaults.get("labels") or {}), **_labels(igwc_name)},
        "annotations": {**scrape_annotations(spec), **dict(defaults.get("annotations") or {})},
    }
    digest = restart_digest(spec.get("extensions"))
    if digest is not None:
        # The configuration igw serve reads only at start: a change rolls the pods (a hot reload
        # would keep the old values while the status says Programmed).
        template_meta["annotations"][RESTART_CONFIG_ANNOTATION] = digest
    pod_spec = _pod_spec(igwc, settings)
    rollout = rolling_update(pod_spec, template_meta["labels"], igwc["metadata"].get("namespace", ""))
    deployment_spec: dict[str, Any] = {
        "replicas": gateway_replicas(spec),
        "selector": {"matchLabels": selector_labels(igwc_name)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": rollout},
        "template": {"metadata": template_meta, "spec": pod_spec},
    }
    scaling = autoscaling(spec)
    if scaling is not None and scaling.get("external") is not True:
        # The HPA's floor from the start, not the schedulers' count it would soon undo; the count is
        # written at creation only (:func:`initial_only_fields`).
        deployment_spec["replicas"] = int(scaling.get("minReplicas", deployment_spec["replicas"]))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(igwc, base_name(igwc_name)),
        "spec": deployment_spec,
    }


def service(igwc: Mapping[str, Any], *, issued_acm_arn: str | None = None) -> dict[str, Any]:
    """The client endpoint: internal NLB (IP targets) by default; TLS on 443 with ``spec.tls.acmArn``
    or, for ``tls: {}``, with ``issued_acm_arn`` (the auto-issued certificate, :mod:`igw.operator.tls`)."""
    spec = igwc.get("spec") or {}
    extension = _data_plane_extension(spec)
    service_type = str(extension.get("serviceType", "LoadBalancer"))
    acm_arn = str((spec.get("tls") or {}).get("acmArn") or issued_acm_arn or "")
    port_name = "https" if acm_arn else "http"
    annotations: dict[str, str] = {}
    service_spec: dict[str, Any] = {
        "type": service_type,
        "selector": selector_labels(igwc["metadata"]["name"]),
        "ports": [
            {"name": port_name, "port": 443 if acm_arn else 80, "targetPort": "http", "protocol": "TCP"}
        ],
    }
    if service_type == "LoadBalancer":
        prefix = "service.beta.kubernetes.io/aws-load-balancer"
        annotations |= {
            f"{prefix}-type": "external",
            f"{prefix}-nlb-target-type": "ip",
            f"{prefix}-scheme": str(extension.get("scheme", "internal")),
            f"{prefix}-healthcheck-protocol": "HTTP",
            f"{prefix}-healthcheck-path": "/readyz",
        }
        if acm_arn:
            annotations |= {
                f"{prefix}-ssl-cert": acm_arn,
                f"{prefix}-ssl-ports": port_name,
                f"{prefix}-ssl-negotiation-policy": TLS_POLICY,
                f"{prefix}-backend-protocol": "tcp",
            }
        service_spec["loadBalancerClass"] = "service.k8s.aws/nlb"
    metadata = _metadata(igwc, base_name(igwc["metadata"]["name"]))
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": service_spec}


def disruption_budget(igwc: Mapping[str, Any]) -> dict[str, Any]:
    igwc_name = igwc["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(igwc, base_name(igwc_name)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(igwc_name)}},
    }


def _redis_ports(spec: Mapping[str, Any]) -> list[int]:
    """The Redis ports the gateway connects to: shared rate limits' (``spec.extensions.rateLimits``
    with the redis backend) and the global router's heartbeat store's (``globalHeartbeat``), each at
    its URL's port or Redis's default. Before the heartbeat store's was opened too, a NetworkPolicy
    enforced by the VPC CNI blocked every heartbeat of the gateways the operator runs, so the global
    routers never saw their cluster (an ElastiCache store on another port than the rate limits')."""
    extensions = spec.get("extensions") or {}
    urls: list[object] = []
    limits = extensions.get("rateLimits") or {}
    if limits.get("backend") == "redis":
        urls.append((limits.get("redis") or {}).get("url"))
    heartbeat = extensions.get("globalHeartbeat")
    if isinstance(heartbeat, Mapping):
        urls.append((heartbeat.get("redis") or {}).get("url"))
    ports: set[int] = set()
    for url in urls:
        parts = urlsplit(str(url or "redis://127.0.0.1:6379/0"))
        if parts.scheme == "unix":
            continue
        try:
            ports.add(parts.port or REDIS_PORT)
        except ValueError:
            ports.add(REDIS_PORT)
    return sorted(ports)


def _url_port(url: object, default: int) -> int | None:
    """The port ``url`` names, ``default`` when it names none, ``None`` when it is not a URL with one."""
    try:
        return urlsplit(str(url)).port or default
    except ValueError:
        return None


def _https_ports(spec: Mapping[str, Any]) -> list[int]:
    """The HTTPS ports the gateway fetches keys from: 443, the port of ``spec.auth.jwt.provider``'s
    ``remoteJWKS.uri`` and, with ``extensions.authorization.oidcDiscovery``, of its ``issuer`` (the
    discovery document). Before these were opened, a JWKS served on another port (an in-cluster
    Keycloak on 8443, say) was blocked by the NetworkPolicy of every gateway the operator runs: every
    token was refused (no keys), and the chart's ``extraEgress`` that gateway mode has for it was
    refused in operator mode."""
    ports = {HTTPS_PORT}
    provider = ((spec.get("auth") or {}).get("jwt") or {}).get("provider")
    if isinstance(provider, Mapping):
        urls = [(provider.get("remoteJWKS") or {}).get("uri")]
        authorization = (spec.get("extensions") or {}).get("authorization") or {}
        if isinstance(authorization, Mapping) and authorization.get("oidcDiscovery") is True:
            urls.append(provider.get("issuer"))
        ports.update(port for url in urls if url and (port := _url_port(url, HTTPS_PORT)) is not None)
    return sorted(ports)


def network_policy(
    igwc: Mapping[str, Any], settings: DataPlaneSettings, service_egress: ServiceEgress | None = None
) -> dict[str, Any]:
    """Clients from :attr:`DataPlaneSettings.ingress_cidrs` in on the gateway port, pods of the cluster
    (Prometheus, ``igw top``) on the management port; out only to DNS (the kube-dns pods and
    :attr:`DataPlaneSettings.dns_cidrs`), the model servers (the pods each scheduler's ``modelSelector``
    selects in the config's namespace, on its ``targetPort``) and the default backend
    (:func:`igw.operator.model_egress.model_server_rules`), HTTPS (API server, JWKS and OIDC discovery
    on their URLs' ports, :func:`_https_ports`), the Redis ports of shared rate limits and of the global
    heartbeat store (:func:`_redis_ports`), the CloudWatch agent's / OTLP collector's ports when
    the operator's settings send there, the pod ports behind the config's in-cluster Services, to the
    pods each Service selects (``service_egress``, :mod:`igw.operator.service_ports`: a
    NetworkPolicy sees the pod's port after the Service's DNAT), and the operator's extra rules
    (:attr:`DataPlaneSettings.extra_egress`)."""
    spec = igwc.get("spec") or {}
    igwc_name = igwc["metadata"]["name"]
    namespace = str(igwc["metadata"]["namespace"])
    backend_opened = service_egress is not None and DEFAULT_BACKEND_SOURCE in service_egress.opened_sources
    model_rules = model_server_rules(spec, namespace, backend_opened=backend_opened)
    extra: list[dict[str, Any]] = []
    redis_ports = _redis_ports(spec)
    if redis_ports:
        extra.append({"ports": [{"port": port, "protocol": "TCP"} for port in redis_ports]})
    extra.extend(settings.observability_egress())
    if service_egress is not None:
        extra.extend(egress_rules(service_egress))
    extra.extend(copy.deepcopy(dict(rule)) for rule in settings.extra_egress)
    return {
        "apiVersion": NETWORK_POLICY_API_VERSION,
        "kind": NETWORK_POLICY_KIND,
        "metadata": _metadata(igwc, base_name(igwc_name)),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(igwc_name)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": cidr}} for cidr in settings.ingress_cidrs],
                    "ports": [{"port": GATEWAY_PORT, "protocol": "TCP"}],
                },
                {
                    "from": [{"namespaceSelector": {}}],
                    "ports": [{"port": management_port(spec), "protocol": "TCP"}],
                },
            ],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        },
                        *({"ipBlock": {"cidr": cidr}} for cidr in settings.dns_cidrs),
                    ],
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
                },
                *model_rules,
                {
                    "to": [{"ipBlock": {"cidr": cidr}} for cidr in settings.https_egress_cidrs],
                    "ports": [{"port": port, "protocol": "TCP"} for port in _https_ports(spec)],
                },
                *extra,
            ],
        },
    }


def desired_objects(
    igwc: Mapping[str, Any],
    settings: DataPlaneSettings,
    *,
    issued_acm_arn: str | None = None,
    service_egress: ServiceEgress | None = None,
) -> list[dict[str, Any]]:
    """Every data-plane object, in apply order (configuration and identity before the pods);
    ``service_egress``: the pod ports behind the config's in-cluster Services (its NetworkPolicy).

    For ``spec.tls: {}`` the Service waits for the auto-issued certificate (``issued_acm_arn``): a
    client endpoint that asked for TLS is never opened in plain HTTP meanwhile."""
    spec = igwc.get("spec") or {}
    tls = spec.get("tls")
    waits_for_certificate = isinstance(tls, Mapping) and not tls.get("acmArn") and not issued_acm_arn
    scaler = horizontal_autoscaler(igwc)
    return [
        config_map(igwc),
        service_account(igwc),
        role(igwc),
        role_binding(igwc),
        deployment(igwc, settings),
        *([] if scaler is None else [scaler]),
        *([] if waits_for_certificate else [service(igwc, issued_acm_arn=issued_acm_arn)]),
        disruption_budget(igwc),
        *([network_policy(igwc, settings, service_egress)] if settings.network_policy else []),
    ]


def object_metadata(igwc: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Name, namespace, the data plane's labels and the controller owner reference to ``igwc``."""
    return _metadata(igwc, name)
