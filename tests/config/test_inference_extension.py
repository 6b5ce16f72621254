"""InferenceObjective / InferenceModelRewrite: schema, CEL rules agreeing with Python, CRDs, validate."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy.adapter import json_to_cel

from igw.cli.main import main
from igw.config.documents import read_documents
from igw.config.inference_extension import (
    GROUP,
    OBJECTIVE_KIND,
    REWRITE_KIND,
    VERSION,
    cel_rules,
    is_inference_extension_resource,
    validate_resource,
)
from igw.config.inference_extension_crds import build_crd
from igw.config.jsonpath import format_path, nodes_at

from .support import REPO_ROOT

EXAMPLE = REPO_ROOT / "crds" / "examples" / "objectives-and-rewrites.yaml"
_ENV = celpy.Environment()


def example(kind: str) -> dict[str, Any]:
    docs = [
        d.content
        for d in read_documents(EXAMPLE)
        if isinstance(d.content, dict) and d.content["kind"] == kind
    ]
    return copy.deepcopy(docs[0])


def objective(**spec: Any) -> dict[str, Any]:
    doc = example(OBJECTIVE_KIND)
    doc["spec"].update(spec)
    return doc


def rewrite_with_targets(targets: list[dict[str, Any]]) -> dict[str, Any]:
    doc = example(REWRITE_KIND)
    doc["spec"]["rules"][1]["targets"] = targets
    return doc


CASES: list[tuple[str, dict[str, Any], set[tuple[str, str]]]] = [
    ("objective-ok", objective(), set()),
    ("objective-priority-not-int", objective(priority="high"), {("spec.priority", "schema.type")}),
    ("objective-no-pool", {**objective(), "spec": {"priority": 1}}, {("spec.poolRef", "schema.required")}),
    (
        "objective-pool-kind",
        objective(poolRef={"name": "p", "kind": "Service"}),
        {("spec.poolRef.kind", "schema.enum")},
    ),
    (
        "objective-unknown-field",
        objective(criticality="Critical"),
        {("spec.criticality", "schema.unknown-field")},
    ),
    ("rewrite-ok", example(REWRITE_KIND), set()),
    (
        "rewrite-duplicate-targets",
        rewrite_with_targets([{"modelRewrite": "a", "weight": 1}, {"modelRewrite": "a", "weight": 2}]),
        {("spec.rules[1].targets", "distinct-rewrite-targets")},
    ),
    (
        "rewrite-some-weights",
        rewrite_with_targets([{"modelRewrite": "a", "weight": 1}, {"modelRewrite": "b"}]),
        {("spec.rules[1].targets", "rewrite-weights-all-or-none")},
    ),
    (
        "rewrite-weight-too-large",
        rewrite_with_targets([{"modelRewrite": "a", "weight": 1_000_001}]),
        {("spec.rules[1].targets[0].weight", "schema.maximum")},
    ),
]


@pytest.mark.parametrize(("case_id", "doc", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validation_names_the_field_and_rule(
    case_id: str, doc: dict[str, Any], expected: set[tuple[str, str]]
) -> None:
    got = {(p.path, p.rule) for p in validate_resource(doc)}
    assert got == expected, case_id


def cel_verdicts(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """Where each CEL rule of the CRD fails, evaluated by cel-python (the API server's stand-in)."""
    failed: set[tuple[str, str]] = set()
    for rule in cel_rules(str(doc["kind"])):
        program = _ENV.program(_ENV.compile(rule.rule))
        for parts, node in nodes_at(doc, rule.scope):
            if not bool(program.evaluate({"self": json_to_cel(node)})):
                failed.add((format_path(parts), rule.check))
    return failed


@pytest.mark.parametrize(("case_id", "doc", "expected"), CASES, ids=[c[0] for c in CASES])
def test_cel_and_python_agree(case_id: str, doc: dict[str, Any], expected: set[tuple[str, str]]) -> None:
    python = {(p.path, p.rule) for p in validate_resource(doc) if not p.rule.startswith("schema.")}
    assert cel_verdicts(doc) == python, case_id


@pytest.mark.parametrize("kind", [OBJECTIVE_KIND, REWRITE_KIND])
def test_crd_keeps_the_reference_group_version_and_is_structural(kind: str) -> None:
    crd = build_crd(kind)
    spec = crd["spec"]
    assert spec["group"] == GROUP == "inference.networking.x-k8s.io"
    assert spec["names"]["kind"] == kind
    (version,) = spec["versions"]
    assert version["name"] == VERSION == "v1alpha2"
    assert version["subresources"] == {"status": {}}
    text = yaml.safe_dump(crd)
    assert "$ref" not in text
    assert "x-igw-check" not in text
    assert "additionalProperties: false" not in text
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["poolRef"]["properties"]["group"]["default"] == (
        "inference.networking.k8s.io"
    )


def test_rewrite_crd_carries_the_cel_rules() -> None:
    schema = build_crd(REWRITE_KIND)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    targets = schema["properties"]["spec"]["properties"]["rules"]["items"]["properties"]["targets"]
    rules = {entry["rule"] for entry in targets["x-kubernetes-validations"]}
    assert rules == {r.rule for r in cel_rules(REWRITE_KIND)}
    for rule in rules:
        _ENV.compile(rule)


def test_igw_validate_checks_every_kind_of_a_multi_document_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    err = capsys.readouterr().err
    assert (
        "1 InferenceGatewayConfig document(s) and 1 InferenceModelRewrite document(s) and "
        "2 InferenceObjective document(s) checked, 0 problem(s)"
    ) in err
    docs = [d.content for d in read_documents(EXAMPLE)]
    docs[2]["spec"]["priority"] = "low"
    docs[3]["spec"]["rules"][1]["targets"][1]["modelRewrite"] = "support-bot-v1"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(
        line.endswith("spec.priority: must be an integer (got string) [schema.type]")
        or "spec.priority" in line
        for line in out
    )
    assert any(
        "spec.rules[1].targets: targets must name distinct models [distinct-rewrite-targets]" in line
        for line in out
    )
    assert len(out) == 2


def test_kind_detection() -> None:
    assert is_inference_extension_resource(example(OBJECTIVE_KIND))
    assert not is_inference_extension_resource({"kind": "InferencePool"})
    wrong_version = {**example(OBJECTIVE_KIND), "apiVersion": "inference.networking.x-k8s.io/v1alpha1"}
    assert {p.path for p in validate_resource(wrong_version)} == {"apiVersion"}
