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

The same rule holds for the InferenceObjective and InferenceModelRewrite objects bound to a config,
each field looked up in the CRD of the object's own kind (:data:`EXTENSION_CRDS`): the reconciler
resolves each object before it is merged, so a newer version's default no longer refuses the object.

The restore of a last admitted spec (:func:`resolve_skew` with ``restoring``) adds one case: a field
this operator does not know that the served CRD does not declare either was written by a newer
operator (the spec was admitted, so each of its fields was known to the operator that admitted it),
and the CRD was rolled back with this operator. It is dropped (:attr:`Skew.withdrawn`, reported), as
the API server prunes it from the object itself after the rollback: refused, no data plane was put
back at all. A field the served CRD declares follows the rule above; unreadable CRD: refused.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from igw import __version__
from igw.config.crd import CRD_NAME
from igw.config.errors import Problem
from igw.config.inference_extension import GROUP as EXTENSION_GROUP
from igw.config.inference_extension import VERSION as EXTENSION_VERSION
from igw.config.inference_extension_crds import PLURALS as EXTENSION_PLURALS
from igw.config.jsonpath import PathPart, parse_path
from igw.config.model import API_VERSION
from igw.config.validate import validate_document
from igw.operator.dataplane import served_document

UNKNOWN_FIELD_RULE = "schema.unknown-field"
SKEW_RULE = "crd-newer-than-operator"
"""The rule of a refusal of a field the served CRD declares and this operator does not know."""
EXTENSION_CRDS: Mapping[str, tuple[str, str]] = {
    kind: (f"{plural}.{EXTENSION_GROUP}", EXTENSION_VERSION) for kind, plural in EXTENSION_PLURALS.items()
}
"""The CRD name and version an InferenceObjective's or InferenceModelRewrite's fields are looked up in."""


@dataclass(frozen=True, slots=True)
class ServedSchema:
    """The ``openAPIV3Schema`` of the version this operator reads, as the served CRD declares it,
    the CRD's ``metadata.generation`` and its name (both named in refusals)."""

    generation: int | None
    root: Mapping[str, Any]
    name: str = CRD_NAME


def served_schema(crd: Mapping[str, Any], version: str = API_VERSION) -> ServedSchema | None:
    """``crd``'s schema of ``version`` (the InferenceGatewayConfig's, :data:`igw.config.model.API_VERSION`,
    unless given); ``None`` when it has none."""
    versions = (crd.get("spec") or {}).get("versions") or []
    meta = crd.get("metadata") or {}
    for entry in versions if isinstance(versions, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == version:
            root = (entry.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(root, Mapping):
                generation = meta.get("generation")
                generation = generation if isinstance(generation, int) else None
                return ServedSchema(generation, root, str(meta.get("name") or CRD_NAME))
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
    withdrawn: tuple[str, ...] = ()
    """Paths of the fields left out of a restored spec that the served CRD does not declare (only
    with ``restoring``): written by a newer operator, whose CRD was rolled back."""


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


def _served_problems(igwc: Mapping[str, Any]) -> Sequence[Problem]:
    return validate_document(served_document(igwc))


def resolve_skew(
    igwc: Mapping[str, Any],
    problems: Sequence[Problem],
    schema: ServedSchema | None,
    *,
    validate: Callable[[Mapping[str, Any]], Sequence[Problem]] = _served_problems,
    restoring: bool = False,
) -> Skew:
    """Apply the module's rule to ``problems``, those of ``igwc`` (an InferenceGatewayConfig's served
    document, or with ``validate`` another kind's object, e.g.
    :func:`igw.config.inference_extension.validate_resource`); ``schema``: the served CRD's of the
    object's kind (``None`` when it could not be read: nothing is resolved). ``restoring``: ``igwc``
    holds a last admitted spec; a field the served CRD does not declare is dropped too."""
    out, dropped, withdrawn, found = igwc, [], [], []
    for problem in problems:
        parts = _spec_path(problem) if schema is not None else None
        node = None if parts is None or schema is None else declared(schema.root, parts)
        present, value = (False, None) if parts is None else _at(out, parts)
        if schema is None or parts is None or not present:
            found.append(problem)  # not an unknown field, or the CRD is unreadable
        elif node is None and restoring:
            out = _without(out, parts)  # written by a newer operator; its CRD was rolled back
            withdrawn.append(problem.path)
        elif node is None:
            found.append(problem)  # unknown to the served CRD too (a typo)
        elif "default" in node and _same(value, defaulted(node["default"], node)):
            out = _without(out, parts)
            dropped.append(problem.path)
        else:
            message = (
                f'"{problem.path}" is declared by the served CRD {schema.name} '
                f"(generation {schema.generation}) but not known to this operator (igw {__version__}): "
                "the CRD is newer than the operator, which cannot serve this setting; finish the "
                "add-on update (CRD and operator together) or take the field out"
            )
            found.append(Problem(problem.path, message, SKEW_RULE))
    if dropped or withdrawn:  # rare (an upgrade's window): check what is left as it will be served
        found = [
            p if p.rule != UNKNOWN_FIELD_RULE else next((f for f in found if f.path == p.path), p)
            for p in validate(out)
        ]
    return Skew(out, tuple(found), tuple(dropped), tuple(withdrawn))


def _spec_path(problem: Problem) -> list[PathPart] | None:
    """The path of an unknown field under ``spec``, else ``None``."""
    if problem.rule != UNKNOWN_FIELD_RULE:
        return None
    try:
        parts = parse_path(problem.path)
    except ValueError:
        return None
    return parts if len(parts) > 1 and parts[0] == "spec" else None
