"""IGW-AU408: Deployments/StatefulSets run at least two replicas (or are autoscaled)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._workloads import workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.k8s import ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity, refs

META = CheckMeta(
    id="IGW-AU408",
    title="At least two replicas",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.LOW,
    description="A single replica is a single point of failure for the gateway or the model.",
    remediation="spec.replicas: 2 or more (with pod anti-affinity or topology spread).",
    cross_refs=refs("kube-score:deployment-replicas", "Polaris:deploymentMissingReplicas"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for workload in workloads(ctx, ("Deployment", "StatefulSet")):
        replicas = spec(workload).get("replicas", 1)
        if isinstance(replicas, int) and replicas >= 2:
            yield r.passed(ref(workload), f"{replicas} replicas")
        else:
            yield r.fail(ref(workload), f"{replicas} replica(s)")


CHECK = FunctionCheck(META, _run)
