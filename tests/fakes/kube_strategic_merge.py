"""Strategic merge patch of built-in kinds, as the API server applies one.

Ported from apimachinery's ``pkg/util/strategicpatch/patch.go`` (``StrategicMergeMapPatch``,
``mergeMap``, ``mergeSlice``, ``normalizeElementOrder``) and the handler's error mapping
(``apiserver/pkg/endpoints/handlers/patch.go``, ``interpretStrategicMergePatchError``): a list whose
Go field carries ``patchStrategy:"merge"`` merges item by item on its ``patchMergeKey`` (a Pod
spec's ``containers`` by ``name``, a container's ``ports`` by ``containerPort`` and ``env`` by
``name``, ...; a list of scalars such as ``metadata.finalizers`` as a set), every other list is
replaced whole; ``$patch: delete`` in a keyed list's item removes that item, ``$patch: replace``
replaces the list (or, in a map, the map), ``$patch: delete`` in a map empties it; ``$retainKeys``
drops the live keys it does not name; ``$setElementOrder/<list>`` orders a merged list and
``$deleteFromPrimitiveList/<list>`` removes scalars (what ``kubectl apply``'s three-way patch sends).
Items a patch adds to a keyed list without ``$setElementOrder`` come first, as on a cluster.

Why: the fake merged a strategic merge patch as a JSON merge patch, so ``kubectl patch deploy`` of
one container replaced the whole ``containers`` list, and a ``$patch: delete`` item was stored as
a container. A custom resource takes no strategic merge patch at all (415, :mod:`tests.fakes.kube_api`).

Not modelled: the patch strategies of fields outside :data:`_KIND_SCHEMAS` (those lists are
replaced, as any list without a strategy is), ``$setElementOrder`` consistency checks, and the
``fieldValidation`` warnings for the directive keys, which the typed decoding drops.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tests.fakes.kube_store import StoreError

_DIRECTIVE: Final = "$patch"
_RETAIN_KEYS: Final = "$retainKeys"
_SET_ORDER: Final = "$setElementOrder/"
_DELETE_FROM_PRIMITIVES: Final = "$deleteFromPrimitiveList/"


@dataclass(frozen=True)
class Strategy:
    """A field's patch metadata: ``merge`` for ``patchStrategy:"merge"`` lists (``key``: the
    ``patchMergeKey``, ``None`` for a list of scalars), and the strategies of its own fields."""

    merge: bool = False
    key: str | None = None
    fields: Mapping[str, Strategy] = field(default_factory=dict)

    def of(self, name: str) -> Strategy:
        return self.fields.get(name, _NONE)


_NONE: Final = Strategy()


def _keyed(key: str, **fields: Strategy) -> Strategy:
    return Strategy(merge=True, key=key, fields=fields)


_CONTAINER: Final = {
    "ports": _keyed("containerPort"),
    "env": _keyed("name"),
    "volumeMounts": _keyed("mountPath"),
    "volumeDevices": _keyed("devicePath"),
}
_POD_SPEC: Final = Strategy(
    fields={
        "containers": _keyed("name", **_CONTAINER),
        "initContainers": _keyed("name", **_CONTAINER),
        "ephemeralContainers": _keyed("name", **_CONTAINER),
        "volumes": _keyed("name"),
        "imagePullSecrets": _keyed("name"),
        "hostAliases": _keyed("ip"),
        "topologySpreadConstraints": _keyed("topologyKey"),
        "schedulingGates": _keyed("name"),
        "resourceClaims": _keyed("name"),
    }
)
_OBJECT_META: Final = Strategy(fields={"finalizers": Strategy(merge=True), "ownerReferences": _keyed("uid")})
_POD_TEMPLATE: Final = Strategy(fields={"metadata": _OBJECT_META, "spec": _POD_SPEC})
_CONDITIONS: Final = Strategy(fields={"conditions": _keyed("type")})
_WORKLOAD: Final = Strategy(
    fields={
        "metadata": _OBJECT_META,
        "spec": Strategy(fields={"template": _POD_TEMPLATE}),
        "status": _CONDITIONS,
    }
)
_KIND_SCHEMAS: Final[Mapping[str, Strategy]] = {
    "Pod": Strategy(fields={"metadata": _OBJECT_META, "spec": _POD_SPEC, "status": _CONDITIONS}),
    "Deployment": _WORKLOAD,
    "StatefulSet": _WORKLOAD,
    "DaemonSet": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    "Job": _WORKLOAD,
    "CronJob": Strategy(
        fields={
            "metadata": _OBJECT_META,
            "spec": Strategy(
                fields={
                    "jobTemplate": Strategy(fields={"metadata": _OBJECT_META, "spec": _WORKLOAD.of("spec")})
                }
            ),
        }
    ),
    "Service": Strategy(
        fields={"metadata": _OBJECT_META, "spec": Strategy(fields={"ports": _keyed("port")})}
    ),
    "Node": Strategy(
        fields={
            "metadata": _OBJECT_META,
            "status": Strategy(fields={"conditions": _keyed("type"), "addresses": _keyed("type")}),
        }
    ),
    "Namespace": Strategy(fields={"metadata": _OBJECT_META, "status": _CONDITIONS}),
    "PodDisruptionBudget": Strategy(fields={"metadata": _OBJECT_META, "status": _CONDITIONS}),
    "HorizontalPodAutoscaler": Strategy(fields={"metadata": _OBJECT_META, "status": _CONDITIONS}),
}
"""The ``patchStrategy``/``patchMergeKey`` tags of ``k8s.io/api`` types, for the built-in kinds the
fake serves; any other kind: its ``metadata``'s only."""

