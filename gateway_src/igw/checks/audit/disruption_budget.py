"""IGW-AU407: a PodDisruptionBudget covers each Deployment/StatefulSet (node drains keep capacity)."""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.audit._selecting import selecting
from igw.checks.audit._workloads import workloads
from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import need
from igw.checks.k8s import name_of, ref
from igw.checks.model import CheckMeta, Command, Result, Severity, refs
from igw.checks.selectors import by_namespace

META = CheckMeta(
    id="IGW-AU407",
    title="PodDisruptionBudget present",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.LOW,
    description="Without a PDB a node drain can evict every replica at once.",
    remediation="Add a PodDisruptionBudget with maxUnavailable: 1 selecting the pods.",
    cross_refs=refs("kube-score:deployment-has-poddisruptionbudget", "Polaris:missingPodDisruptionBudget"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    budgets = by_namespace(need(ctx.inventory.kube.of("PodDisruptionBudget")))
    for workload in workloads(ctx, ("Deployment", "StatefulSet")):
        chosen = selecting(workload, budgets, selector_field="selector")
        if chosen:
            yield r.passed(ref(workload), f"covered by {', '.join(name_of(p) for p in chosen)}")
        else:
            yield r.fail(ref(workload), "no PodDisruptionBudget selects these pods")


CHECK = FunctionCheck(META, _run)
