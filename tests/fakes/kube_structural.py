"""What the real API server does to a custom resource's ``status`` on a ``/status`` write.

A CRD's schema is structural: on every write the API server first drops what the schema does not
declare (pruning: unknown fields, and ``null`` where the field is not ``nullable``; a node marked
``x-kubernetes-preserve-unknown-fields`` keeps its unknown fields), then validates what is left
(type, enum, string length and pattern, number bounds, list sizes, required fields, ``date-time``
formats, and the uniqueness of ``x-kubernetes-list-type`` ``map``/``set`` lists) and refuses the
whole write with 422 ``Invalid`` naming every failing field. Without this the fake stored any
status an operator wrote, so a condition message longer than the schema allows, or a status field
the CRD does not declare, passed every test here and would be refused (or silently dropped) by a
real cluster. Messages follow apimachinery's wording (``status.x: Too long: may not be more than
32768 characters``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def prune(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` without the fields ``schema`` does not declare, and without undeclared ``null``s."""
    if isinstance(value, dict) and schema.get("type") == "object":
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, item in value.items():
            child = properties.get(key)
            if child is None and isinstance(extra, Mapping):
                child = extra
            if child is None:
                if keep_unknown:
                    out[key] = copy.deepcopy(item)
                continue
            if item is None and not child.get("nullable"):
                continue
            out[key] = prune(child, item)
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        items = schema.get("items")
        return [prune(items, v) if isinstance(items, Mapping) else v for v in value]
    return copy.deepcopy(value)


def _type_ok(expected: str, value: Any) -> bool:
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    return isinstance(value, _TYPES.get(expected, (object,)))


def _date_time_ok(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def _quoted(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def problems(schema: Mapping[str, Any], value: Any, path: str) -> list[str]:
    """Every way ``value`` (already pruned) breaks ``schema``, as ``path: Reason: detail`` lines."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: Invalid value: null"]
    expected = schema.get("type")
    if isinstance(expected, str) and not _type_ok(expected, value):
        return [f'{path}: Invalid value: "{type(value).__name__}": {path} in body must be of type {expected}']
    found: list[str] = []
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        allowed = ", ".join(_quoted(v) for v in enum)
        found.append(f"{path}: Unsupported value: {_quoted(value)}: supported values: {allowed}")
    if isinstance(value, str):
        found += _string_problems(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{path}: Invalid value: {value}: {path} in body should be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{path}: Invalid value: {value}: {path} in body should be <= {schema['maximum']}")
    elif isinstance(value, list):
        found += _list_problems(schema, value, path)
    elif isinstance(value, dict):
        for key in schema.get("required") or ():
            if key not in value:
                found.append(f"{path}.{key}: Required value")
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key, extra if isinstance(extra, Mapping) else None)
            if isinstance(child, Mapping):
                found += problems(child, item, f"{path}.{key}")
    return found


def _string_problems(schema: Mapping[str, Any], value: str, path: str) -> list[str]:
    found: list[str] = []
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(f"{path}: Too long: may not be more than {schema['maxLength']} characters")
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.append(
            f'{path}: Invalid value: "{value}": {path} in body should be at least '
            f"{schema['minLength']} chars long"
        )
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not re.search(pattern, value):
        found.append(f"{path}: Invalid value: \"{value}\": {path} in body should match '{pattern}'")
    if schema.get("format") == "date-time" and not _date_time_ok(value):
        found.append(f'{path}: Invalid value: "{value}": {path} in body must be of type date-time')
    return found


def _list_problems(schema: Mapping[str, Any], value: list[Any], path: str) -> list[str]:
    found: list[str] = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(f"{path}: Too many: {len(value)}: must have at most {schema['maxItems']} items")
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.append(
            f"{path}: Invalid value: {len(value)}: {path} in body should have at least "
            f"{schema['minItems']} items"
        )
    list_type = schema.get("x-kubernetes-list-type")
    keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
    seen: set[Any] = set()
    for index, item in enumerate(value):
        if list_type == "map" and isinstance(item, dict):
            identity: Any = tuple(repr(item.get(k)) for k in keys)
        elif list_type == "set":
            identity = repr(item)
        else:
            continue
        if identity in seen:
            shown = item if list_type == "set" else {k: item.get(k) for k in keys}
            found.append(f"{path}[{index}]: Duplicate value: {_quoted(shown)}")
        seen.add(identity)
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            found += problems(items, item, f"{path}[{index}]")
    return found


def checked_status(version_schema: Mapping[str, Any], status: Any) -> tuple[Any, list[str]]:
    """The status as stored after pruning, and the ``Invalid`` causes that refuse the write."""
    schema = (version_schema.get("properties") or {}).get("status")
    if not isinstance(schema, Mapping) or status is None:
        return status, []
    pruned = prune(schema, status)
    return pruned, problems(schema, pruned, "status")
