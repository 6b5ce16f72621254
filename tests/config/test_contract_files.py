"""The contract files in schemas/ hang together: rule ids match checks, the bundle matches the source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from igw.config.bundle import BUNDLED_PREFIX
from igw.config.documents import read_documents
from igw.config.paths import BUNDLED_DIR, SCHEMAS_DIR_ENV, schemas_dir
from igw.config.rules import RULE_CHECKS, check_rules
from igw.config.schema import SchemaError, admission_rules, inline_refs, resolved_schema
from igw.config.validate import is_gateway_config, validate_document
from igw.config.versions import check_model_server

from .support import EXAMPLES


def test_every_rule_has_exactly_one_python_check() -> None:
    assert [rule.id for rule in admission_rules()] == list(RULE_CHECKS)


def test_a_rule_without_a_check_is_a_loud_error() -> None:
    with pytest.raises(LookupError, match="no Python check"):
        check_rules({}, rule_ids=["not-a-rule"])


def test_checkout_is_preferred(repo_root: Path) -> None:
    assert schemas_dir() == repo_root / "schemas"
    assert repo_root / BUNDLED_PREFIX == BUNDLED_DIR


def test_bundled_copy_validates_like_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an installed gateway (no checkout) uses must behave exactly like schemas/."""
    source = resolved_schema()
    monkeypatch.setenv(SCHEMAS_DIR_ENV, str(BUNDLED_DIR))
    bundled = resolved_schema()
    bundled.pop("$comment")
    assert bundled == source
    for path in EXAMPLES:
        for doc in read_documents(path):
            if is_gateway_config(doc.content):
                assert validate_document(doc.content) == []
    check = check_model_server(engine="sglang", image="lmsysorg/sglang:v0.4.6", args=[], env={})
    assert check.verdict.value == "fail"


def test_inline_refs_rejects_cycles_and_remote_refs() -> None:
    cyclic = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    with pytest.raises(SchemaError, match="cycle"):
        inline_refs(cyclic, source="t")
    with pytest.raises(SchemaError, match="only local references"):
        inline_refs({"$ref": "other.json"}, source="t")
    with pytest.raises(SchemaError, match="points to nothing"):
        inline_refs({"$ref": "#/$defs/missing"}, source="t")


def test_use_site_keywords_override_the_definition() -> None:
    schema = {
        "$defs": {"d": {"type": "string", "description": "def"}},
        "properties": {"x": {"$ref": "#/$defs/d", "description": "use"}},
    }
    assert inline_refs(schema, source="t") == {"properties": {"x": {"type": "string", "description": "use"}}}


def test_main_schema_is_draft_2020_12_and_closed(repo_root: Path) -> None:
    raw = json.loads((repo_root / "schemas" / "inferencegatewayconfig.schema.json").read_text())
    assert raw["$schema"].endswith("2020-12/schema")
    assert raw["additionalProperties"] is False
    assert raw["properties"]["spec"]["additionalProperties"] is False
