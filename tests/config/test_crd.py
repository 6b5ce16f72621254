"""The generated CRD: fresh, structural, accepted by Kubernetes' own CRD schema, rules attached."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from igw.cli.main import main
from igw.config.crd import CRD_PATH, build_crd, render_crd, to_structural
from igw.config.schema import SchemaError, admission_rules

# Keys a structural schema node may carry (apiextensions.k8s.io/v1 JSONSchemaProps we use).
ALLOWED_KEYS = {
    "type", "description", "title", "properties", "additionalProperties", "items", "required", "enum",
    "default", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "maxProperties",
    "pattern", "format",
    "anyOf", "nullable", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
    "x-kubernetes-validations",
}  # fmt: skip


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")


def _crd() -> dict[str, Any]:
    return build_crd()


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_matches_a_fresh_generation(repo_root: Path) -> None:
    assert (repo_root / CRD_PATH).read_text(encoding="utf-8") == render_crd(repo_root)


def test_generate_check_passes_on_the_repository(repo_root: Path) -> None:
    assert main(["generate", "--check", "--root", str(repo_root)]) == 0


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(_crd(), "1.31", strict=True)


def test_schema_is_structural() -> None:
    for path, node in _nodes(_schema()):
        assert set(node) <= ALLOWED_KEYS, f"{path}: {set(node) - ALLOWED_KEYS}"
        if node.get("x-kubernetes-int-or-string"):
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "type" in node, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-list-type") == "map":
            assert set(node["x-kubernetes-list-map-keys"]) <= set(node["items"].get("required", [])), path


def test_no_refs_remain() -> None:
    assert "$ref" not in yaml.safe_dump(_crd())


def test_defaults_are_carried_into_the_crd() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    sched = spec["schedulers"]["items"]["properties"]
    assert spec["bbr"]["properties"]["replicas"]["default"] == 2
    assert spec["bbr"]["properties"]["maxRequestBodyBytes"]["default"] == 268435456
    assert sched["targetPort"]["default"] == 8000
    assert sched["scheduler"]["default"] == "llm-d"
    assert sched["engineType"]["default"] == "vllm"
    assert sched["weights"]["properties"]["prefix"]["default"] == 3
    assert sched["configMapRef"]["properties"]["key"]["default"] == "default-plugins.yaml"


def test_names_status_and_columns() -> None:
    crd = _crd()
    assert crd["metadata"]["name"] == "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"
    assert crd["spec"]["names"]["shortNames"] == ["igwc"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    assert {c["name"] for c in version["additionalPrinterColumns"]} >= {"Ready", "Age"}
    status = _schema()["properties"]["status"]["properties"]
    assert {"conditions", "schedulers", "observedGeneration", "tls"} <= set(status)
    assert status["schedulers"]["items"]["properties"]["rolloutState"]["enum"] == [
        "Pending",
        "Progressing",
        "Available",
        "Degraded",
    ]


def test_every_admission_rule_is_on_the_crd_and_compiles() -> None:
    env = celpy.Environment()
    for rule in admission_rules():
        env.compile(rule.rule)
    placed = [
        (path, v["rule"], v["message"])
        for path, node in _nodes(_schema())
        for v in node.get("x-kubernetes-validations", [])
    ]
    expected = [
        ("." + ".".join(rule.scope).replace(".[]", "[]"), rule.rule, rule.message)
        for rule in admission_rules()
    ]
    assert sorted(placed) == sorted(expected)


def test_structural_rewrite_rejects_a_leftover_ref() -> None:
    with pytest.raises(SchemaError, match="unresolved"):
        to_structural({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}})
