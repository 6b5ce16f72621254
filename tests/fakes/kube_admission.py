"""A custom resource write, admitted as apiextensions admits it: prune, default, validate, CEL.

The API server's order for every create, update, patch and apply of a custom resource whose CRD
declares a structural schema (Kubernetes docs, "Extend the Kubernetes API with
CustomResourceDefinitions": pruning, defaulting, validation, validation rules):

1. decode, and drop unknown fields (``fieldValidation=Strict`` refuses them instead: 400
   ``BadRequest`` ``strict decoding error: unknown field "spec.x"``; ``Warn``, the default, answers
   a warning per field) - :func:`tests.fakes.kube_structural.prune`;
2. fill in ``default`` s - :func:`tests.fakes.kube_structural.apply_defaults`;
3. validate the OpenAPI schema - :func:`tests.fakes.kube_structural.problems`;
4. evaluate the ``x-kubernetes-validations`` CEL rules - :func:`tests.fakes.kube_cel.rule_errors` -
   unless step 3 found a value of the wrong type (then the rules are not run and one cause says
   "some validation rules were not checked", as the API server does).

On an update, an error on a value the write left unchanged is let through (validation ratcheting,
GA in Kubernetes 1.33, the version the fake reports), except a transition rule's. Any remaining
cause refuses the whole write with 422 ``Invalid`` (nothing is stored); otherwise the pruned,
defaulted object is what is stored and returned. ``metadata``, ``apiVersion`` and ``kind`` are the
server's (checked by :mod:`tests.fakes.kube_validation`); a CEL rule on the root sees only
``metadata.name`` and ``metadata.generateName``, as in Kubernetes. On a kind with a ``/status``
subresource, writes of the main resource leave ``status`` to the ``/status`` writes, which are
admitted the same way against the schema's ``status`` node (:func:`admit_status`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from tests.fakes.kube_cel import rule_errors
from tests.fakes.kube_field_errors import FieldError
from tests.fakes.kube_structural import apply_defaults, is_type_error, problems, prune

_SERVER_FIELDS: Final = ("apiVersion", "kind", "metadata")
_UNCHECKED_RULES: Final = FieldError(
    "<nil>",
    "FieldValueInvalid",
    '"null"',
    "some validation rules were not checked because the object was invalid; correct the existing "
    "errors to complete validation",
)


@dataclass(frozen=True, slots=True)
class Admission:
    """What became of one write: the object to store, the unknown fields dropped, the causes."""

    object: dict[str, Any]
    unknown_fields: tuple[str, ...]
    errors: tuple[FieldError, ...]


_MISSING: Final = object()
_PATH_PART: Final = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


def _value_at(value: Any, path: str) -> Any:
    """The value at an error's field path (``spec.x[0].y``), or ``_MISSING``."""
    for key, index in _PATH_PART.findall(path):
        if key and isinstance(value, dict):
            value = value.get(key, _MISSING)
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return _MISSING
    return value


def _ratcheted(errors: list[FieldError], new: Any, old: Any) -> list[FieldError]:
    """Validation ratcheting (GA in Kubernetes 1.33): on an update, an error on a value the write did
    not change is let through, so an object stored under an older, looser CRD stays writable; a
    transition rule's error is never let through. Values correlate by path (list items by index)."""
    kept = []
    for error in errors:
        where = error.node if error.node is not None else error.field
        before = _value_at(old, where)
        if not error.transition and before is not _MISSING and _value_at(new, where) == before:
            continue
        kept.append(error)
    return kept


def _checked(
    schema: Mapping[str, Any], value: Any, path: str, old: Mapping[str, Any] | None, cel_view: Any
) -> tuple[Any, list[str], list[FieldError]]:
    dropped: list[str] = []
    pruned = prune(schema, value, path, dropped)
    defaulted = apply_defaults(schema, pruned)
    if old is not None:  # as the API server reads it back: pruned and defaulted on decoding
        old = apply_defaults(schema, prune(schema, old, path))
    root = {path: defaulted} if path else defaulted
    old_root = {path: old} if path else old

    def ratchet(errors: list[FieldError]) -> list[FieldError]:
        return errors if old is None else _ratcheted(errors, root, old_root)

    errors = ratchet(problems(schema, defaulted, path))
    if any(is_type_error(e) for e in errors):
        return defaulted, dropped, [*errors, _UNCHECKED_RULES]
    view = cel_view(defaulted)
    if old is None:
        errors += rule_errors(schema, view, path)
    else:
        errors += ratchet(rule_errors(schema, view, path, cel_view(old)))
    return defaulted, dropped, errors


def admit(
    schema: Mapping[str, Any],
    obj: Mapping[str, Any],
    *,
    old: Mapping[str, Any] | None = None,
    status_subresource: bool = False,
) -> Admission:
    """Admit ``obj`` (a create; an update when ``old``, the stored object, is given) under ``schema``,
    the CRD version's ``openAPIV3Schema``."""
    kept = set(_SERVER_FIELDS) | ({"status"} if status_subresource else set())
    body = {k: v for k, v in obj.items() if k not in kept}
    metadata = obj.get("metadata") or {}
    identity = {k: metadata[k] for k in ("name", "generateName") if k in metadata}

    def cel_view(value: Mapping[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in value.items() if k not in kept}, "metadata": identity}

    old_body = None if old is None else {k: v for k, v in old.items() if k not in kept}
    stored, dropped, errors = _checked(schema, body, "", old_body, cel_view)
    server_side = {k: v for k, v in obj.items() if k in kept}
    return Admission({**server_side, **stored}, tuple(dropped), tuple(errors))


def read_back(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server reads a stored custom resource back under ``schema``, the CRD
    version's current ``openAPIV3Schema``: every field but ``apiVersion``/``kind``/``metadata``
    pruned and defaulted, on every get, list and watch event. Stored objects are not rewritten when a
    CRD changes, so after a rollback to an older CRD a field only the newer schema declares is
    dropped from what clients read (and from what they write back), and after an upgrade a new
    field's ``default`` appears in objects written before it existed (apiextensions' storage pruning
    and read defaulting)."""
    body = {k: v for k, v in obj.items() if k not in _SERVER_FIELDS}
    server_side = {k: copy.deepcopy(v) for k, v in obj.items() if k in _SERVER_FIELDS}
    return {**server_side, **apply_defaults(schema, prune(schema, body))}


def admit_status(schema: Mapping[str, Any], status: Any, *, old: Any = None) -> Admission:
    """Admit a ``/status`` write's ``status`` against the schema's ``status`` node (``old``: the
    stored status). The result's ``object`` is ``{"status": ...}`` (absent status: ``{}``)."""
    node = (schema.get("properties") or {}).get("status")
    if not isinstance(node, Mapping) or status is None:
        return Admission({} if status is None else {"status": status}, (), ())
    old_status = old if isinstance(old, Mapping) else None
    stored, dropped, errors = _checked(node, status, "status", old_status, lambda value: value)
    return Admission({"status": stored}, tuple(dropped), tuple(errors))
