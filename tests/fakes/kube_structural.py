"""What the real API server does to a custom resource's fields on every write: prune, default, validate.

A CRD's schema is structural. On each create, update, patch or apply of a custom resource, and
on each ``/status`` write, apiextensions decodes the object, then drops what the schema does not
declare (pruning: unknown fields, and ``null`` where the field is not ``nullable``; a node marked
``x-kubernetes-preserve-unknown-fields`` keeps its unknown fields), fills in each absent field's
``default`` (recursively, inside defaulted values too), then validates what is left (type, enum,
string length and pattern, number bounds, list sizes, required fields, ``date-time`` formats,
and the uniqueness of ``x-kubernetes-list-type`` ``map``/``set`` lists) and refuses the whole
write with 422 ``Invalid`` naming every failing field. The CEL rules come after this
(:mod:`tests.fakes.kube_cel`); :mod:`tests.fakes.kube_admission` runs the steps in order.

Without this the fake stored any object or status a test or the operator wrote, so a condition
message longer than the schema allows, a port out of range, or a field the CRD does not declare,
passed every test here and would be refused (or silently dropped) by a real cluster. Messages
follow apimachinery's wording (``status.x: Too long: may not be more than 32768 characters``).

Not modelled: ``metadata`` (the server checks ObjectMeta itself, see
:mod:`tests.fakes.kube_validation`), ``x-kubernetes-embedded-resource``, ``x-kubernetes-int-or-string``,
``allOf``/``anyOf``/``oneOf``/``not``, ``multipleOf``, ``exclusiveMinimum``/``exclusiveMaximum``,
``maxProperties``/``minProperties``, formats other than ``date-time``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tests.fakes.kube_field_errors import FieldError, quoted
from tests.fakes.kube_regexp import go_search

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def child_path(path: str, key: str) -> str:
    """``spec.x`` below ``spec``; ``spec`` below the root (whose path is empty)."""
    return f"{path}.{key}" if path else key


def child_schema(schema: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The schema of property ``key`` of an object node: declared, else ``additionalProperties``."""
    child = (schema.get("properties") or {}).get(key)
    if child is None and isinstance(schema.get("additionalProperties"), Mapping):
        child = schema["additionalProperties"]
    return child if isinstance(child, Mapping) else None


