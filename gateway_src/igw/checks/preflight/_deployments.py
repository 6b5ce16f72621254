"""Shared logic of "component X is running": find its Deployment(s) and read availability."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from igw.checks.framework import CheckContext, Reporter
from igw.checks.inventory import Manifest, need
from igw.checks.k8s import labels_of, name_of, ref
from igw.checks.model import Result, Severity


def component_status(
    ctx: CheckContext, r: Reporter, *, what: str, matches: Callable[[Manifest], bool]
) -> Iterator[Result]:
    deployments = need(ctx.inventory.kube.of("Deployment"))
    found = [d for d in deployments if matches(d)]
    if not found and ctx.inventory.kube.static:
        # Manifests describe one part of a cluster; a dependency installed elsewhere (an EKS add-on,
        # another repository) is simply not declared here - worth a note, not a critical finding.
        yield r.warn(
            what,
            f"{what} is not declared here (no Deployment in these manifests); "
            "check the cluster itself with --cluster-name",
            severity=Severity.INFO,
        )
        return
    if not found:
        yield r.fail(what, f"no {what} Deployment found")
        return
    for deployment in found:
        if ctx.inventory.kube.static:
            yield r.passed(ref(deployment), f"{what} declared (static source: runtime state not checked)")
            continue
        status = deployment.get("status") or {}
        available = int(status.get("availableReplicas") or 0)
        wanted = int((deployment.get("spec") or {}).get("replicas", 1) or 0)
        if available >= 1:
            yield r.passed(ref(deployment), f"{available}/{wanted} replicas available")
        else:
            yield r.fail(ref(deployment), f"0/{wanted} replicas available")


def named(*names: str) -> Callable[[Manifest], bool]:
    def predicate(obj: Manifest) -> bool:
        labels = labels_of(obj)
        return name_of(obj) in names or labels.get("app.kubernetes.io/name") in names

    return predicate