_METADATA_ONLY: Final = Strategy(fields={"metadata": _OBJECT_META})


def strategic_merge_patch(kind: str, current: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """``current`` (a built-in ``kind``'s object) with the strategic merge ``patch`` applied."""
    if not isinstance(patch, dict):
        raise StoreError(400, "BadRequest", "invalid JSON document")
    try:
        merged = _merge_map(
            copy.deepcopy(dict(current)), copy.deepcopy(patch), _KIND_SCHEMAS.get(kind, _METADATA_ONLY)
        )
    except _BadRequest as exc:
        raise StoreError(400, "BadRequest", str(exc)) from exc
    except _Unprocessable as exc:
        raise StoreError(422, "", str(exc)) from exc
    except _PlainError as exc:  # not an API status: the handler answers 500 with no reason
        raise StoreError(500, "", str(exc)) from exc
    stripped = _without_directives(merged)
    assert isinstance(stripped, dict)
    return stripped


class _BadRequest(Exception):
    """``mergepatch.ErrBadPatchFormat...``: answered 400."""


class _Unprocessable(Exception):
    """``mergepatch.ErrNoListOfLists``: answered 422."""


class _PlainError(Exception):
    """Any other error of the merge: answered 500."""


def _go(value: Any) -> str:
    """A value as Go's ``%v`` prints a decoded JSON value (maps with sorted keys)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _no_merge_key(item: Mapping[str, Any], key: str) -> _PlainError:
    return _PlainError(f"map: {_go(dict(item))} does not contain declared merge key: {key}")


def _without_directives(value: Any) -> Any:
    """The patched object as the typed decoding leaves it: directive keys (no field of a built-in
    type) dropped."""
    if isinstance(value, dict):
        return {k: _without_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_without_directives(v) for v in value]
    return value


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any], schema: Strategy) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        directive = patch.pop(_DIRECTIVE)
        if directive == "replace":
            return patch
        if directive == "delete":
            return {}
        patch[_DIRECTIVE] = directive
        raise _PlainError(f"unknown patch type: {directive} in map: {_go(patch)}")
    original = {} if original is None else original
    _retain_keys(original, patch)
    _set_element_orders(original, patch, schema)
    for key, value in patch.items():
        delete_list = key.startswith(_DELETE_FROM_PRIMITIVES)
        name = key[len(_DELETE_FROM_PRIMITIVES) :] if delete_list else key
        if value is None:
            original.pop(name, None)
            continue
        if name not in original:
            original[name] = value
            continue
        live = original[name]
        if _category(live) != _category(value):
            original[name] = value
        elif isinstance(live, dict):
            original[name] = _merge_map(live, value, schema.of(name))
        elif isinstance(live, list):
            original[name] = (
                _merge_list(live, value, schema.of(name), delete_list) if schema.of(name).merge else value
            )
        else:
            original[name] = value
    return original


def _category(value: Any) -> str:
    return "map" if isinstance(value, dict) else "list" if isinstance(value, list) else "scalar"


def _retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retained = patch.pop(_RETAIN_KEYS)
    if not isinstance(retained, list):
        raise _BadRequest("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVES, _SET_ORDER)):
            continue
        if key not in retained:
            raise _BadRequest("invalid patch format of retainKeys")
    for key in [k for k in original if k not in retained]:
        del original[key]


def _set_element_orders(original: dict[str, Any], patch: dict[str, Any], schema: Strategy) -> None:
    """``mergePatchIntoOriginal``: each ``$setElementOrder/<list>`` with its list, merged and ordered."""
    for directive in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(directive)
        name = directive[len(_SET_ORDER) :]
        if not isinstance(order, list):
            raise _BadRequest("invalid patch format of setElementOrder list")
        found_live, found_patch = name in original, name in patch
        live = original.get(name) if found_live else []
        sent = patch.get(name) if found_patch else []
        if not isinstance(live, list) or not isinstance(sent, list):
            raise _BadRequest("invalid patch format of setElementOrder list")
        strategy = schema.of(name)
        if found_live and found_patch:
            merged = _merge_list(live, sent, strategy, False) if strategy.merge else sent
        elif found_patch:
            merged = sent
        elif found_live:
            merged = live
        else:
            continue
        in_order, server_only = _partition(merged, order, strategy.key)
        original[name] = _normalize(in_order, server_only, order, live, strategy.key)
        patch.pop(name, None)


def _merge_list(original: list[Any], patch: list[Any], strategy: Strategy, delete_list: bool) -> list[Any]:
    if not original and not patch:
        return original
    kinds = {_category(v) for v in [*original, *patch]}
    if "list" in kinds:
        raise _Unprocessable("lists of lists are not supported")
    if len(kinds) > 1:
        raise _PlainError(f"list element types are not identical: {_go([original, patch])}")
    key = strategy.key
    if "map" not in kinds:
        if delete_list:
            return [v for v in original if v not in patch]
        merged = _deduplicated([*original, *patch])
        key = None
    else:
        if key is None:
            raise _PlainError("cannot merge lists without merge key for type map")
        original, patch = _special_items(original, patch, key)
        merged = list(original)
        for item in patch:
            if key not in item:
                raise _no_merge_key(item, key)
            at = _index(merged, item, key)
            if at >= 0:
                merged[at] = _merge_map(merged[at], item, strategy)
            else:
                merged.append(item)
    in_patch, server_only = _partition(merged, patch, key)
    return _normalize(in_patch, server_only, patch, original, key)


def _deduplicated(items: list[Any]) -> list[Any]:
    """``deduplicateScalars``: a later duplicate is overwritten by the last item."""
    items = list(items)
    length = len(items) - 1
    i = 0
    while i < length:
        j = i + 1
        while j <= length:
            if items[i] == items[j]:
                items[j] = items[length]
                items = items[:length]
                length -= 1
                j -= 1
            j += 1
        i += 1
    return items


def _special_items(original: list[Any], patch: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    """``mergeSliceWithSpecialElements``: ``$patch`` items applied; the plain ones left to merge."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
        elif item[_DIRECTIVE] == "delete":
            if key not in item:
                raise _no_merge_key(item, key)
            original = [o for o in original if not (isinstance(o, dict) and o.get(key) == item[key])]
        elif item[_DIRECTIVE] == "replace":
            replace = True
        elif item[_DIRECTIVE] == "merge":
            raise _PlainError("merging lists cannot yet be specified in the patch")
        else:
            raise _PlainError(f"unknown patch type: {item[_DIRECTIVE]} in map: {_go(item)}")
    return (plain, []) if replace else (original, plain)


def _index(items: list[Any], wanted: Any, key: str | None) -> int:
    """Where ``wanted`` is in ``items`` (by merge key value for maps), or -1."""
    for at, item in enumerate(items):
        if key is None:
            if item == wanted:
                return at
        elif isinstance(item, dict) and isinstance(wanted, dict) and item.get(key) == wanted.get(key):
            return at
    return -1


def _partition(merged: list[Any], by: list[Any], key: str | None) -> tuple[list[Any], list[Any]]:
    inside = [v for v in merged if _index(by, v, key) >= 0]
    return inside, [v for v in merged if _index(by, v, key) < 0]


def _normalize(
    in_patch: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    key: str | None,
) -> list[Any]:
    """``normalizeElementOrder``: patch items in the patch's order, server-only items in the live
    order, then interleaved by the live order (an item the live list lacks goes first)."""
    left = _sorted_by(server_only, server_order, key)
    right = _sorted_by(in_patch, patch_order, key)
    result: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            result.append(right[j])
            j += 1
        elif j >= len(right):
            result.append(left[i])
            i += 1
        else:
            li, ri = _index(server_order, left[i], key), _index(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                result.append(left[i])
                i += 1
            else:
                result.append(right[j])
                j += 1
    return result


def _sorted_by(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    if key is not None:
        for item in [*items, *order]:
            if not isinstance(item, dict) or key not in item:
                raise _no_merge_key(item if isinstance(item, dict) else {}, key)
        deleting = [v for v in items if v.get(_DIRECTIVE) == "delete"]
        items = [v for v in items if v.get(_DIRECTIVE) != "delete"]
    else:
        deleting = []
    ranked = sorted(items, key=lambda v: i if (i := _index(order, v, key)) >= 0 else len(order))
    return ranked + deleting
