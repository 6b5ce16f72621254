"""Shared iteration for workload-hardening checks: in-scope workloads and their containers.

Findings are per workload (listing the offending containers), the unit an operator fixes.
System namespaces are skipped unless ``--include-system-namespaces``; objects a source only inferred
(a Helm chart standing in for its Deployment) are skipped because their pod spec is unknown.

Audited: Deployments, StatefulSets, DaemonSets, Jobs, CronJobs and Pods no built-in workload owns
(a Pod a ReplicaSet, StatefulSet, DaemonSet or Job created is judged through its workload's template;
a Pod a static source synthesised from a template is that template again). A Job a CronJob created is
judged through the CronJob. Before session s39 only the first three were read: a model server or a
gateway run as a bare Pod or a Job escaped every workload check. A Pod whose controller is a custom
resource (KubeRay's RayCluster, a LeaderWorkerSet, a Volcano ``batch.volcano.sh`` Job...) escaped too:
not bare, so not judged as a Pod, and its owner's template is unknown to us; it is judged as a Pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from igw.checks.framework import CheckContext
from igw.checks.inventory import Manifest, Missing, need
from igw.checks.k8s import (
    DERIVED_ANNOTATION,
    TEMPLATE_ANNOTATION,
    WORKLOAD_KINDS,
    annotations_of,
    containers,
    controller_ref,
    in_scope,
    namespace_of,
    pod_spec,
    spec,
)

ContainerTest = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]
"""``(container, pod_spec) -> problem or None``."""


AUDITED_KINDS = (*WORKLOAD_KINDS, "Pod")
TEMPLATE_OWNERS = frozenset(
    {("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("batch", "Job")}
)
"""``(API group, kind)`` of the controllers whose Pods are judged through a workload's template: a
ReplicaSet's (a Deployment's), a StatefulSet's, a DaemonSet's, a Job's (or its CronJob's)."""


def _owned_by_template(pod: Manifest) -> bool:
    """Whether a workload template the audit reads stands for ``pod`` (an owner reference without
    ``apiVersion`` is matched by kind alone)."""
    owner = controller_ref(pod)
    if owner is None:
        return False
    group, kind = owner
    return any(kind == k and group in (None, g) for g, k in TEMPLATE_OWNERS)


def _judged_here(obj: Manifest) -> bool:
    """Whether ``obj``'s pods are judged on ``obj`` itself rather than through the workload owning it."""
    if obj.get("kind") == "Pod":
        return TEMPLATE_ANNOTATION not in annotations_of(obj) and not _owned_by_template(obj)
    if obj.get("kind") == "Job":
        owner = controller_ref(obj)
        return owner is None or owner[1] != "CronJob" or owner[0] not in (None, "batch")
    return True


def workloads(ctx: CheckContext, kinds: Sequence[str] = AUDITED_KINDS) -> list[Manifest]:
    found: list[Manifest] = []
    missing: Missing | None = None
    for kind in kinds:
        objects = ctx.inventory.kube.of(kind)
        if isinstance(objects, Missing):
            missing = missing or objects
            continue
        found.extend(
            o
            for o in objects
            if in_scope(o, include_system=ctx.options.include_system_namespaces)
            and DERIVED_ANNOTATION not in annotations_of(o)
            and _judged_here(o)
        )
    if not found and missing is not None:
        need(missing)
    return found


def container_problems(workload: Manifest, test: ContainerTest) -> list[str]:
    ps = pod_spec(workload)
    problems = []
    for container in containers(workload, include_init=True):
        problem = test(container, ps)
        if problem:
            problems.append(f"{container.get('name', '?')}: {problem}")
    return problems


def security_context(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("securityContext")
    return value if isinstance(value, Mapping) else {}


def per_workload(ctx: CheckContext, test: ContainerTest) -> Iterator[tuple[Manifest, list[str]]]:
    for workload in workloads(ctx):
        yield workload, container_problems(workload, test)


def autoscaler_floors(ctx: CheckContext) -> Mapping[tuple[str, str, str], int]:
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
