"""The egress rules of a gateway's NetworkPolicy towards its model servers and default backend.

The gateway proxies to and scrapes only the pods its schedulers' ``modelSelector`` select, in the
config's own namespace (discovery lists pods there only, :mod:`igw.gateway.discovery.kube`, as an
InferencePool selects pods of its own namespace), each on its scheduler's ``targetPort``; and it sends
requests naming no served model to ``spec.bbr.defaultBackend``, a Service of that namespace. Until
s42's fourth round the rule was ``to: [{namespaceSelector: {}}]`` on every one of those ports: a
gateway could open a connection to any pod of the cluster listening on 8000 (another tenant's model
server, any web app), which is what a NetworkPolicy is there to prevent. Each scheduler now gets a rule
whose ``podSelector`` is its ``modelSelector`` (``matchLabels`` and ``matchExpressions``: the same
LabelSelector the API server evaluates for discovery) in the config's namespace, on its
``targetPort`` only. The default backend's pods are opened by the Service resolution
(:mod:`igw.operator.service_ports`, to the pods its Service selects); where that did not resolve
them, its port is opened to the pods of the config's namespace (where the Service's pods are).
Whoever relied on the broad rule (hand-managed Endpoints to pods elsewhere) adds it back with
``networkPolicy.extraEgress`` (``igw operator --gateway-extra-egress``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

DEFAULT_TARGET_PORT: Final = 8000
"""A scheduler's ``targetPort`` and the default backend's ``port`` when the config sets none."""
DEFAULT_BACKEND_SOURCE: Final = "spec.bbr.defaultBackend"
"""The field :class:`igw.operator.service_ports.ServiceRef` names for the default backend."""
_NAMESPACE_LABEL: Final = "kubernetes.io/metadata.name"


def pod_selector(model_selector: Mapping[str, Any]) -> dict[str, Any]:
    """``model_selector`` (a config's LabelSelector) as a NetworkPolicy ``podSelector``: its
    ``matchLabels`` and its ``matchExpressions`` (``values`` only where the operator takes some),
    nothing else, so that the API server selects exactly the pods discovery finds."""
    selector: dict[str, Any] = {}
    labels = model_selector.get("matchLabels") or {}
    if labels:
        selector["matchLabels"] = {str(key): str(value) for key, value in sorted(labels.items())}
    expressions = []
    for expression in model_selector.get("matchExpressions") or []:
        requirement: dict[str, Any] = {"key": str(expression["key"]), "operator": str(expression["operator"])}
        if expression.get("values"):
            requirement["values"] = [str(value) for value in expression["values"]]
        expressions.append(requirement)
    if expressions:
        selector["matchExpressions"] = expressions
    return selector


def _namespace_peer(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {_NAMESPACE_LABEL: namespace}}}


def _tcp(ports: set[int]) -> list[dict[str, Any]]:
    return [{"port": port, "protocol": "TCP"} for port in sorted(ports)]


def model_server_rules(
    spec: Mapping[str, Any], namespace: str, *, backend_opened: bool = False
) -> list[dict[str, Any]]:
    """The egress rules to ``spec``'s model servers: per ``modelSelector``, the pods it selects in
    ``namespace`` (the config's) on the ``targetPort`` of the schedulers using it; and, unless
    ``backend_opened`` (the Service resolution opened the pods behind ``spec.bbr.defaultBackend``),
    the default backend's port to the pods of ``namespace``."""
    by_selector: dict[str, tuple[dict[str, Any], set[int]]] = {}
    for scheduler in spec.get("schedulers") or []:
        selector = pod_selector(scheduler.get("modelSelector") or {})
        key = json.dumps(selector, sort_keys=True)
        by_selector.setdefault(key, (selector, set()))[1].add(
            int(scheduler.get("targetPort", DEFAULT_TARGET_PORT))
        )
    rules = [
        {"to": [{**_namespace_peer(namespace), "podSelector": selector}], "ports": _tcp(ports)}
        for selector, ports in by_selector.values()
    ]
    backend = (spec.get("bbr") or {}).get("defaultBackend")
    if isinstance(backend, Mapping) and backend.get("name") and not backend_opened:
        port = int(backend.get("port", DEFAULT_TARGET_PORT))
        rules.append({"to": [_namespace_peer(namespace)], "ports": _tcp({port})})
    return rules
