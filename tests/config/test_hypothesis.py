"""Property tests: documents generated from the schema are valid; targeted mutations are caught at
their exact path; and CEL agrees with Python throughout."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from igw.config.build import build_gateway_config
from igw.config.jsonpath import format_path
from igw.config.schema import resolved_schema
from igw.config.validate import validate_document

from .cel_harness import cel_failures, disagreements
from .schema_strategies import document_strategy, walk

SCHEMA = resolved_schema()
DOCS = document_strategy(SCHEMA)
PROPERTY_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # no explain phase: on Python < 3.12 it traces every line while shrinking, which took a failing
    # example past pytest's 120 s timeout and reported "FlakyStrategyDefinition" instead of the failure
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


@PROPERTY_SETTINGS
@given(DOCS)
def test_generated_documents_are_valid_everywhere(doc: dict[str, Any]) -> None:
    assert validate_document(doc) == []
    assert cel_failures(doc) == set()
    config = build_gateway_config(doc)
    assert len(config.schedulers) == len(doc["spec"]["schedulers"])


@PROPERTY_SETTINGS
@given(DOCS, st.data())
def test_an_unknown_field_is_named_wherever_it_is_added(doc: dict[str, Any], data: st.DataObject) -> None:
    closed = [
        (path, value)
        for path, value, node in walk(doc, SCHEMA)
        if isinstance(value, dict) and node.get("additionalProperties") is False and node.get("properties")
    ]
    path, target = data.draw(st.sampled_from(closed))
    mutated = copy.deepcopy(doc)
    _set(mutated, (*path, "zzUnknown"), 1) if path else mutated.update(zzUnknown=1)
    full = format_path((*path, "zzUnknown"))
    (problem,) = validate_document(mutated)
    assert (problem.path, problem.rule) == (full, "schema.unknown-field")
    assert problem.message.startswith(f'unknown field "{full}"')
    assert target is not None


@PROPERTY_SETTINGS
@given(DOCS, st.data())
def test_a_wrong_type_is_reported_at_its_path(doc: dict[str, Any], data: st.DataObject) -> None:
    leaves = [
        path
        for path, value, node in walk(doc, SCHEMA)
        if path and path[0] != "metadata" and node.get("type") in {"string", "integer", "boolean"}
    ]
    path = data.draw(st.sampled_from(leaves))
    mutated = copy.deepcopy(doc)
    _set(mutated, path, {"not": "a scalar"})
    problems = validate_document(mutated)
    where = format_path(path)
    assert (where, "schema.type") in {(p.path, p.rule) for p in problems}
    assert disagreements(mutated) == []


@PROPERTY_SETTINGS
@given(DOCS, st.data())
def test_a_missing_required_field_is_reported(doc: dict[str, Any], data: st.DataObject) -> None:
    holders = [
        (path, key)
        for path, value, node in walk(doc, SCHEMA)
        if isinstance(value, dict) and path
        for key in node.get("required", ())
        if key in value
    ]
    path, key = data.draw(st.sampled_from(holders))
    mutated = copy.deepcopy(doc)
    node: Any = mutated
    for part in path:
        node = node[part]
    del node[key]
    problems = validate_document(mutated)
    assert (format_path((*path, key)), "schema.required") in {(p.path, p.rule) for p in problems}
    assert disagreements(mutated) == []


@PROPERTY_SETTINGS
@given(DOCS, st.data())
def test_rule_violations_found_by_both_sides(doc: dict[str, Any], data: st.DataObject) -> None:
    mutated = copy.deepcopy(doc)
    scheds = mutated["spec"]["schedulers"]
    choice = data.draw(st.sampled_from(["dup-model", "bbr-off", "xor", "lru", "selector"]))
    if choice == "dup-model":
        scheds.append({**copy.deepcopy(scheds[0]), "name": "dup"})
        mutated["spec"]["bbr"]["enabled"] = True
        expected = ("spec.schedulers", "unique-model-name")
    elif choice == "bbr-off":
        scheds.append({"name": "other", "modelName": "other", "modelSelector": {"matchLabels": {"a": "b"}}})
        mutated["spec"]["bbr"]["enabled"] = False
        expected = ("spec.bbr.enabled", "bbr-required-for-multiple-schedulers")
    elif choice == "xor":
        scheds[0]["weights"], scheds[0]["configMapRef"] = {}, {"name": "cm"}
        scheds[0].pop("scheduler", None)
        expected = ("spec.schedulers[0]", "weights-xor-configmapref")
    elif choice == "lru":
        scheds[0].pop("configMapRef", None)
        scheds[0]["weights"], scheds[0]["scheduler"] = {"lru": 1}, "epp"
        expected = ("spec.schedulers[0].weights.lru", "lru-requires-llm-d")
    else:
        scheds[0]["modelSelector"] = {}
        expected = ("spec.schedulers[0].modelSelector", "model-selector-not-empty")
    problems = validate_document(mutated)
    assert any(p.rule == expected[1] and p.path.startswith(expected[0]) for p in problems), problems
    assert expected[1] in {rule for rule, _ in cel_failures(mutated)}
    assert disagreements(mutated) == []
