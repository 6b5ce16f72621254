"""The API server's table printers for built-in kinds, for the fake's ``kubectl get`` answers.

A real API server answers ``kubectl get deploy`` with a ``Table`` whose columns its printers
(``pkg/printers/internalversion/printers.go``) define per kind: ``READY``, ``UP-TO-DATE``,
``AVAILABLE`` for Deployments, ``TYPE``, ``CLUSTER-IP``, ``PORT(S)`` for Services and so on, with
the ``-o wide`` ones at priority 1. The fake answered every built-in kind with only ``NAME`` and
``AGE``, so what a user reads in ``kubectl get`` (a gateway's ready count) could not be checked.
Modelled for the kinds the operator writes and the tests read; any other built-in kind keeps
``NAME``/``AGE``. Simplified: a Pod's ``STATUS`` is its ``status.reason`` or phase (not the
container-state walk), ``RESTARTS`` the sum without the "(5m ago)" suffix, ``READINESS GATES``
and ``NOMINATED NODE`` are ``<none>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Column = tuple[str, str, int, str]
"""(name, type, priority, description) of a column after ``Name`` (``Age`` included where the
real printer puts it)."""

Cells = Callable[[Mapping[str, Any], str], list[Any]]
"""The cells after the name of one object, given the object and its age text."""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _selector_text(selector: Any) -> str:
    """``metav1.LabelSelectorAsSelector(...).String()``: sorted ``k=v`` and set-based terms."""
    terms: list[tuple[str, str]] = []
    for key, value in _mapping(_mapping(selector).get("matchLabels")).items():
        terms.append((str(key), f"{key}={value}"))
    for expression in _list(_mapping(selector).get("matchExpressions")):
        key, operator = str(expression.get("key")), str(expression.get("operator"))
        values = ",".join(sorted(str(v) for v in _list(expression.get("values"))))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(operator, key)
        terms.append((key, text))
    return ",".join(text for _, text in sorted(terms))


def _containers(template_spec: Mapping[str, Any]) -> tuple[str, str]:
    containers = [_mapping(c) for c in _list(template_spec.get("containers"))]
    return ",".join(str(c.get("name", "")) for c in containers), ",".join(
        str(c.get("image", "")) for c in containers
    )


def _deployment(obj: Mapping[str, Any], age: str) -> list[Any]:
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    names, images = _containers(_mapping(_mapping(spec.get("template")).get("spec")))
    return [
        f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}",
        _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")),
        age,
        names,
        images,
        _selector_text(spec.get("selector")),
    ]


def _stateful_set(obj: Mapping[str, Any], age: str) -> list[Any]:
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    names, images = _containers(_mapping(_mapping(spec.get("template")).get("spec")))
    return [f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}", age, names, images]


def _hpa_metric(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    """One metric of ``formatHPAMetrics`` (autoscaling/v2)."""
    kind = str(spec.get("type", ""))
    source_key = kind[:1].lower() + kind[1:]
    source, current = (
        _mapping(spec.get(source_key)),
        _mapping(_mapping(status.get(source_key)).get("current")),
    )
    target = _mapping(source.get("target"))
    if kind in ("Resource", "ContainerResource"):
        name = str(source.get("name", ""))
        if target.get("averageValue") is not None:
            now = str(current["averageValue"]) if current.get("averageValue") is not None else "<unknown>"
            return f"{name}: {now}/{target['averageValue']}"
        now = (
            f"{current['averageUtilization']}%"
            if current.get("averageUtilization") is not None
            else "<unknown>"
        )
        wanted = (
            f"{target['averageUtilization']}%" if target.get("averageUtilization") is not None else "<auto>"
        )
        return f"{name}: {now}/{wanted}"
    if kind in ("Pods", "Object", "External"):
        field = "averageValue" if target.get("averageValue") is not None else "value"
        now = str(current[field]) if current.get(field) is not None else "<unknown>"
        suffix = " (avg)" if kind != "Pods" and field == "averageValue" else ""
        return f"{now}/{target.get(field)}{suffix}"
    return "<unknown type>"


def _hpa(obj: Mapping[str, Any], age: str) -> list[Any]:
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    target = _mapping(spec.get("scaleTargetRef"))
    metrics = [_mapping(m) for m in _list(spec.get("metrics"))]
    statuses = [_mapping(m) for m in _list(status.get("currentMetrics"))]
    shown = [_hpa_metric(m, statuses[i] if i < len(statuses) else {}) for i, m in enumerate(metrics)]
    text = ", ".join(shown[:2]) + (f" + {len(shown) - 2} more..." if len(shown) > 2 else "")
    minimum = spec.get("minReplicas")
    return [
        f"{target.get('kind')}/{target.get('name')}",
        text or "<none>",
        str(minimum) if isinstance(minimum, int) else "<unset>",
        _int(spec.get("maxReplicas")),
        _int(status.get("currentReplicas")),
        age,
    ]


def _pod(obj: Mapping[str, Any], age: str) -> list[Any]:
    spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
    statuses = [_mapping(s) for s in _list(status.get("containerStatuses"))]
    ready = sum(1 for s in statuses if s.get("ready") is True)
    restarts = sum(_int(s.get("restartCount")) for s in statuses)
    phase = str(status.get("reason") or status.get("phase") or "Unknown")
    return [
        f"{ready}/{len(_list(spec.get('containers')))}",
        phase,
        str(restarts),
        age,
        str(status.get("podIP") or "<none>"),
        str(spec.get("nodeName") or "<none>"),
        "<none>",
        "<none>",
    ]


def _service(obj: Mapping[str, Any], age: str) -> list[Any]:
    spec = _mapping(obj.get("spec"))
    kind = str(spec.get("type") or "ClusterIP")
    external = "<none>"
    if kind == "LoadBalancer":
        ingress = [
            _mapping(i)
            for i in _list(_mapping(_mapping(obj.get("status")).get("loadBalancer")).get("ingress"))
        ]
        found = [str(i.get("ip") or i.get("hostname")) for i in ingress if i.get("ip") or i.get("hostname")]
        external = ",".join(found) or "<pending>"
    elif kind == "ExternalName":
        external = str(spec.get("externalName") or "<none>")
    ports = []
    for port in (_mapping(p) for p in _list(spec.get("ports"))):
        node = f":{port['nodePort']}" if port.get("nodePort") else ""
        ports.append(f"{port.get('port')}{node}/{port.get('protocol') or 'TCP'}")
    selector = _mapping(spec.get("selector"))
    return [
        kind,
        str(spec.get("clusterIP") or "<none>"),
        external,
        ",".join(ports) or "<none>",
        age,
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


def _config_map(obj: Mapping[str, Any], age: str) -> list[Any]:
    return [len(_mapping(obj.get("data"))) + len(_mapping(obj.get("binaryData"))), age]


def _secret(obj: Mapping[str, Any], age: str) -> list[Any]:
    data = len(_mapping(obj.get("data"))) + len(_mapping(obj.get("stringData")))
    return [str(obj.get("type") or "Opaque"), data, age]


def _namespace(obj: Mapping[str, Any], age: str) -> list[Any]:
    return [str(_mapping(obj.get("status")).get("phase") or "Active"), age]


def _pdb(obj: Mapping[str, Any], age: str) -> list[Any]:
    spec = _mapping(obj.get("spec"))
    allowed = _int(_mapping(obj.get("status")).get("disruptionsAllowed"))
    return [str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")), allowed, age]


def _network_policy(obj: Mapping[str, Any], age: str) -> list[Any]:
    return [_selector_text(_mapping(obj.get("spec")).get("podSelector")) or "<none>", age]


def _lease(obj: Mapping[str, Any], age: str) -> list[Any]:
    return [str(_mapping(obj.get("spec")).get("holderIdentity") or ""), age]


_AGE: Column = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)
_CONTAINERS: Sequence[Column] = (
    ("Containers", "string", 1, "Names of each container in the template."),
    ("Images", "string", 1, "Images referenced by each container in the template."),
)

PRINTERS: dict[tuple[str, str], tuple[Sequence[Column], Cells]] = {
    ("apps", "deployments"): (
        (
            ("Ready", "string", 0, "Number of the pod with ready state"),
            (
                "Up-to-date",
                "string",
                0,
                "Total number of non-terminated pods targeted by this deployment that have the desired "
                "template spec.",
            ),
            (
                "Available",
                "string",
                0,
                "Total number of available pods (ready for at least minReadySeconds) targeted by this "
                "deployment.",
            ),
            _AGE,
            *_CONTAINERS,
            ("Selector", "string", 1, "Label selector for pods."),
        ),
        _deployment,
    ),
    ("apps", "statefulsets"): (
        (("Ready", "string", 0, "Number of the pod with ready state"), _AGE, *_CONTAINERS),
        _stateful_set,
    ),
    ("autoscaling", "horizontalpodautoscalers"): (
        (
            ("Reference", "string", 0, "reference to scaled resource"),
            ("Targets", "string", 0, "the metrics the autoscaler targets and their current values"),
            ("MinPods", "string", 0, "the lower limit for the number of pods"),
            ("MaxPods", "integer", 0, "the upper limit for the number of pods"),
            ("Replicas", "integer", 0, "current number of replicas of pods managed by this autoscaler"),
            _AGE,
        ),
        _hpa,
    ),
    ("", "pods"): (
        (
            ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            ("Status", "string", 0, "The aggregate status of the containers in this pod."),
            ("Restarts", "string", 0, "The number of times the containers in this pod have been restarted."),
            _AGE,
            ("IP", "string", 1, "The IP address of this pod."),
            ("Node", "string", 1, "The node this pod is scheduled on."),
            ("Nominated Node", "string", 1, "The node the pod is nominated to run on."),
            ("Readiness Gates", "string", 1, "The readiness gates of this pod."),
        ),
        _pod,
    ),
    ("", "services"): (
        (
            ("Type", "string", 0, "How the service is exposed."),
            ("Cluster-IP", "string", 0, "The IP address of the service."),
            ("External-IP", "string", 0, "The external IP addresses of the service."),
            ("Port(s)", "string", 0, "The ports the service exposes."),
            _AGE,
            (
                "Selector",
                "string",
                1,
                "Route service traffic to pods with label keys and values matching this selector.",
            ),
        ),
        _service,
    ),
    ("", "configmaps"): ((("Data", "integer", 0, "Number of data entries."), _AGE), _config_map),
    ("", "secrets"): (
        (
            ("Type", "string", 0, "The type of the secret"),
            ("Data", "integer", 0, "Number of data entries."),
            _AGE,
        ),
        _secret,
    ),
    ("", "namespaces"): ((("Status", "string", 0, "The status of the namespace"), _AGE), _namespace),
    ("policy", "poddisruptionbudgets"): (
        (
            ("Min Available", "string", 0, "The minimum number of pods that must be available."),
            ("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
            (
                "Allowed Disruptions",
                "integer",
                0,
                "Calculated number of pods that may be disrupted at this time.",
            ),
            _AGE,
        ),
        _pdb,
    ),
    ("networking.k8s.io", "networkpolicies"): (
        (("Pod-Selector", "string", 0, "Selects the pods the policy applies to."), _AGE),
        _network_policy,
    ),
    ("coordination.k8s.io", "leases"): ((("Holder", "string", 0, "The holder of the lease."), _AGE), _lease),
}
"""Columns and cells by ``(group, plural)`` of the built-in kinds modelled."""
