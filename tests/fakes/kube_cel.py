"""A CRD's ``x-kubernetes-validations`` rules, evaluated with a real CEL implementation (cel-python).

The API server evaluates every CEL rule a CRD's schema declares, on the node that declares it
(``self``), after pruning, defaulting and the OpenAPI checks, and refuses the write with one
cause per failing rule. This module does that for ANY CRD the fake serves, straight from the
CRD document's rules (not from igw's own rule list), so a custom resource a real cluster would
refuse is refused here too:

* ``message``, or ``messageExpression`` (a CEL string expression; when it errors or is empty the
  ``message`` is used, and without either ``failed rule: <rule>``);
* ``fieldPath`` (appended to the rule node's path), and ``reason`` (``FieldValueInvalid`` by default,
  ``FieldValueForbidden``, ``FieldValueRequired``, ``FieldValueDuplicate``), worded as apimachinery
  words the matching ``field.Error``;
* transition rules (those naming ``oldSelf``): evaluated only on an update, where the node has an
  old value (correlated through object properties, map values and ``x-kubernetes-list-type: map``
  items by their keys, as apiextensions does), and skipped otherwise;
* ``number`` fields are CEL doubles even when the JSON value is whole, as in Kubernetes' CEL.

Compiled programs are cached by rule text (the environment has no per-CRD declarations, so the
text is the whole program): a CRD generation's rules compile once, and a new generation or another
fake server with the same rules reuses them.

Not modelled: ``optionalOldSelf`` (such a rule is skipped when there is no old value), the
Kubernetes CEL library functions cel-python lacks (``isSorted``, ``url``, ``quantity``, ``ip``,
``cidr``, ``format``...: a rule using one fails with an evaluation error, visibly), and the CEL
cost budget at write time (``igw generate`` checks the shipped CRDs' cost, see igw.config.cel_cost).
Ratcheting is :mod:`tests.fakes.kube_admission`'s (errors carry their rule's node for it).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Mapping
from typing import Any, Final

import celpy
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from tests.fakes.kube_field_errors import FieldError
from tests.fakes.kube_structural import child_path, child_schema

_ENV: Final = celpy.Environment()
_COMPILING: Final = threading.Lock()
"""Tests write from their own thread while the server writes from its loop's: one parse at a time."""
_NO_OLD: Final = object()
"""Marks a node with no old value to correlate with (a create, or a node new in this update)."""
_VERDICTS: dict[tuple[str, str, str | None], tuple[tuple[int, str | None, str | None], ...]] = {}
"""Rule verdicts by (rules, node value, old value) as JSON: CEL is deterministic, and tests write the
same specs again and again (every status or metadata write re-admits the unchanged object)."""
_VERDICTS_MAX: Final = 20_000
_REASONS: Final = frozenset(
    {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"}
)


@functools.lru_cache(maxsize=4096)
def program(expression: str) -> Any:
    """The compiled CEL program of ``expression`` (raises ``CELParseError`` when it does not parse)."""
    with _COMPILING:
        return _ENV.program(_ENV.compile(expression))


@functools.lru_cache(maxsize=4096)
def program_ast(expression: str) -> Any:
    """The parse tree of ``expression`` (raises ``CELParseError`` when it does not parse): what the CRD
    checks walk for the fields a rule names."""
    with _COMPILING:
        return _ENV.compile(expression)


def _as_cel_json(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` with ``number`` fields as floats, as Kubernetes' CEL types them from the schema."""
    if isinstance(value, dict):
        return {
            key: _as_cel_json(child, item) if (child := child_schema(schema, key)) is not None else item
            for key, item in value.items()
        }
    if isinstance(value, list):
        items = schema.get("items")
        return [_as_cel_json(items, item) if isinstance(items, Mapping) else item for item in value]
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _to_cel(schema: Mapping[str, Any], value: Any) -> Any:
    return json_to_cel(_as_cel_json(schema, value))


def _evaluate(expression: str, activation: Mapping[str, Any]) -> tuple[Any, str | None]:
    """``(result, None)``, or ``(None, error text)`` where the rule does not compile or evaluate."""
    try:
        result = program(expression).evaluate(dict(activation))
    except (CELParseError, CELEvalError, TypeError, ValueError) as exc:
        return None, str(exc) or type(exc).__name__
    if isinstance(result, CELEvalError):
        return None, str(result)
    return result, None


def _message(rule: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
    expression = rule.get("messageExpression")
    if isinstance(expression, str):
        text, error = _evaluate(expression, activation)
        if error is None and isinstance(text, str) and text.strip() and "\n" not in text:
            return str(text)
    message = rule.get("message")
    return str(message) if message else f"failed rule: {rule.get('rule')}"


def _failure(rule: Mapping[str, Any], path: str, node_type: str, message: str) -> FieldError:
    field_path = rule.get("fieldPath")
    field = f"{path}{field_path}" if isinstance(field_path, str) and field_path else path
    reason = rule.get("reason")
    reason = reason if reason in _REASONS else "FieldValueInvalid"
    transition = "oldSelf" in str(rule.get("rule"))
    if reason in ("FieldValueForbidden", "FieldValueRequired"):
        return FieldError(field, reason, detail=message, node=path, transition=transition)
    if reason == "FieldValueDuplicate":
        return FieldError(field, reason, f'"{node_type}"', node=path, transition=transition)
    return FieldError(field, "FieldValueInvalid", f'"{node_type}"', message, node=path, transition=transition)


def _verdicts(
    schema: Mapping[str, Any], rules: tuple[Mapping[str, Any], ...], value: Any, old: Any
) -> tuple[tuple[int, str | None, str | None], ...]:
    """``(rule index, failure message or None, evaluation error or None)`` per rule evaluated,
    memoised on the node's JSON (see ``_VERDICTS``)."""
    key = (json.dumps(rules, sort_keys=True), json.dumps(value, sort_keys=True))
    old_key = None if old is _NO_OLD else json.dumps(old, sort_keys=True)
    cached = _VERDICTS.get((*key, old_key))
    if cached is not None:
        return cached
    self_value = _to_cel(schema, value)
    old_value = None if old is _NO_OLD else _to_cel(schema, old)
    verdicts: list[tuple[int, str | None, str | None]] = []
    for index, rule in enumerate(rules):
        expression = str(rule.get("rule") or "")
        activation: dict[str, Any] = {"self": self_value}
        if "oldSelf" in expression:
            if old is _NO_OLD:
                continue
            activation["oldSelf"] = old_value
        elif old is not _NO_OLD and value == old:
            continue  # ratcheting: an unchanged value is not checked again (transition rules are)
        result, error = _evaluate(expression, activation)
        failure = _message(rule, activation) if error is None and not bool(result) else None
        verdicts.append((index, failure, error))
    found = tuple(verdicts)
    if len(_VERDICTS) >= _VERDICTS_MAX:
        _VERDICTS.clear()
    _VERDICTS[(*key, old_key)] = found
    return found


def _node_errors(schema: Mapping[str, Any], value: Any, path: str, old: Any) -> list[FieldError]:
    rules = tuple(schema.get("x-kubernetes-validations") or ())
    if not rules:
        return []
    if old is not _NO_OLD and value != old and not any("oldSelf" in str(r.get("rule")) for r in rules):
        old = _NO_OLD  # a changed value is checked as a new one (and shares its memo entry)
    errors: list[FieldError] = []
    node_type = str(schema.get("type") or "object")
    for index, failure, error in _verdicts(schema, rules, value, old):
        rule = rules[index]
        if error is not None:
            message = rule.get("message") or f"failed rule: {rule.get('rule')}"
            errors.append(
                FieldError(path, "FieldValueInvalid", f'"{node_type}"', f"{message}: {error}", node=path)
            )
        elif failure is not None:
            errors.append(_failure(rule, path, node_type, failure))
    return errors


def _old_items_by_key(schema: Mapping[str, Any], old: Any) -> dict[tuple[str, ...], Any]:
    """A ``map`` list's old items by their key fields (other lists do not correlate)."""
    keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return {}
    return {tuple(repr(item.get(k)) for k in keys): item for item in old if isinstance(item, dict)}


def rule_errors(
    schema: Mapping[str, Any], value: Any, path: str = "", old: Any = _NO_OLD
) -> list[FieldError]:
    """Every CEL rule in ``schema`` that ``value`` (pruned, defaulted, schema-valid) fails, at any depth.

    ``old`` is the stored value on an update (omit it on a create): transition rules need it."""
    errors = _node_errors(schema, value, path, old)
    if isinstance(value, dict):
        for key, item in value.items():
            child = child_schema(schema, key)
            if child is None:
                continue
            old_item = old.get(key, _NO_OLD) if isinstance(old, dict) else _NO_OLD
            errors += rule_errors(child, item, child_path(path, key), old_item)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        old_by_key = _old_items_by_key(schema, old)
        keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
        for index, item in enumerate(value):
            identity = tuple(repr(item.get(k)) for k in keys) if isinstance(item, dict) else ()
            old_item = old_by_key.get(identity, _NO_OLD) if old_by_key else _NO_OLD
            errors += rule_errors(items, item, f"{path}[{index}]", old_item)
    return errors
