"""IGW-AU406: a NetworkPolicy selects each workload's pods (default-deny posture per namespace)."""

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
    id="IGW-AU406",
    title="NetworkPolicy selects the pods",
    command=Command.AUDIT,
    category="workload",
    severity=Severity.MEDIUM,
    description="Pods without a NetworkPolicy accept traffic from every pod in the cluster.",
    remediation="Add a default-deny NetworkPolicy per namespace and allow only the gateway→model-server, "
    "gateway→IdP/JWKS and DNS flows.",
    cross_refs=refs("kube-score:pod-networkpolicy", "Polaris:missingNetworkPolicy", "CIS-EKS:4.3.2"),
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    policies = by_namespace(need(ctx.inventory.kube.of("NetworkPolicy")))
    for workload in workloads(ctx):
        chosen = selecting(workload, policies, selector_field="podSelector")
        if chosen:
            yield r.passed(ref(workload), f"selected by {', '.join(name_of(p) for p in chosen)}")
        else:
            yield r.fail(ref(workload), "no NetworkPolicy selects these pods")


CHECK = FunctionCheck(META, _run)
