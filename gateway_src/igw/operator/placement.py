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