def prune(schema: Mapping[str, Any], value: Any, path: str = "", dropped: list[str] | None = None) -> Any:
    """``value`` without the fields ``schema`` does not declare, and without undeclared ``null``s.

    The path of each unknown field dropped is appended to ``dropped`` (what ``fieldValidation``
    ``Strict`` refuses and ``Warn`` warns about); dropped ``null``s are not unknown fields."""
    if isinstance(value, dict) and schema.get("type") == "object":
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, item in value.items():
            child = child_schema(schema, key)
            if child is None:
                if keep_unknown:
                    out[key] = copy.deepcopy(item)
                elif dropped is not None:
                    dropped.append(child_path(path, key))
                continue
            if item is None and not child.get("nullable"):
                continue
            out[key] = prune(child, item, child_path(path, key), dropped)
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return copy.deepcopy(value)
        return [prune(items, v, f"{path}[{i}]", dropped) for i, v in enumerate(value)]
    return copy.deepcopy(value)


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` (pruned) with each absent property's ``default`` filled in, at every depth.

    As apiextensions' structural defaulting: a default is a deep copy, and defaults inside a
    defaulted value apply too; list items and ``additionalProperties`` values are defaulted."""
    if isinstance(value, dict) and schema.get("type") == "object":
        out = dict(value)
        for key, child in (schema.get("properties") or {}).items():
            if key not in out and isinstance(child, Mapping) and "default" in child:
                out[key] = copy.deepcopy(child["default"])
        for key, item in out.items():
            child = child_schema(schema, key)
            if child is not None:
                out[key] = apply_defaults(child, item)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _type_ok(schema: Mapping[str, Any], value: Any) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    expected = schema.get("type")
    if not isinstance(expected, str):
        return True
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    return isinstance(value, _TYPES.get(expected, (object,)))


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if isinstance(value, _TYPES[name]):
            return name
    return type(value).__name__


def _date_time_ok(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return "T" in value


def is_type_error(error: FieldError) -> bool:
    """A wrong type: apiextensions then skips the CEL rules (they would see a value of the wrong type)."""
    return error.reason == "FieldValueTypeInvalid"


def problems(schema: Mapping[str, Any], value: Any, path: str) -> list[FieldError]:
    """Every way ``value`` (already pruned and defaulted) breaks ``schema``, worded as apimachinery."""
    if value is None:
        return [] if schema.get("nullable") else [FieldError(path, "FieldValueInvalid", '"null"')]
    if not _type_ok(schema, value):
        expected = "integer-or-string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        actual = _json_type(value)
        return [
            FieldError(
                path,
                "FieldValueTypeInvalid",
                f'"{actual}"',
                f'{path} in body must be of type {expected}: "{actual}"',
            )
        ]
    found: list[FieldError] = []
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        allowed = ", ".join(quoted(v) for v in enum)
        found.append(
            FieldError(path, "FieldValueNotSupported", quoted(value), f"supported values: {allowed}")
        )
    if isinstance(value, str):
        found += _string_problems(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        found += _number_problems(schema, value, path)
    elif isinstance(value, list):
        found += _list_problems(schema, value, path)
    elif isinstance(value, dict):
        found += _object_problems(schema, value, path)
    return found


def _number_problems(schema: Mapping[str, Any], value: float, path: str) -> list[FieldError]:
    found: list[FieldError] = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and (value < low or (schema.get("exclusiveMinimum") is True and value == low)):
        relation = "greater than" if schema.get("exclusiveMinimum") is True else "greater than or equal to"
        found.append(
            FieldError(path, "FieldValueInvalid", repr(value), f"{path} in body should be {relation} {low}")
        )
    if high is not None and (value > high or (schema.get("exclusiveMaximum") is True and value == high)):
        relation = "less than" if schema.get("exclusiveMaximum") is True else "less than or equal to"
        found.append(
            FieldError(path, "FieldValueInvalid", repr(value), f"{path} in body should be {relation} {high}")
        )
    return found


def _object_problems(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> list[FieldError]:
    found = [
        FieldError(child_path(path, key), "FieldValueRequired", node=path)  # ratcheted by its object
        for key in schema.get("required") or ()
        if key not in value
    ]
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.append(
            FieldError(
                path,
                "FieldValueTooMany",
                str(len(value)),
                f"must have at most {schema['maxProperties']} items",
            )
        )
    for key, item in value.items():
        child = child_schema(schema, key)
        if child is not None:
            found += problems(child, item, child_path(path, key))
    return found


def _string_problems(schema: Mapping[str, Any], value: str, path: str) -> list[FieldError]:
    found: list[FieldError] = []
    shown = quoted(value)
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(
            FieldError(
                path, "FieldValueTooLong", detail=f"may not be more than {schema['maxLength']} characters"
            )
        )
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.append(
            FieldError(
                path,
                "FieldValueInvalid",
                shown,
                f"{path} in body should be at least {schema['minLength']} chars long",
            )
        )
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not go_search(pattern, value):
        found.append(FieldError(path, "FieldValueInvalid", shown, f"{path} in body should match '{pattern}'"))
    if schema.get("format") == "date-time" and not _date_time_ok(value):
        found.append(
            FieldError(path, "FieldValueInvalid", shown, f"{path} in body must be of type date-time")
        )
    return found


def _list_problems(schema: Mapping[str, Any], value: list[Any], path: str) -> list[FieldError]:
    found: list[FieldError] = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(
            FieldError(
                path, "FieldValueTooMany", str(len(value)), f"must have at most {schema['maxItems']} items"
            )
        )
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.append(
            FieldError(
                path,
                "FieldValueInvalid",
                str(len(value)),
                f"{path} in body should have at least {schema['minItems']} items",
            )
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
            found.append(FieldError(f"{path}[{index}]", "FieldValueDuplicate", quoted(shown)))
        seen.add(identity)
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            found += problems(items, item, f"{path}[{index}]")
    return found
