"""IGW-AU408: Deployments/StatefulSets run at least two replicas (or are autoscaled from at least two)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from igw.checks.audit._workloads import workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Missing
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


def _autoscaler_floors(ctx: CheckContext) -> Mapping[tuple[str, str, str], int]:
    """``(namespace, kind, name)`` of each workload a HorizontalPodAutoscaler scales -> its
    ``minReplicas`` (1 when unset, the API's default). Empty when the source has no HPAs: then every
    workload is judged by its own ``spec.replicas``, as before HPAs were read."""
    found = ctx.inventory.kube.of("HorizontalPodAutoscaler")
    if isinstance(found, Missing):
        return {}
    floors: dict[tuple[str, str, str], int] = {}
    for hpa in found:
        target = spec(hpa).get("scaleTargetRef")
        if not isinstance(target, Mapping):
            continue
        floor = spec(hpa).get("minReplicas", 1)
        key = (namespace_of(hpa), str(target.get("kind")), str(target.get("name")))
        floors[key] = floor if isinstance(floor, int) else 1
    return floors


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    floors = _autoscaler_floors(ctx)
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
