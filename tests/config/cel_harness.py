"""Evaluate the CRD's CEL admission rules with a real CEL implementation (cel-python).

This is the test-side stand-in for the Kubernetes API server's CEL evaluation: defaults are applied
first (as the API server does), then each rule runs on every node its scope names. A rule whose
evaluation errors (a field of the wrong type - the schema reports that) gives no verdict, like a
rule the API server never reaches because structural validation already failed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import celpy

from igw.config.build import apply_defaults
from igw.config.errors import Problem
from igw.config.jsonpath import format_path, nodes_at, parse_path
from igw.config.rules import RULE_CHECKS
from igw.config.schema import AdmissionRule, admission_rules, resolved_schema

_ENV = celpy.Environment()


@functools.cache
def compiled(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


def _scope_node(schema: Mapping[str, Any], scope: Sequence[str]) -> Mapping[str, Any]:
    node: Any = schema
    for part in scope:
        node = node.get("items") if part == "[]" else node.get("properties", {}).get(part)
    assert isinstance(node, Mapping), f"scope {scope} is not in the schema"
    return node


_PYTHON_TYPES = {"object": dict, "array": list}


def cel_failures(
    doc: Mapping[str, Any], rules: Sequence[AdmissionRule] | None = None
) -> set[tuple[str, str]]:
    """``{(rule id, path of the node the rule failed on)}`` for one document."""
    return cel_verdicts(doc, rules)[0]


def cel_verdicts(
    doc: Mapping[str, Any], rules: Sequence[AdmissionRule] | None = None
) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """``(failures, errors)``: where each rule evaluated to false, and where it could not evaluate."""
    schema = resolved_schema()
    defaulted = apply_defaults(dict(doc), schema)
    failures: set[tuple[str, str]] = set()
    errors: set[tuple[str, str]] = set()
    for rule in rules if rules is not None else admission_rules():
        program = compiled(rule.rule)
        scope_node = _scope_node(schema, rule.scope)
        expected_type = _PYTHON_TYPES[str(scope_node.get("type"))]
        max_items = scope_node.get("maxItems")
        for parts, node in nodes_at(defaulted, rule.scope):
            if not isinstance(node, expected_type):
                continue  # the API server stops at the structural type error first
            if max_items is not None and len(node) > max_items:
                errors.add((rule.id, format_path(parts)))  # beyond the bounds CEL's cost is sized for
                continue
            try:
                result = program.evaluate({"self": celpy.json_to_cel(node)})
            except celpy.CELEvalError:
                result = None
            if result is None or isinstance(result, celpy.CELEvalError):
                errors.add((rule.id, format_path(parts)))
            elif not bool(result):
                failures.add((rule.id, format_path(parts)))
    return failures, errors


def python_rule_problems(doc: Mapping[str, Any]) -> list[Problem]:
    return [p for rule in admission_rules() for p in RULE_CHECKS[rule.id](doc)]


def _is_prefix(prefix: str, path: str) -> bool:
    a, b = parse_path(prefix), parse_path(path)
    return b[: len(a)] == a


def disagreements(doc: Mapping[str, Any]) -> list[str]:
    """Every way CEL and the Python checks disagree on ``doc`` (empty when they agree).

    Where a rule's CEL could not evaluate (a field of the wrong type, which the schema reports and
    which stops the API server before CEL), the Python verdict there is not compared.
    """
    cel, errors = cel_verdicts(doc)
    python = python_rule_problems(doc)
    out: list[str] = []
    for rule_id, node_path in sorted(cel):
        if not any(p.rule == rule_id and _is_prefix(node_path, p.path) for p in python):
            out.append(
                f"CEL rule {rule_id} fails at {node_path or '<root>'} but Python reports nothing there"
            )
    for problem in python:
        if not any(
            rule_id == problem.rule and _is_prefix(path, problem.path) for rule_id, path in cel | errors
        ):
            out.append(f"Python reports {problem.rule} at {problem.path} but CEL passes")
    return out
