"""IGW-AU408: Deployments/StatefulSets run at least two replicas (or are autoscaled from at least two)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._workloads import autoscaler_floors, workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import name_of, namespace_of, ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU408",
    title="At least two replicas",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.LOW,
    description="A single replica is a single point of failure for the gateway or the model.",
    remediation="spec.replicas: 2 or more (with pod anti-affinity or topology spread); "
    "under a HorizontalPodAutoscaler, minReplicas: 2 or more.",
    cross_refs=refs(
        "kube-score:deployment-replicas",
        "kube-score:horizontalpodautoscaler-replicas",
        "Polaris:deploymentMissingReplicas",
    ),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    floors = autoscaler_floors(ctx)
    for workload in workloads(ctx, ("Deployment", "StatefulSet")):
        floor = floors.get((namespace_of(workload), str(workload.get("kind")), name_of(workload)))
        if floor is not None:
            # The autoscaler owns the count (a manifest for one often leaves spec.replicas out).
            if floor >= 2:
                yield r.passed(ref(workload), f"autoscaled from {floor} replicas")
            else:
                yield r.fail(ref(workload), f"autoscaled from {floor} replica(s): minReplicas below 2")
            continue
        replicas = spec(workload).get("replicas", 1)
        if isinstance(replicas, int) and replicas >= 2:
            yield r.passed(ref(workload), f"{replicas} replicas")
        else:
            yield r.fail(ref(workload), f"{replicas} replica(s)")


CHECK = FunctionCheck(META, _run)
