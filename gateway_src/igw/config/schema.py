"""Load the contract from ``schemas/``: the main JSON Schema, its extensions, the admission rules.

``schemas/inferencegatewayconfig.schema.json`` is AWS's documented shape. Our own fields live
under ``spec.extensions``; each file ``schemas/extensions/<name>.schema.json`` defines
``spec.extensions.<name>`` and is picked up automatically (components add files, nobody edits the
main schema). :func:`resolved_schema` returns the whole thing with every ``$ref`` inlined - the form
both the Python validator and the CRD generator (a structural schema allows no ``$ref``) need.

Results are cached per folder and invalidated when any contract file changes, so a long-running
process (hot reload) sees an extension file that appears later.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from igw.config.paths import (
    ADMISSION_RULES_FILE,
    EXTENSION_SUFFIX,
    EXTENSIONS_SUBDIR,
    MAIN_SCHEMA_FILE,
    schemas_dir,
)
from igw.errors import IgwConfigError

EXTENSION_NAME: Final = re.compile(r"^[a-z][A-Za-z0-9]*$")
"""Extension names are camelCase field names (``routing``, ``rateLimits``)."""

_LOCAL_REF: Final = "#/$defs/"


class SchemaError(IgwConfigError, RuntimeError):
    """A file in ``schemas/`` is itself broken (a bug in the contract, not in a user's document)."""


@dataclass(frozen=True, slots=True)
class AdmissionRule:
    """One cross-field rule (see ``schemas/admission-rules.yaml`` for the field meanings)."""

    id: str
    scope: tuple[str, ...]
    """Schema location: property names, with ``[]`` for "each item of the list before it"."""
    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    @property
    def scope_text(self) -> str:
        return ".".join(self.scope).replace(".[]", "[]")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read schema: {exc}") from exc
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: a schema must be a JSON object")
    return data


def inline_refs(schema: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """Return ``schema`` with every local ``$ref`` (``#/$defs/<name>``) replaced by its target.

    Keywords next to a ``$ref`` override the target's (a ``description`` at the use site wins).
    ``$defs`` disappears from the result. Only local references are supported; anything else, and
    reference cycles, raise :class:`SchemaError` - a structural CRD schema cannot express them.
    """
    defs = schema.get("$defs", {})

    def walk(node: Any, trail: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(item, trail) for item in node]
        if not isinstance(node, dict):
            return node
        result: dict[str, Any] = {}
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str) or not ref.startswith(_LOCAL_REF):
                raise SchemaError(
                    f"{source}: only local references ({_LOCAL_REF}<name>) are supported: {ref!r}"
                )
            name = ref[len(_LOCAL_REF) :]
            if name not in defs:
                raise SchemaError(f"{source}: {ref!r} points to nothing")
            if name in trail:
                raise SchemaError(f"{source}: reference cycle through {' -> '.join((*trail, name))}")
            result.update(walk(defs[name], (*trail, name)))
        for key, value in node.items():
            if key in {"$ref", "$defs"}:
                continue
            result[key] = walk(value, trail)
        return result

    inlined: dict[str, Any] = walk(schema, ())
    return inlined


def extension_files(folder: Path) -> dict[str, Path]:
    """``{name: path}`` of every ``extensions/<name>.schema.json`` in ``folder``, sorted by name."""
    ext_dir = folder / EXTENSIONS_SUBDIR
    if not ext_dir.is_dir():
        return {}
    found = {p.name[: -len(EXTENSION_SUFFIX)]: p for p in ext_dir.glob(f"*{EXTENSION_SUFFIX}") if p.is_file()}
    return dict(sorted(found.items()))


def load_extension_schema(name: str, path: Path) -> dict[str, Any]:
    """Load one extension schema, inlined, and check it follows the convention (closed object)."""
    if not EXTENSION_NAME.fullmatch(name):
        raise SchemaError(f"{path}: extension name {name!r} must be a camelCase field name like 'rateLimits'")
    schema = inline_refs(_read_json(path), source=str(path))
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise SchemaError(
            f"{path}: spec.extensions.{name} must be a closed object "
            '("type": "object", "additionalProperties": false)'
        )
    for key in ("$schema", "$id", "$comment"):
        schema.pop(key, None)
    return schema


def _fingerprint(folder: Path) -> tuple[tuple[str, int], ...]:
    files = [folder / MAIN_SCHEMA_FILE, folder / ADMISSION_RULES_FILE, *extension_files(folder).values()]
    stamps: list[tuple[str, int]] = []
    for path in files:
        try:
            stamps.append((str(path), path.stat().st_mtime_ns))
        except OSError:
            stamps.append((str(path), -1))
    return tuple(stamps)


@functools.lru_cache(maxsize=8)
def _resolved(folder: Path, _stamp: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    main = inline_refs(_read_json(folder / MAIN_SCHEMA_FILE), source=str(folder / MAIN_SCHEMA_FILE))
    try:
        extensions = main["properties"]["spec"]["properties"]["extensions"]
    except KeyError as exc:
        raise SchemaError(f"{folder / MAIN_SCHEMA_FILE}: spec.extensions is missing") from exc
    # Merge rather than replace: the bundled copy already has its extensions inlined.
    attached = extensions.setdefault("properties", {})
    for name, path in extension_files(folder).items():
        attached[name] = load_extension_schema(name, path)
    return main


def schema_version(folder: Path | None = None) -> tuple[Path, tuple[tuple[str, int], ...]]:
    """A key that changes whenever any contract file in ``folder`` changes (for callers' caches)."""
    where = (folder or schemas_dir()).resolve()
    return where, _fingerprint(where)


def shared_schema(folder: Path | None = None) -> Mapping[str, Any]:
    """Like :func:`resolved_schema` but the cached object itself: fast, and must not be modified."""
    return _resolved(*schema_version(folder))


def resolved_schema(folder: Path | None = None) -> dict[str, Any]:
    """The full InferenceGatewayConfig schema with extensions attached and no ``$ref`` left.

    Returns a fresh copy each time; callers may modify it.
    """
    return copy.deepcopy(_resolved(*schema_version(folder)))


@functools.lru_cache(maxsize=8)
def _rules(path: Path, _stamp: tuple[tuple[str, int], ...]) -> tuple[AdmissionRule, ...]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        items = data["rules"]
        return tuple(
            AdmissionRule(
                id=str(item["id"]),
                scope=tuple(re.sub(r"\[\]", ".[]", str(item["scope"])).split(".")),
                rule=str(item["rule"]),
                message=str(item["message"]),
                field_path=item.get("fieldPath"),
                reason=item.get("reason"),
            )
            for item in items
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise SchemaError(f"{path}: cannot read admission rules: {exc}") from exc


def admission_rules(folder: Path | None = None) -> tuple[AdmissionRule, ...]:
    """The cross-field rules from ``schemas/admission-rules.yaml``."""
    where = (folder or schemas_dir()).resolve()
    return _rules(where / ADMISSION_RULES_FILE, _fingerprint(where))
