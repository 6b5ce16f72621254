"""Reading Kubernetes manifests the way the API server would interpret them.

Helpers shared by checks: resource names, pod specs inside workloads, containers, readiness, and
the namespace scope rules. Everything takes plain mappings so that live objects, manifest files
and manifests embedded in CloudFormation look the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from igw.checks.inventory import Manifest

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
"""Kinds that create pods from a template (a Job's is ``spec.template``, a CronJob's
``spec.jobTemplate.spec.template``). Jobs and CronJobs since session s39: a model server or a gateway
run as one escaped every workload check."""
DERIVED_ANNOTATION = "igw.checks/derived-from"
"""Set on objects a source infers (a Helm chart seen as a Deployment, the CRD an add-on installs)."""
TEMPLATE_ANNOTATION = "igw.checks/from-template"
"""Set on pods a static source synthesises from a workload's pod template."""


def meta(obj: Manifest) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def name_of(obj: Manifest) -> str:
    return str(meta(obj).get("name", "?"))


def namespace_of(obj: Manifest, default: str = "default") -> str:
    return str(meta(obj).get("namespace") or default)


def labels_of(obj: Manifest) -> dict[str, str]:
    labels = meta(obj).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def annotations_of(obj: Manifest) -> dict[str, str]:
    ann = meta(obj).get("annotations")
    return {str(k): str(v) for k, v in ann.items()} if isinstance(ann, Mapping) else {}


def ref(obj: Manifest) -> str:
    """``Kind namespace/name`` (cluster-scoped objects: ``Kind name``), the resource column."""
    kind = str(obj.get("kind", "?"))
    ns = meta(obj).get("namespace")
    return f"{kind} {ns}/{name_of(obj)}" if ns else f"{kind} {name_of(obj)}"


def spec(obj: Manifest) -> Mapping[str, Any]:
    value = obj.get("spec")
    return value if isinstance(value, Mapping) else {}


def pod_template(obj: Manifest) -> Mapping[str, Any]:
    """The pod a workload creates, as ``{metadata, spec}``: a Pod itself, a CronJob's
    ``spec.jobTemplate.spec.template``, any other workload's ``spec.template`` (empty when absent)."""
    if obj.get("kind") == "Pod":
        return obj
    body = spec(obj)
    if obj.get("kind") == "CronJob":
        job = body.get("jobTemplate")
        body = spec(job) if isinstance(job, Mapping) else {}
    template = body.get("template")
    return template if isinstance(template, Mapping) else {}


def pod_spec(obj: Manifest) -> Mapping[str, Any]:
    """The pod spec of a Pod or of a workload's template."""
    return spec(pod_template(obj))


def template_labels(obj: Manifest) -> dict[str, str]:
    """The labels of the pods ``obj`` creates (a Pod's own labels)."""
    return labels_of(pod_template(obj))


def controller_ref(obj: Manifest) -> tuple[str | None, str] | None:
    """``(API group, kind)`` of the ``ownerReferences`` entry marked ``controller: true`` (group ``""``
    for the core API, ``None`` when the entry names no ``apiVersion``); ``None``: nothing manages it."""
    for owner in meta(obj).get("ownerReferences") or []:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            api_version = owner.get("apiVersion")
            group = str(api_version).rpartition("/")[0] if api_version is not None else None
            return group, str(owner.get("kind"))
    return None


def containers(obj: Manifest, *, include_init: bool = False) -> list[Mapping[str, Any]]:
    ps = pod_spec(obj)
    keys = ("initContainers", "containers") if include_init else ("containers",)
    out: list[Mapping[str, Any]] = []
    for key in keys:
        items = ps.get(key)
        if isinstance(items, Sequence):
            out.extend(c for c in items if isinstance(c, Mapping))
    return out


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """Literal env values (``valueFrom`` entries cannot be known statically and are left out)."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if isinstance(item, Mapping) and "name" in item and "value" in item:
            env[str(item["name"])] = str(item["value"])
    return env


def container_args(container: Mapping[str, Any]) -> list[str]:
    """``command`` followed by ``args`` - the process's argv as Kubernetes builds it."""
    return [str(a) for a in (container.get("command") or [])] + [
        str(a) for a in (container.get("args") or [])
    ]


def container_ports(container: Mapping[str, Any]) -> list[int]:
    ports = []
    for item in container.get("ports") or []:
        if isinstance(item, Mapping) and isinstance(item.get("containerPort"), int):
            ports.append(int(item["containerPort"]))
    return ports


def is_pod_ready(pod: Manifest) -> bool | None:
    """``True``/``False`` from the Ready condition; ``None`` when there is no status (manifests)."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return None
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return False


def in_scope(obj: Manifest, *, include_system: bool) -> bool:
    return include_system or namespace_of(obj) not in SYSTEM_NAMESPACES


def iter_workloads(objects: Mapping[str, Sequence[Manifest]]) -> Iterator[Manifest]:
    for kind in WORKLOAD_KINDS:
        yield from objects.get(kind, ())


def pod_from_template(workload: Manifest) -> dict[str, Any]:
    """A pod as the workload would create it (no status): what static sources check selectors against."""
    template_meta = dict(meta(pod_template(workload)))
    annotations = dict(template_meta.get("annotations") or {})
    annotations[TEMPLATE_ANNOTATION] = f"{workload.get('kind')}/{name_of(workload)}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template_meta,
            "name": f"{name_of(workload)}-<template>",
            "namespace": namespace_of(workload),
            "annotations": annotations,
        },
        "spec": dict(pod_spec(workload)),
    }
