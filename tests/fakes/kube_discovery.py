"""Discovery documents and server-side tables of the fake Kubernetes API server.

Clients find resources before they use them: ``kubectl`` and kopf read ``/api``, ``/api/v1``,
``/apis`` and ``/apis/<group>/<version>`` (the legacy, unaggregated discovery, which every client
still accepts when the server does not answer in the aggregated format). ``kubectl get`` asks for a
``meta.k8s.io/v1`` ``Table`` and prints its columns; for a custom resource the columns come from the
CRD's ``additionalPrinterColumns``, evaluated here with the small JSONPath subset CRDs use
(``.a.b``, ``[0]``, ``[*]``, ``[?(@.key=="value")]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from tests.fakes.kube_printers import NAME_IN_COLUMNS, PRINTERS, Cells, Column, human_age
from tests.fakes.kube_store import ResourceKind

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_FILTER = re.compile(r"""\[\?\(@\.([\w.]+)\s*==\s*["']([^"']*)["']\)\]""")


def _resource_entry(kind: ResourceKind) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": kind.plural,
        "singularName": kind.kind.lower(),
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": list(_VERBS),
    }
    if kind.short_names:
        entry["shortNames"] = list(kind.short_names)
    categories = kind.categories or BUILT_IN_CATEGORIES.get((kind.group, kind.plural), ())
    if categories:
        entry["categories"] = list(categories)
    return entry


BUILT_IN_CATEGORIES: Final[Mapping[tuple[str, str], tuple[str, ...]]] = {
    (group, plural): ("all",)
    for group, plural in (
        ("", "pods"),
        ("", "replicationcontrollers"),
        ("", "services"),
        ("apps", "daemonsets"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("batch", "cronjobs"),
        ("batch", "jobs"),
    )
}
"""The categories the API server's storages give built-in kinds (``kubectl get all``: the workloads,
their Services and autoscalers); the fake listed none, so ``kubectl get all`` was refused (``the
server doesn't have a resource type "all"``) and a CRD's ``names.categories`` were dropped."""


SCALABLE: Final = frozenset({("apps", "v1", "deployments"), ("apps", "v1", "statefulsets")})
"""Kinds whose ``/scale`` subresource the fake serves (what ``kubectl scale`` and the HPA controller
write a replica count through)."""


def resource_list(group_version: str, kinds: Iterable[ResourceKind]) -> dict[str, Any]:
    """``APIResourceList`` of one group/version, with ``<plural>/status`` for status subresources."""
    resources: list[dict[str, Any]] = []
    for kind in sorted(kinds, key=lambda k: k.plural):
        resources.append(_resource_entry(kind))
        if kind.status_subresource:
            resources.append(
                {
                    "name": f"{kind.plural}/status",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if kind.key in SCALABLE:
            resources.append(
                {
                    "name": f"{kind.plural}/scale",
                    "singularName": "",
                    "namespaced": True,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def group_list(kinds: Iterable[ResourceKind]) -> dict[str, Any]:
    """``APIGroupList`` of every named group (the core group is served under ``/api``)."""
    versions: dict[str, list[str]] = {}
    for kind in kinds:
        if kind.group and kind.version not in versions.setdefault(kind.group, []):
            versions[kind.group].append(kind.version)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [group_document(group, found) for group, found in sorted(versions.items())],
    }


def group_document(group: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def wants_table(accept: str) -> bool:
    """Whether an ``Accept`` header asks for a ``Table`` (what ``kubectl get`` sends first)."""
    return "as=Table" in accept


def jsonpath_values(obj: Any, path: str) -> list[Any]:
    """Values at a printer-column JSONPath; an empty list when the path does not resolve."""
    current: list[Any] = [obj]
    rest = path.strip()
    while rest:
        if rest.startswith("."):
            match = re.match(r"\.([\w-]+)", rest)
            if match is None:
                return []
            key, rest = match.group(1), rest[match.end() :]
            current = [c[key] for c in current if isinstance(c, Mapping) and key in c]
            continue
        filtered = _FILTER.match(rest)
        if filtered:
            field, wanted = filtered.group(1), filtered.group(2)
            rest = rest[filtered.end() :]
            current = [
                item
                for c in current
                if isinstance(c, list)
                for item in c
                if [str(v) for v in jsonpath_values(item, "." + field)][:1] == [wanted]
            ]
            continue
        index = re.match(r"\[(\*|\d+)\]", rest)
        if index is None:
            return []
        rest = rest[index.end() :]
        if index.group(1) == "*":
            current = [item for c in current if isinstance(c, list) for item in c]
        else:
            n = int(index.group(1))
            current = [c[n] for c in current if isinstance(c, list) and len(c) > n]
    return current


def _cell(obj: Mapping[str, Any], column: Mapping[str, Any]) -> Any:
    values = jsonpath_values(obj, str(column.get("jsonPath", "")))
    if not values:
        return None
    value = values[0]
    if column.get("type") == "date" and isinstance(value, str):
        return human_age(value)
    return value


def table(kind: ResourceKind, items: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` ``Table``: Name, then the kind's printer columns (a CRD's, or a built-in
    kind's as the API server prints it, :mod:`tests.fakes.kube_printers`; else Age)."""
    printer = PRINTERS.get((kind.group, kind.plural)) if kind.schema is None else None
    if printer is not None:
        leading_name = (kind.group, kind.plural) not in NAME_IN_COLUMNS
        return _printed_table(printer, items, resource_version, leading_name=leading_name)
    columns: list[Mapping[str, Any]] = list(kind.printer_columns) or [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]
    definitions = [
        {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0},
        *(
            {
                "name": str(c["name"]),
                "type": str(c.get("type", "string")),
                "format": "",
                "description": str(c.get("description", "")),
                "priority": int(c.get("priority", 0)),
            }
            for c in columns
        ),
    ]
    return _table(definitions, items, lambda item: [_cell(item, c) for c in columns], resource_version)


def _printed_table(
    printer: tuple[Sequence[Column], Cells],
    items: list[dict[str, Any]],
    resource_version: str,
    *,
    leading_name: bool = True,
) -> dict[str, Any]:
    """The table of a built-in kind's printer: ``Name`` first then its columns, or (``leading_name``
    off, an Event's) only its columns, ``Name`` among them."""
    columns, cells = printer
    definitions: list[dict[str, Any]] = [
        {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": d, "priority": p}
        for n, t, p, d in columns
    ]
    if leading_name:
        name: dict[str, Any] = {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name",
            "priority": 0,
        }
        definitions.insert(0, name)
    return _table(
        definitions,
        items,
        lambda item: cells(item, human_age(str(item["metadata"].get("creationTimestamp", "")))),
        resource_version,
        leading_name=leading_name,
    )


def _table(
    definitions: Sequence[Mapping[str, Any]],
    items: list[dict[str, Any]],
    cells: Callable[[dict[str, Any]], Sequence[Any]],
    resource_version: str,
    *,
    leading_name: bool = True,
) -> dict[str, Any]:
    """The ``Table`` of ``items`` under ``definitions``: each row the item's name (unless not
    ``leading_name``) then ``cells(item)``, with the item's metadata as a ``PartialObjectMetadata``
    (what ``includeObject=Metadata`` gives)."""
    rows = [
        {
            "cells": [item["metadata"]["name"], *cells(item)] if leading_name else list(cells(item)),
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": item["metadata"],
            },
        }
        for item in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
