"""spec.extensions: every schemas/extensions/<name>.schema.json is picked up, closed, and inlined."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from igw.config.build import build_gateway_config
from igw.config.crd import render_crd
from igw.config.paths import SCHEMAS_DIR_ENV
from igw.config.schema import SchemaError, extension_files, resolved_schema
from igw.config.validate import validate_document

from .cases import base_document

DEMO = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "$defs": {"level": {"type": "integer", "minimum": 0, "maximum": 3}},
    "properties": {
        "level": {"$ref": "#/$defs/level", "default": 1},
        "mode": {"type": "string", "enum": ["fast", "safe"]},
    },
}


@pytest.fixture
def tmp_repo(tmp_path: Path, repo_root: Path) -> Path:
    shutil.copytree(repo_root / "schemas", tmp_path / "schemas")
    (tmp_path / "schemas" / "extensions" / "demo.schema.json").write_text(json.dumps(DEMO))
    return tmp_path


def _with_extensions(extensions: dict[str, Any]) -> dict[str, Any]:
    doc = base_document()
    doc["spec"]["extensions"] = extensions
    return doc


def test_existing_extension_files_are_closed_and_attached(repo_root: Path) -> None:
    attached = resolved_schema()["properties"]["spec"]["properties"]["extensions"]["properties"]
    assert set(attached) == set(extension_files(repo_root / "schemas"))
    for name, schema in attached.items():
        assert (schema["type"], schema["additionalProperties"]) == ("object", False), name
        assert "$ref" not in json.dumps(schema), name


def test_a_new_extension_file_is_validated(tmp_repo: Path) -> None:
    schemas = tmp_repo / "schemas"
    assert validate_document(_with_extensions({"demo": {"level": 2, "mode": "safe"}}), schemas=schemas) == []
    problems = validate_document(_with_extensions({"demo": {"level": 9, "colour": "red"}}), schemas=schemas)
    assert {(p.path, p.rule) for p in problems} == {
        ("spec.extensions.demo.level", "schema.maximum"),
        ("spec.extensions.demo.colour", "schema.unknown-field"),
    }


def test_unknown_extension_lists_the_known_ones(tmp_repo: Path) -> None:
    (problem,) = validate_document(_with_extensions({"dmeo": {}}), schemas=tmp_repo / "schemas")
    assert problem.path == "spec.extensions.dmeo"
    assert "demo" in problem.message
    assert 'unknown field "spec.extensions.dmeo"' in problem.message


def test_extension_is_inlined_into_the_crd(tmp_repo: Path) -> None:
    crd = render_crd(tmp_repo)
    assert "demo:" in crd
    assert "$ref" not in crd
    assert "maximum: 3" in crd


def test_extension_defaults_and_raw_mapping_reach_the_model(
    tmp_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SCHEMAS_DIR_ENV, str(tmp_repo / "schemas"))
    config = build_gateway_config(_with_extensions({"demo": {"mode": "fast"}}))
    assert config.extensions == {"demo": {"mode": "fast", "level": 1}}


def test_an_open_extension_schema_is_rejected(tmp_repo: Path) -> None:
    (tmp_repo / "schemas" / "extensions" / "loose.schema.json").write_text(json.dumps({"type": "object"}))
    with pytest.raises(SchemaError, match="closed object"):
        resolved_schema(tmp_repo / "schemas")


def test_a_badly_named_extension_is_rejected(tmp_repo: Path) -> None:
    (tmp_repo / "schemas" / "extensions" / "Bad-Name.schema.json").write_text(json.dumps(DEMO))
    with pytest.raises(SchemaError, match="camelCase"):
        resolved_schema(tmp_repo / "schemas")


def test_a_file_appearing_later_is_seen_without_restart(tmp_repo: Path) -> None:
    schemas = tmp_repo / "schemas"
    doc = _with_extensions({"late": {"on": True}})
    assert [p.rule for p in validate_document(doc, schemas=schemas)] == ["schema.unknown-field"]
    late = {"type": "object", "additionalProperties": False, "properties": {"on": {"type": "boolean"}}}
    (schemas / "extensions" / "late.schema.json").write_text(json.dumps(late))
    assert validate_document(doc, schemas=schemas) == []
