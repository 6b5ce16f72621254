"""The API server's table printers for built-in kinds, for the fake's ``kubectl get`` answers.

A real API server answers ``kubectl get deploy`` with a ``Table`` whose columns its printers
(``pkg/printers/internalversion/printers.go``) define per kind: ``READY``, ``UP-TO-DATE``,
``AVAILABLE`` for Deployments, ``TYPE``, ``CLUSTER-IP``, ``PORT(S)`` for Services, ``LAST SEEN``,
``TYPE``, ``REASON``, ``OBJECT``, ``MESSAGE`` for Events (whose ``NAME`` is a ``-o wide`` column, not
the first) and so on, with the ``-o wide`` ones at priority 1, ages as ``duration.HumanDuration``.
The fake answered every built-in kind with only ``NAME`` and ``AGE``, so what a user reads in
``kubectl get`` (a gateway's ready count) could not be checked.
Modelled for the kinds the operator writes and the tests read; any other built-in kind keeps
``NAME``/``AGE``. Simplified: a Pod's ``STATUS`` is its ``status.reason`` or phase (not the
container-state walk), ``RESTARTS`` the sum without the "(5m ago)" suffix, ``READINESS GATES``
and ``NOMINATED NODE`` are ``<none>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

Column = tuple[str, str, int, str]
"""(name, type, priority, description) of a column after ``Name`` (``Age`` included where the
real printer puts it)."""

Cells = Callable[[Mapping[str, Any], str], list[Any]]
"""The cells after the name of one object, given the object and its age text."""


def human_age(timestamp: str, *, now: datetime | None = None) -> str:
    """The API server's age text (``duration.HumanDuration``: ``45s``, ``5m30s``, ``12m``, ``3h25m``,
    ``10h``, ``3d5h``, ``12d``, ``2y30d``) for an RFC 3339 timestamp (fractional seconds allowed,
    as in a ``MicroTime``); ``<unknown>`` for none, as ``translateTimestampSince`` prints a zero time.
    Two or more units below the largest are shown while that one is small (``5m30s``, not ``5m``)."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    if then.tzinfo is None:
        return "<invalid>"
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    return human_duration(seconds)


def human_duration(seconds: int) -> str:
    """apimachinery's ``duration.HumanDuration`` of a whole number of seconds."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 3 * 60:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y{rest}d" if rest else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


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


def _event(obj: Mapping[str, Any], age: str) -> list[Any]:
    """``printEvent``: the times fall back as the API server's do (no ``lastTimestamp``: the first;
    no ``firstTimestamp``: ``eventTime``), a series gives the last time and count, and an Event
    without a count (the ``events.k8s.io`` API's singletons) counts 1."""
    involved, source = _mapping(obj.get("involvedObject")), _mapping(obj.get("source"))
    first = human_age(str(obj.get("firstTimestamp") or "")) if obj.get("firstTimestamp") else None
    first = first or human_age(str(obj.get("eventTime") or ""))
    last = human_age(str(obj["lastTimestamp"])) if obj.get("lastTimestamp") else first
    count = _int(obj.get("count"))
    series = _mapping(obj.get("series"))
    if series:
        last, count = human_age(str(series.get("lastObservedTime") or "")), _int(series.get("count"))
    elif count == 0:
        count = 1
    kind, name = str(involved.get("kind") or "").lower(), str(involved.get("name") or "")
    component = str(source.get("component") or obj.get("reportingComponent") or "")
    instance = str(source.get("host") or obj.get("reportingInstance") or "")
    return [
        last,
        str(obj.get("type") or ""),
        str(obj.get("reason") or ""),
        f"{kind}/{name}" if name else kind,
        str(involved.get("fieldPath") or ""),
        f"{component}, {instance}" if instance else component,
        str(obj.get("message") or "").strip(),
        first,
        count,
        str(_mapping(obj.get("metadata")).get("name", "")),
    ]


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

_EVENT_COLUMNS: Sequence[Column] = (
    ("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
    ("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
    (
        "Reason",
        "string",
        0,
        "This should be a short, machine understandable string that gives the reason "
        "for the transition into the object's current status.",
    ),
    ("Object", "string", 0, "The object that this event is about."),
    (
        "Subobject",
        "string",
        1,
        "If referring to a piece of an object instead of an entire object, this "
        "string should contain a valid JSON/Go field access statement, such as "
        "desiredState.manifest.containers[2].",
    ),
    (
        "Source",
        "string",
        1,
        "The component reporting this event. Should be a short machine understandable string.",
    ),
    ("Message", "string", 0, "A human-readable description of the status of this operation."),
    (
        "First Seen",
        "string",
        1,
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    ),
    ("Count", "string", 1, "The number of times this event has occurred."),
    ("Name", "string", 1, "Name must be unique within a namespace."),
)
"""``eventColumnDefinitions``: no leading ``Name`` (it is the last, ``-o wide`` column)."""

NAME_IN_COLUMNS: frozenset[tuple[str, str]] = frozenset({("", "events"), ("events.k8s.io", "events")})
"""The kinds whose printer lists ``Name`` among its columns instead of first (the fake's table puts
a ``Name`` column first for the others); their cells are the whole row."""

PRINTERS: dict[tuple[str, str], tuple[Sequence[Column], Cells]] = {
    ("", "events"): (_EVENT_COLUMNS, _event),
    ("events.k8s.io", "events"): (_EVENT_COLUMNS, _event),
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
