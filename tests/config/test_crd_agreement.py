"""The generated CRD schema enforces what the Python validator enforces.

The API server validates a resource against the CRD's structural schema (after pruning unknown
fields, which strict field validation reports as ``unknown field "spec.foo"``), then runs the CEL
rules. Here the CRD's ``openAPIV3Schema`` is applied with jsonschema and the API server's unknown-
field detection is re-implemented from its definition, and both must reach the Python validator's
verdicts on every example and every invalid case.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from igw.config.crd import build_crd
from igw.config.documents import read_documents
from igw.config.jsonpath import PathPart, format_path
from igw.config.schema_validator import schema_validator
from igw.config.validate import is_gateway_config, validate_document

from .cases import CASES, Case
from .support import EXAMPLES

CRD_SCHEMA: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
CRD_VALIDATOR = schema_validator(CRD_SCHEMA, formats=False)  # patterns matched by RE2, as the API server's

# Verdicts the CRD reaches by other means than its openAPIV3Schema: list types (set/map) reject
# duplicates, a format check differs between Go and Python, CEL rules, and a type error at provider
# the API server reports as a plain type error.
NOT_SCHEMA_RULES = {
    "schema.uniqueItems",
    "schema.format",
    "schema.unknown-field",
    "jwt-provider-single-object",
    "schema.propertyNames",  # label keys: structural schemas have no propertyNames (igw validate and
    # the operator's admission check them; the real API server checks the keys of pods' labels)
}


def unknown_fields(value: Any, node: Mapping[str, Any], path: tuple[PathPart, ...] = ()) -> Iterator[str]:
    """Fields the API server's pruning would drop (strict field validation: ``unknown field``)."""
    if node.get("x-kubernetes-preserve-unknown-fields") or path == ("metadata",):
        return  # ObjectMeta is validated by the API server itself, not by the CRD schema
    if isinstance(value, dict):
        props = node.get("properties")
        extra = node.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                yield from unknown_fields(sub, props[key], (*path, key))
            elif isinstance(extra, Mapping):
                yield from unknown_fields(sub, extra, (*path, key))
            elif props is not None or node.get("type") == "object":
                yield format_path((*path, key))
    elif isinstance(value, list) and isinstance(node.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from unknown_fields(item, node["items"], (*path, index))


def crd_schema_error_paths(doc: Mapping[str, Any]) -> set[str]:
    return {format_path(error.absolute_path) for error in CRD_VALIDATOR.iter_errors(doc)}


def _reported_as_required(problems: list[Any], path: str) -> bool:
    return any(p.path == path and p.rule == "schema.required" for p in problems)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_the_crd_schema(path: Any) -> None:
    for doc in read_documents(path):
        if is_gateway_config(doc.content):
            assert crd_schema_error_paths(doc.content) == set()
            assert list(unknown_fields(doc.content, CRD_SCHEMA)) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_crd_schema_agrees_with_python(case: Case) -> None:
    doc = case.document()
    problems = validate_document(doc)
    python_unknown = {p.path for p in problems if p.rule == "schema.unknown-field"}
    assert set(unknown_fields(doc, CRD_SCHEMA)) == python_unknown
    python_schema = {
        p.path for p in problems if p.rule.startswith("schema.") and p.rule not in NOT_SCHEMA_RULES
    }
    crd_paths = crd_schema_error_paths(doc)
    if case.id == "wrong-api-version":
        python_schema.discard("apiVersion")  # the API server routes by apiVersion, the schema cannot see it
    if any(p.rule == "jwt-provider-single-object" for p in problems):
        # The API server stops at the type error; Python also checks each list item (a hint).
        python_schema = {p for p in python_schema if not p.startswith("spec.auth.jwt.provider[")}
        python_schema.add("spec.auth.jwt.provider")
    # ObjectMeta (name required, DNS-1123 name) is checked by the API server itself, not the CRD.
    python_schema = {p for p in python_schema if not p.startswith("metadata")}
    # required fields are reported at the parent object by jsonschema, at the field by us
    normalised = {
        path.rsplit(".", 1)[0] if _reported_as_required(problems, path) else path for path in python_schema
    }
    assert crd_paths == normalised
