from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from igw.config.errors import ConfigError
from igw.config.loader import load_gateway_config
from igw.config.paths import SCHEMAS_DIR_ENV

from .cases import base_document
from .support import EXAMPLES


def test_loads_yaml_and_json_alike(tmp_path: Path) -> None:
    doc = base_document()
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "a.json").write_text(json.dumps(doc))
    assert load_gateway_config(tmp_path / "a.yaml") == load_gateway_config(str(tmp_path / "a.json"))


def test_first_gateway_config_document_wins(tmp_path: Path) -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    second = base_document()
    second["metadata"]["name"] = "second"
    text = yaml.safe_dump_all([other, base_document(), second])
    (tmp_path / "multi.yaml").write_text(text)
    assert load_gateway_config(tmp_path / "multi.yaml").name == "base"


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: x\nkind: InferenceGatewayConfig\nspec:\n  bbr: [1\n  schedulers: []\n")
    with pytest.raises(ConfigError) as info:
        load_gateway_config(path)
    assert info.value.problems[0].rule == "syntax"
    assert "line 5" in str(info.value)


def test_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "kind": "InferenceGatewayConfig",\n  "spec": ,\n}')
    with pytest.raises(ConfigError, match="line 3"):
        load_gateway_config(path)


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("kind: InferenceGatewayConfig\nspec: {}\nspec: {}\n")
    with pytest.raises(ConfigError, match="duplicate key 'spec'"):
        load_gateway_config(path)


def test_duplicate_keys_in_json_are_rejected_naming_the_line(tmp_path: Path) -> None:
    """``json`` kept the last of two ``"spec"`` keys silently (the first spec was lost unseen) where
    the same mistake in YAML was refused."""
    path = tmp_path / "dup.json"
    path.write_text('{"kind": "InferenceGatewayConfig",\n "spec": {"a": {}, "b": [{"x": 1,\n  "x": 2}]}}')
    with pytest.raises(ConfigError, match=r"dup.json: line 3, column 3: duplicate key 'x'"):
        load_gateway_config(path)
    path.write_text('{"kind": "InferenceGatewayConfig", "spec": {}, "spec": {"schedulers": []}}')
    with pytest.raises(ConfigError, match=r"line 1, column 48: duplicate key 'spec'"):
        load_gateway_config(path)


def test_all_problems_are_carried(tmp_path: Path) -> None:
    doc = base_document()
    doc["spec"]["foo"] = 1
    doc["spec"]["schedulers"][1]["targetPort"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as info:
        load_gateway_config(path)
    assert {p.path for p in info.value.problems} == {"spec.foo", "spec.schedulers[1].targetPort"}
    text = str(info.value)
    assert "2 problems" in text
    assert 'unknown field "spec.foo"' in text
    assert str(path) in text


def test_no_gateway_config_document(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(ConfigError, match="no InferenceGatewayConfig document"):
        load_gateway_config(path)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read file"):
        load_gateway_config("/nonexistent/igwc.yaml")


def test_loading_examples_is_idempotent() -> None:
    assert load_gateway_config(EXAMPLES[0]) == load_gateway_config(EXAMPLES[0])


def test_a_broken_contract_file_is_a_config_error(
    tmp_path: Path, repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hot reload catches ConfigError only; an extension file mid-edit must not escape as another type."""
    schemas = tmp_path / "schemas"
    shutil.copytree(repo_root / "schemas", schemas)
    (schemas / "extensions" / "broken.schema.json").write_text("{ not json")
    monkeypatch.setenv(SCHEMAS_DIR_ENV, str(schemas))
    path = tmp_path / "igwc.yaml"
    path.write_text(yaml.safe_dump(base_document()))
    with pytest.raises(ConfigError) as info:
        load_gateway_config(path)
    assert info.value.problems[0].rule == "contract"
    assert "broken.schema.json" in str(info.value)
