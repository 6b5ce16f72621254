"""An operator older than the InferenceGatewayConfig CRD the API server serves: version skew.

The operator checks each spec against its own bundled schema, which is closed. Helm (and an EKS
add-on update) applies the new CRD before the new operator's pods take the lease, and the API server
defaults every stored object under the CRD it serves on each read: a pass of the previous operator
in that window reads a field the newer CRD added and defaulted (``serverLimits.futureField: 0``) in
every config that has its parent, and refused them all (``unknown field``, a Warning Event).

The rule, per field this operator's schema does not know (``schema.unknown-field``), looked up in
the served CRD's schema (:class:`ServedSchema`, read from the API server only when such a field
shows, kept per CRD generation):

* declared by the served CRD with a ``default``, and the value is that default (after the CRD's
  nested defaults, as the API server applies them): a newer version's default, which asks for
  nothing. It is left out of the served document (a gateway as old as this operator would refuse it
  too) and the object stays admitted; the reconciler notes it once per generation (INFO, a Normal
  Event).
* declared by the served CRD otherwise (another value, or no default): the user asked for what this
  operator lacks. Refused, with a message naming the skew (this operator's version, the CRD's
  generation) instead of a bare "unknown field".
* not declared by the served CRD either (a typo; or the CRD could not be read): refused as before.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from igw import __version__
from igw.config.crd import CRD_NAME
from igw.config.errors import Problem
from igw.config.jsonpath import PathPart, parse_path
from igw.config.model import API_VERSION
from igw.config.validate import validate_document
from igw.operator.dataplane import served_document

UNKNOWN_FIELD_RULE = "schema.unknown-field"
SKEW_RULE = "crd-newer-than-operator"
"""The rule of a refusal of a field the served CRD declares and this operator does not know."""


@dataclass(frozen=True, slots=True)
class ServedSchema:
    """The ``openAPIV3Schema`` of the InferenceGatewayConfig version this operator reads, as the
    served CRD declares it, and the CRD's ``metadata.generation`` (named in refusals)."""

    generation: int | None
    root: Mapping[str, Any]


def served_schema(crd: Mapping[str, Any]) -> ServedSchema | None:
    """``crd``'s schema of the version :data:`igw.config.model.API_VERSION`; ``None`` when it has none."""
    versions = (crd.get("spec") or {}).get("versions") or []
    for version in versions if isinstance(versions, list) else []:
        if isinstance(version, Mapping) and version.get("name") == API_VERSION:
            root = (version.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(root, Mapping):
                generation = (crd.get("metadata") or {}).get("generation")
                return ServedSchema(generation if isinstance(generation, int) else None, root)
    return None


@dataclass(frozen=True, slots=True)
class Skew:
    """What :func:`resolve_skew` made of the unknown fields of one object."""

    igwc: Mapping[str, Any]
    """The object without the newer version's defaults (``igwc`` itself when there were none)."""
    problems: tuple[Problem, ...]
    """The problems of ``igwc`` (the served document): those of the fields the served CRD declares
    with another value under :data:`SKEW_RULE`, saying so."""
    dropped: tuple[str, ...] = ()
    """Paths of the fields left out: a newer CRD's defaults."""


def declared(root: Mapping[str, Any], parts: Sequence[PathPart]) -> Mapping[str, Any] | None:
    """The structural schema ``root`` declares at ``parts`` (``properties``, ``items``,
    ``additionalProperties``), or ``None`` when it declares nothing there."""
    node: Mapping[str, Any] = root
    for part in parts:
        if isinstance(part, int):
            items = node.get("items")
            if not isinstance(items, Mapping):
                return None
            node = items
            continue
        properties = node.get("properties")
        if isinstance(properties, Mapping) and isinstance(properties.get(part), Mapping):
            node = properties[part]
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        else:
            return None
    return node


def defaulted(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` with ``schema``'s nested defaults filled in, as the API server defaults an object."""
    if isinstance(value, Mapping):
        out = dict(value)
        properties = schema.get("properties")
        for key, sub in (properties if isinstance(properties, Mapping) else {}).items():
            if not isinstance(sub, Mapping):
                continue
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = defaulted(out[key], sub)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [defaulted(item, schema["items"]) for item in value]
    return value


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``, as in Python)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _at(document: Any, parts: Sequence[PathPart]) -> tuple[bool, Any]:
    node = document
    for part in parts:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return False, None
        elif not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _without(document: Mapping[str, Any], parts: Sequence[PathPart]) -> dict[str, Any]:
    out = copy.deepcopy(dict(document))
    node: Any = out
    for part in parts[:-1]:
        node = node[part]
    del node[parts[-1]]
    return out


def resolve_skew(igwc: Mapping[str, Any], problems: Sequence[Problem], schema: ServedSchema | None) -> Skew:
    """Apply the module's rule to ``problems``, those of ``igwc``'s served document; ``schema``:
    the served CRD's (``None`` when it could not be read: nothing is resolved)."""
    out, dropped, found = igwc, [], []
    for problem in problems:
        parts = _spec_path(problem) if schema is not None else None
        node = None if parts is None or schema is None else declared(schema.root, parts)
        present, value = (False, None) if parts is None else _at(out, parts)
        if schema is None or parts is None or node is None or not present:
            found.append(problem)  # not an unknown field, or unknown to the served CRD too (a typo)
        elif "default" in node and _same(value, defaulted(node["default"], node)):
            out = _without(out, parts)
            dropped.append(problem.path)
        else:
            message = (
                f'"{problem.path}" is declared by the served CRD {CRD_NAME} '
                f"(generation {schema.generation}) but not known to this operator (igw {__version__}): "
                "the CRD is newer than the operator, which cannot serve this setting; finish the "
                "add-on update (CRD and operator together) or take the field out"
            )
            found.append(Problem(problem.path, message, SKEW_RULE))
    if dropped:  # rare (an upgrade's window): check what is left as it will be served
        found = [
            p if p.rule != UNKNOWN_FIELD_RULE else next((f for f in found if f.path == p.path), p)
            for p in validate_document(served_document(out))
        ]
    return Skew(out, tuple(found), tuple(dropped))


def _spec_path(problem: Problem) -> list[PathPart] | None:
    """The path of an unknown field under ``spec``, else ``None``."""
    if problem.rule != UNKNOWN_FIELD_RULE:
        return None
    try:
        parts = parse_path(problem.path)
    except ValueError:
        return None
    return parts if len(parts) > 1 and parts[0] == "spec" else None
