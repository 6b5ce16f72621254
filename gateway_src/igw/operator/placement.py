"""Where the gateway pods the operator runs are scheduled: spread over nodes and zones, and off the
HyperPod GPU nodes when there is room elsewhere.

Why defaults: an InferenceGatewayConfig's ``podDefaults`` (AWS's shape) has ``affinity`` but no
topology spread, and before session s29 the operator set neither, so the replicas of a gateway could
all land on one node (one drained or lost node took the whole gateway; ``igw audit`` IGW-AU410) and
on the GPU nodes, taking CPU and memory from the model servers and moving with HyperPod's node
repairs. ``podDefaults.affinity``, when given, replaces the default affinity whole (the user's
placement wins); the spread constraints are always set.

The HyperPod node label is stated here once; the CDK app's controllers (load balancer controller,
External Secrets) read the same constants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from igw.config.model import LabelSelector, LabelSelectorRequirement

HYPERPOD_NODE_LABEL: Final = "sagemaker.amazonaws.com/node-health-status"
"""Every HyperPod node carries this label (its value is the node's health)."""

OFF_HYPERPOD_NODES: Final[Mapping[str, Any]] = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [{"key": HYPERPOD_NODE_LABEL, "operator": "DoesNotExist"}]
                },
            }
        ]
    }
}
"""Any node but a HyperPod one when there is room. Preferred, not required: a cluster without other
nodes still runs the pods."""

SPREAD_TOPOLOGY_KEYS: Final = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")


def spread_constraints(selector: Mapping[str, str]) -> list[dict[str, Any]]:
    """Replicas of the pods ``selector`` matches, at most one apart per zone and per node; soft
    (``ScheduleAnyway``), so a single-zone cluster or one node short still schedules them."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
        for key in SPREAD_TOPOLOGY_KEYS
    ]


SURGE_ROLLOUT: Final[Mapping[str, int]] = {"maxUnavailable": 0, "maxSurge": 1}
"""A rolling update that never drops below the desired count: a new pod starts before an old one
stops."""
REPLACE_ROLLOUT: Final[Mapping[str, int]] = {"maxUnavailable": 1, "maxSurge": 0}
"""One pod stopped, then its replacement started: where a surge pod could find no place."""


_SELECTOR_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector (``matchLabels``/``matchExpressions``) selects ``labels``."""
    return LabelSelector(
        match_labels=dict(selector.get("matchLabels") or {}),
        match_expressions=tuple(
            LabelSelectorRequirement(
                key=str(term.get("key")), operator=term["operator"], values=tuple(term.get("values") or ())
            )
            for term in selector.get("matchExpressions") or ()
            if isinstance(term, Mapping) and term.get("operator") in _SELECTOR_OPERATORS
        ),
    ).matches(labels)


def rolling_update(pod_spec: Mapping[str, Any], labels: Mapping[str, str], namespace: str) -> dict[str, int]:
    """:data:`SURGE_ROLLOUT`, or :data:`REPLACE_ROLLOUT` when a required pod anti-affinity term keeps
    the pods ``labels`` describes apart (one per node, or per zone): with as many nodes (zones) as
    replicas a surge pod has nowhere to go, and ``maxUnavailable: 0`` would wait for it forever, the
    rollout stalled with the old pods running."""
    affinity = pod_spec.get("affinity") or {}
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
    terms = (anti or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
    for term in terms:
        if not isinstance(term, Mapping) or not isinstance(term.get("labelSelector"), Mapping):
            continue
        namespaces = term.get("namespaces") or []
        if namespaces and namespace not in namespaces and term.get("namespaceSelector") is None:
            continue
        if _selects(term["labelSelector"], labels):
            return dict(REPLACE_ROLLOUT)
    return dict(SURGE_ROLLOUT)
