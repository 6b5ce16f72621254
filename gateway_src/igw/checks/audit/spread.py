"""IGW-AU410: the replicas of a Deployment/StatefulSet are spread across nodes or zones.

Two replicas on one node are one failure: a node drained for an upgrade or lost with its instance
takes the gateway (or the model) down whole although IGW-AU408 counted two. A workload passes when its
pod template spreads its own pods by node or zone - a ``topologySpreadConstraints`` entry or a pod
anti-affinity term (preferred or required) on ``kubernetes.io/hostname`` or
``topology.kubernetes.io/zone`` whose selector matches the template's labels. Only workloads that run
(or are autoscaled from) two replicas or more are judged: one replica is IGW-AU408's finding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from igw.checks.audit._workloads import autoscaler_floors, workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import name_of, namespace_of, pod_spec, ref, spec, template_labels
from igw.checks.model import CheckMeta, Command, Result, Severity, refs
from igw.checks.selectors import selector_from_mapping

META = CheckMeta(
    id="IGW-AU410",
    title="Replicas spread across nodes",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.LOW,
    description="Replicas that may all land on one node fail together when that node goes.",
    remediation="Add a topologySpreadConstraints entry (topologyKey kubernetes.io/hostname or "
    "topology.kubernetes.io/zone) or a podAntiAffinity term on those keys, selecting the pods' own labels.",
    cross_refs=refs(
        "kube-score:deployment-has-host-podantiaffinity",
        "kube-score:pod-topology-spread-constraints",
    ),
)

SPREAD_KEYS: Final = frozenset({"kubernetes.io/hostname", "topology.kubernetes.io/zone"})
"""Topology keys that put replicas on different nodes (a zone holds several nodes, and a spread over
zones puts them on different nodes too)."""


def _selects_own_pods(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a spread or anti-affinity ``term`` counts the template's own pods."""
    if term.get("topologyKey") not in SPREAD_KEYS:
        return False
    raw = term.get("labelSelector")
    if not isinstance(raw, Mapping) or not (raw.get("matchLabels") or raw.get("matchExpressions")):
        return False  # no selector (or an empty one) selects nothing in these terms
    try:
        return selector_from_mapping(raw).matches(labels)
    except ValueError:
        return False


def _anti_affinity_terms(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    affinity = pod.get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(anti, Mapping):
        return
    required = anti.get("requiredDuringSchedulingIgnoredDuringExecution")
    for term in required if isinstance(required, Sequence) else ():
        if isinstance(term, Mapping):
            yield term
    preferred = anti.get("preferredDuringSchedulingIgnoredDuringExecution")
    for weighted in preferred if isinstance(preferred, Sequence) else ():
        term = weighted.get("podAffinityTerm") if isinstance(weighted, Mapping) else None
        if isinstance(term, Mapping):
            yield term


def spread_by(pod: Mapping[str, Any], labels: Mapping[str, str]) -> str | None:
    """How the pod spec spreads its own pods (``topology spread on <key>`` / ``pod anti-affinity on
    <key>``), or ``None``."""
    constraints = pod.get("topologySpreadConstraints")
    for term in constraints if isinstance(constraints, Sequence) else ():
        if isinstance(term, Mapping) and _selects_own_pods(term, labels):
            return f"topology spread on {term['topologyKey']}"
    for term in _anti_affinity_terms(pod):
        if _selects_own_pods(term, labels):
            return f"pod anti-affinity on {term['topologyKey']}"
    return None


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    floors = autoscaler_floors(ctx)
    for workload in workloads(ctx, ("Deployment", "StatefulSet")):
        floor = floors.get((namespace_of(workload), str(workload.get("kind")), name_of(workload)))
        replicas = floor if floor is not None else spec(workload).get("replicas", 1)
        if not isinstance(replicas, int) or replicas < 2:
            continue
        how = spread_by(pod_spec(workload), template_labels(workload))
        if how is not None:
            yield r.passed(ref(workload), how)
        else:
            yield r.fail(
                ref(workload),
                f"{replicas} replicas and nothing spreads them across nodes or zones: one node's loss "
                "can take them all",
            )


CHECK = FunctionCheck(META, _run)
