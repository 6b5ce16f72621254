"""Kubernetes documents → a :class:`KubeView` (shared by the manifest and cdk.out sources)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from igw.checks.inventory import KINDS, KubeView, Manifest
from igw.checks.k8s import WORKLOAD_KINDS, pod_from_template, spec


def flatten(docs: Iterable[Any]) -> list[Manifest]:
    """Mappings with a ``kind``; ``kind: List`` (and ``*List``) unpacked; anything else dropped."""
    out: list[Manifest] = []
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            out.extend(flatten(doc["items"]))
        elif isinstance(kind, str):
            out.append(doc)
    return out


def _creates_pods(workload: Manifest) -> bool:
    """Whether the workload as declared runs pods: not scaled to zero (``replicas``, a Job's
    ``parallelism``) and not suspended (a Job or CronJob's ``suspend``)."""
    body = spec(workload)
    if body.get("suspend") is True:
        return False
    count = body.get("parallelism" if workload.get("kind") == "Job" else "replicas", 1)
    return bool(count != 0)


def static_view(docs: Iterable[Any], *, source: str) -> KubeView:
    """Objects by kind; pods are the declared Pods plus one synthetic pod per workload template."""
    objects: dict[str, list[Manifest]] = {kind: [] for kind in KINDS}
    for doc in flatten(docs):
        kind = str(doc["kind"])
        if kind in objects:
            objects[kind].append(doc)
    for kind in WORKLOAD_KINDS:
        for workload in objects[kind]:
            if _creates_pods(workload):
                objects["Pod"].append(pod_from_template(workload))
    return KubeView(objects=dict(objects), static=True, source=source)
