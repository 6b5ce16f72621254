"""``metadata.managedFields`` and server-side apply, as the API server's field manager keeps them.

Why: every write to a real API server records who set which field (``managedFields``: one entry per
manager and operation, its fields as a ``FieldsV1`` set), and an apply patch
(``application/apply-patch+yaml``, ``kubectl apply --server-side``) is judged against that record:

* a field the apply sets to another value than the stored one, owned by another manager, is a
  conflict: 409 ``Conflict`` whose message lists the managers and fields (``Apply failed with 1
  conflict: conflict with "kubectl-edit" using v1: .data.k``) and whose ``details.causes`` hold one
  ``FieldManagerConflict`` per field, nothing written; ``force=true`` takes the fields over instead;
* a field the same applier set last time and leaves out now is removed, unless another manager
  owns it too (then only the applier's ownership goes);
* any other write (create, update, merge/strategic/JSON patch, ``/scale``) never conflicts: its
  manager (``fieldManager``, else the User-Agent's first segment, as ``prefixFromUserAgent`` takes
  it) takes the fields it changed from whoever owned them.

The fake treated an apply as a merge patch: no conflicts, no removals, no ``managedFields``. So a
client (or a test) that applied and then stopped setting a field kept it here and lost it on a
cluster, and one applying over a field someone changed with ``kubectl edit`` succeeded here and got
409 on a cluster.

Fields the API server's defaulting adds are no applier's (ownership comes from the apply
configuration) and an updater's (it owns what changed), as on a cluster; but the fake defaults only a
Deployment's ``spec.replicas`` and CRD schema defaults. Not modelled: lists of built-in kinds are
merged by the keys in :data:`_BUILTIN_LIST_KEYS` and :data:`_BUILTIN_KIND_LIST_KEYS` only (any other
list is atomic, which most are), conflicts between an apply and an ``Update`` entry of the
same manager name (the API server keeps them apart too, as different managers), ``managedFields``
validation and the conversion of fields between API versions.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from tests.fakes.kube_store import ResourceKind, StoreError

Path = tuple[str, ...]
"""A field as ``FieldsV1`` spells its steps: ``f:name`` (a field), ``k:{json}`` (an item of a
keyed list), ``v:json`` (an item of a set)."""

_SYSTEM_METADATA: Final = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)
"""Fields the field manager strips before tracking (``fieldmanager``'s ``stripMeta``)."""

_BUILTIN_LIST_KEYS: Final[Mapping[str, tuple[str, ...] | None]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "ports": ("containerPort", "protocol"),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "imagePullSecrets": ("name",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
    "conditions": ("type",),
    "ownerReferences": ("uid",),
    "finalizers": None,
}
"""Built-in lists that are not atomic: ``listType=map`` with their keys, or ``None`` for a
``listType=set`` (the kinds' OpenAPI ``x-kubernetes-list-*`` markers). ``ports`` is a container's
(keyed by ``containerPort`` and ``protocol``) but in the kinds of :data:`_BUILTIN_KIND_LIST_KEYS`."""

_BUILTIN_KIND_LIST_KEYS: Final[Mapping[str, Mapping[str, tuple[str, ...] | str | None]]] = {
    "Service": {"ports": ("port", "protocol")},
    "NetworkPolicy": {"ports": "atomic"},
    "Ingress": {"ports": "atomic"},
}
"""A kind's lists whose keys differ from the containers' lists of the same name: a Service's
``spec.ports`` are keyed by ``port`` and ``protocol``; a NetworkPolicy's and an Ingress's are atomic."""

_BUILTIN_KEY_DEFAULTS: Final[Mapping[str, Any]] = {"protocol": "TCP"}
"""Key fields of built-in keyed lists that the API server defaults, as an item's key uses them when
the item leaves them out (a port written without ``protocol`` is the ``TCP`` one: the OpenAPI
``default`` of the key field, which structured-merge-diff fills into the key)."""

_MISSING: Final = object()


@dataclass
class Entry:
    """One ``managedFields`` entry: its identity, time and field set."""

    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str
    fields: set[Path] = field(default_factory=set)

    def same_manager(self, other: Entry) -> bool:
        """The API server's manager identity: an applier's apiVersion is not part of it."""
        return (
            self.manager == other.manager
            and self.operation == other.operation
            and self.subresource == other.subresource
            and (self.operation == "Apply" or self.api_version == other.api_version)
        )

    def printed(self) -> str:
        """How a conflict names the manager (``printManager``)."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manager_from(query: Mapping[str, str], user_agent: str) -> str:
    """A write's manager: ``fieldManager``, else the User-Agent up to its first ``/``."""
    return query.get("fieldManager") or (user_agent.split("/")[0][:128] or "unknown")


# ---- field sets ----------------------------------------------------------------------------------
def _child_schema(schema: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    if isinstance(props, Mapping) and name in props:
        return props[name]  # type: ignore[no-any-return]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def _list_keys(
    kind: ResourceKind, schema: Mapping[str, Any] | None, name: str
) -> tuple[str, ...] | str | None:
    """``listType=map``: its keys; ``set``: ``None``; atomic: ``"atomic"``."""
    if kind.schema is None:
        overrides = _BUILTIN_KIND_LIST_KEYS.get(kind.kind, {})
        return overrides[name] if name in overrides else _BUILTIN_LIST_KEYS.get(name, "atomic")
    if name == "finalizers":
        return None
    if name == "ownerReferences":
        return ("uid",)
    list_type = (schema or {}).get("x-kubernetes-list-type")
    if list_type == "set":
        return None
    if list_type == "map":
        return tuple((schema or {}).get("x-kubernetes-list-map-keys") or ())
    return "atomic"


def _item_key(item: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """An item's key: its key fields, a built-in key field it leaves out taking its default."""
    key = {k: item[k] for k in keys if k in item}
    for name in keys:
        if name not in key and name in _BUILTIN_KEY_DEFAULTS:
            key[name] = _BUILTIN_KEY_DEFAULTS[name]
    return key


def _matches(item: Any, want: Mapping[str, Any]) -> bool:
    """Whether ``item`` is the keyed list's item with key ``want`` (a defaulted key field counted)."""
    return isinstance(item, Mapping) and all(
        item.get(k, _BUILTIN_KEY_DEFAULTS.get(k)) == v for k, v in want.items()
    )


def _item_step(item: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    return "k:" + json.dumps(_item_key(item, keys), sort_keys=True, separators=(",", ":"))


def _set_step(item: Any) -> str:
    return "v:" + json.dumps(item, sort_keys=True, separators=(",", ":"))


def _paths(
    kind: ResourceKind, value: Any, schema: Mapping[str, Any] | None, path: Path, name: str, out: set[Path]
) -> None:
    if isinstance(value, Mapping):
        if not value and path:
            out.add(path)
        for key, child in value.items():
            _paths(kind, child, _child_schema(schema, key), (*path, f"f:{key}"), key, out)
    elif isinstance(value, list):
        keys = _list_keys(kind, schema, name)
        items = (schema or {}).get("items") if isinstance(schema, Mapping) else None
        if keys == "atomic":
            out.add(path)
        elif keys is None:
            out.update((*path, _set_step(item)) for item in value)
        else:
            for item in value:
                if not isinstance(item, Mapping):
                    out.add(path)
                    continue
                step = (*path, _item_step(item, tuple(keys)))
                out.add(step)
                _paths(kind, item, items, step, "", out)
    else:
        out.add(path)


def tracked(obj: Mapping[str, Any], subresource: str) -> dict[str, Any]:
    """What the field manager tracks of ``obj`` for a write to ``subresource`` ("" for the object):
    a ``/status`` write only the status; any other no status, no type meta, no system metadata."""
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    kept = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SYSTEM_METADATA}
    if meta:
        kept["metadata"] = meta
    return kept


def field_set(kind: ResourceKind, obj: Mapping[str, Any], subresource: str = "") -> set[Path]:
    """Every leaf field and keyed item ``obj`` sets (``ToFieldSet``)."""
    out: set[Path] = set()
    _paths(kind, tracked(obj, subresource), kind.schema, (), "", out)
    return out


def value_at(obj: Any, path: Path) -> Any:
    """The value at ``path`` in ``obj``, or :data:`_MISSING`."""
    node = obj
    for step in path:
        kind, _, rest = step.partition(":")
        if kind == "f" and isinstance(node, Mapping) and rest in node:
            node = node[rest]
        elif kind == "k" and isinstance(node, list):
            want = json.loads(rest)
            node = next((i for i in node if _matches(i, want)), _MISSING)
        elif kind == "v" and isinstance(node, list):
            want = json.loads(rest)
            node = want if want in node else _MISSING
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def _remove(obj: Any, path: Path) -> None:
    parent = value_at(obj, path[:-1])
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif isinstance(parent, list):
        item = value_at(obj, path)
        if item is not _MISSING:
            parent.remove(item)


def printed_path(path: Path) -> str:
    """A field as ``fieldpath.Path.String()`` prints it: ``.spec.containers[name="c"].image``."""
    text = ""
    for step in path:
        kind, _, rest = step.partition(":")
        if kind == "f":
            text += f".{rest}"
        elif kind == "k":
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(rest).items()) + "]"
        else:
            text += f"[={rest}]"
    return text


# ---- FieldsV1 ------------------------------------------------------------------------------------
def to_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for step in path:
            node = node.setdefault(step, {})
        node["."] = {}
    return _collapse(tree)


def _collapse(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for step, child in node.items():
        if step == ".":
            continue
        inner = _collapse(child)
        if "." in child and inner:
            inner = {".": {}, **inner}
        out[step] = inner
    return out


def from_fields_v1(tree: Any, path: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(tree, Mapping):
        return out
    if path and (not tree or "." in tree):
        out.add(path)
    for step, child in tree.items():
        if step != ".":
            out |= from_fields_v1(child, (*path, step))
    return out


def entries(obj: Mapping[str, Any] | None) -> list[Entry]:
    found: list[Entry] = []
    for raw in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        if isinstance(raw, Mapping):
            found.append(
                Entry(
                    manager=str(raw.get("manager", "")),
                    operation=str(raw.get("operation", "Update")),
                    api_version=str(raw.get("apiVersion", "")),
                    subresource=str(raw.get("subresource", "")),
                    time=str(raw.get("time", "")),
                    fields=from_fields_v1(raw.get("fieldsV1")),
                )
            )
    return found


def _store(obj: dict[str, Any], kept: list[Entry]) -> None:
    meta = obj.setdefault("metadata", {})
    rendered = []
    for entry in kept:
        if not entry.fields:
            continue
        raw: dict[str, Any] = {
            "manager": entry.manager,
            "operation": entry.operation,
            "apiVersion": entry.api_version,
            "time": entry.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(entry.fields),
        }
        if entry.subresource:
            raw["subresource"] = entry.subresource
        rendered.append(raw)
    if rendered:
        meta["managedFields"] = rendered
    else:
        meta.pop("managedFields", None)


def _base(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[Entry]:
    """The entries a write starts from: those it sends (a client resetting them), else the stored
    ones (a write that leaves ``managedFields`` out, or sends ``[]``, keeps them)."""
    sent = (new.get("metadata") or {}).get("managedFields")
    return entries(new) if sent else entries(current)


def _touch(entry: Entry, before: set[Path]) -> None:
    if entry.fields != before:
        entry.time = now()


# ---- writes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Updater:
    """A write other than an apply, by ``manager``, to ``subresource`` ("" for the object)."""

    kind: ResourceKind
    manager: str
    subresource: str = ""

    def record(self, current: Mapping[str, Any] | None, new: dict[str, Any]) -> None:
        """Set ``new``'s ``managedFields``: the manager owns what it changed, no one owns what is gone."""
        kept = _base(current, new)
        scope = "status" if self.subresource == "status" else ""
        changed = {
            p
            for p in field_set(self.kind, new, scope)
            if current is None or value_at(current, p) != value_at(new, p)
        }
        for entry in kept:
            before = set(entry.fields)
            entry.fields = {p for p in entry.fields - changed if value_at(new, p) is not _MISSING}
            _touch(entry, before)
        me = Entry(self.manager, "Update", self.kind.api_version, self.subresource, now())
        mine = next((e for e in kept if e.same_manager(me)), None)
        if mine is None and changed:
            kept.append(me)
            mine = me
        if mine is not None and changed - mine.fields:
            mine.fields |= changed
            mine.time = now()
        _store(new, kept)


@dataclass(frozen=True)
class Applier:
    """An apply that creates the object: the manager owns every field it applied, and no field the
    API server's defaulting (a Deployment's ``spec.replicas``, a CRD schema's ``default``) added.

    Why: the field manager sets ownership from the apply configuration before the object is
    defaulted, so a defaulted field is no one's and another manager may apply it without conflict.
    The fake recorded the created object's fields, so an HPA or a user applying ``spec.replicas`` to a
    Deployment applied without it was refused 409 here and succeeds on a cluster."""

    kind: ResourceKind
    manager: str
    applied: Mapping[str, Any]

    def record(self, current: Mapping[str, Any] | None, new: dict[str, Any]) -> None:
        owned = {p for p in field_set(self.kind, self.applied) if value_at(new, p) is not _MISSING}
        _store(new, [Entry(self.manager, "Apply", self.kind.api_version, "", now(), owned)])


def _merge(kind: ResourceKind, live: Any, applied: Any, schema: Mapping[str, Any] | None, name: str) -> Any:
    """``applied`` merged into ``live`` as server-side apply merges: maps key by key, keyed lists item
    by item, sets as a union, atomic lists and scalars replaced."""
    if isinstance(applied, Mapping) and isinstance(live, Mapping):
        merged = dict(live)
        for key, value in applied.items():
            child = _child_schema(schema, key)
            merged[key] = _merge(kind, live[key], value, child, key) if key in live else copy.deepcopy(value)
        return merged
    if isinstance(applied, list) and isinstance(live, list):
        keys = _list_keys(kind, schema, name)
        if keys == "atomic":
            return copy.deepcopy(applied)
        if not isinstance(keys, tuple):
            return [*live, *(copy.deepcopy(i) for i in applied if i not in live)]
        items = (schema or {}).get("items") if isinstance(schema, Mapping) else None
        merged_items = list(live)
        for item in applied:
            if not isinstance(item, Mapping):
                continue
            want = _item_key(item, keys)
            at = next((n for n, i in enumerate(merged_items) if _matches(i, want)), None)
            if at is None:
                merged_items.append(copy.deepcopy(item))
            else:
                merged_items[at] = _merge(kind, merged_items[at], item, items, "")
        return merged_items
    return copy.deepcopy(applied)


def conflict_error(conflicts: list[tuple[Path, Entry]]) -> StoreError:
    """The API server's 409 for an apply's conflicts (``internal.NewConflictError``), word for word."""
    causes = [
        {"type": "FieldManagerConflict", "message": f"conflict with {e.printed()}", "field": printed_path(p)}
        for p, e in conflicts
    ]
    if len(conflicts) == 1:
        path, entry = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {entry.printed()}: {printed_path(path)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for path, entry in conflicts:
            by_manager.setdefault(entry.printed(), []).append(printed_path(path))
        lines: list[str] = []
        for manager in sorted(by_manager):
            lines.append(f"conflicts with {manager}:")
            lines.extend(f"- {p}" for p in by_manager[manager])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return StoreError(409, "Conflict", message, details={"causes": causes})


def _duplicates(
    kind: ResourceKind, value: Any, schema: Mapping[str, Any] | None, path: Path, name: str, out: list[str]
) -> None:
    if isinstance(value, Mapping):
        for key, child in value.items():
            _duplicates(kind, child, _child_schema(schema, key), (*path, f"f:{key}"), key, out)
        return
    if not isinstance(value, list):
        return
    keys = _list_keys(kind, schema, name)
    if not isinstance(keys, tuple):
        return
    items = (schema or {}).get("items") if isinstance(schema, Mapping) else None
    seen: set[str] = set()
    reported: set[str] = set()
    for item in value:
        if not isinstance(item, Mapping):
            continue
        step = _item_step(item, keys)
        if step in seen and step not in reported:
            reported.add(step)
            key = printed_path((step,))
            out.append(f"{printed_path(path)}: duplicate entries for key {key}")
        seen.add(step)
        _duplicates(kind, item, items, (*path, step), "", out)


def check_no_duplicates(kind: ResourceKind, applied: Mapping[str, Any]) -> None:
    """Refuse an apply configuration listing one key twice in a keyed list (an env var, a container,
    a port): the field manager cannot type it (500, ``failed to create typed patch object``, reason
    unset, as the API server answers an error that is no ``Status``).

    Why: the fake stored both items on create and kept the last on update, so a chart or manifest
    naming an env var twice installed here and fails its server-side apply on a cluster."""
    problems: list[str] = []
    _duplicates(kind, applied, kind.schema, (), "", problems)
    if not problems:
        return
    sent_meta = applied.get("metadata")
    meta: Mapping[str, Any] = sent_meta if isinstance(sent_meta, Mapping) else {}
    group_version = f"{kind.group}/{kind.version}" if kind.group else f"/{kind.version}"
    named = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    where = f"{named}; {group_version}, Kind={applied.get('kind') or ''}"
    detail = problems[0] if len(problems) == 1 else "errors:\n" + "\n".join(f"  {p}" for p in problems)
    raise StoreError(500, "", f"failed to create typed patch object ({where}): {detail}")


def apply(
    kind: ResourceKind,
    current: Mapping[str, Any],
    applied: Mapping[str, Any],
    *,
    manager: str,
    force: bool,
    subresource: str = "",
) -> dict[str, Any]:
    """``current`` with the apply configuration ``applied`` merged in, its ``managedFields`` set;
    :class:`StoreError` 409 on a conflict unless ``force``."""
    scope = "status" if subresource == "status" else ""
    config = tracked(applied, scope)
    wanted = field_set(kind, applied, scope)
    kept = entries(current)
    me = Entry(manager, "Apply", kind.api_version, subresource, now())
    mine = next((e for e in kept if e.same_manager(me)), None)
    if mine is None:
        kept.append(me)
        mine = me
    others = [e for e in kept if e is not mine]
    conflicts = [
        (path, entry)
        for entry in others
        for path in sorted(wanted & entry.fields)
        if _differs(current, applied, path)
    ]
    if conflicts and not force:
        raise conflict_error(conflicts)
    taken = {path for path, _ in conflicts}
    for entry in others:
        before = set(entry.fields)
        entry.fields -= taken
        _touch(entry, before)
    held = set().union(*(e.fields for e in others)) | wanted
    live: dict[str, Any] = copy.deepcopy(dict(current))
    # Outermost first: a keyed item goes whole, before its key fields are gone (once they are, the
    # item no longer has the key that finds it, and an emptied ``{}`` stayed in the list).
    for path in sorted(mine.fields - held, key=len):
        if not any(other[: len(path)] == path for other in held):
            _remove(live, path)
    merged: dict[str, Any] = _merge(kind, live, config, kind.schema, "")
    before = set(mine.fields)
    mine.fields = wanted
    _touch(mine, before)
    for entry in kept:
        entry.fields = {p for p in entry.fields if value_at(merged, p) is not _MISSING}
    _store(merged, kept)
    return merged


def _differs(current: Mapping[str, Any], applied: Mapping[str, Any], path: Path) -> bool:
    have, want = value_at(current, path), value_at(applied, path)
    if path and path[-1].startswith("k:"):  # an item: its membership, its fields are judged apart
        return have is _MISSING
    return bool(have != want)
