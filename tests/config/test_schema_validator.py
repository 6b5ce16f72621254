"""RE2 matching of the schemas' ``pattern`` keyword (:mod:`igw.config.schema_validator`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from igw.config.paths import REPO_ROOT
from igw.config.schema import SchemaError
from igw.config.schema_validator import compiled, pattern_matches, schema_validator

SCHEMA_FILES = sorted(
    [
        *REPO_ROOT.glob("schemas/**/*.json"),
        *REPO_ROOT.glob("gateway_src/igw/**/*.schema.json"),
        *REPO_ROOT.glob("addon/**/*.json"),
    ]
)


def _patterns(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        for value in node.values():
            yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


def test_every_pattern_the_project_ships_is_an_re2_pattern() -> None:
    """A pattern RE2 cannot compile would fail a user's document at validation (and the API server
    refuses a CRD that holds one): each is compiled here, before any user meets it."""
    found = {
        p for path in SCHEMA_FILES for p in _patterns(json.loads(Path(path).read_text(encoding="utf-8")))
    }
    assert len(found) > 30  # the globs still find the schemas
    for pattern in found:
        compiled(pattern)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("^[a-z]+$", "llama", True),
        ("^[a-z]+$", "llama\n", False),  # Python's re: True
        ("^[0-9]+$", "12\n", False),
        (r"^\d+$", "٣", False),  # an Arabic-Indic digit: Python's \d matches it, RE2's does not
        (r"^\w+$", "é", False),
        ("[a-z]", "1a1", True),  # unanchored: a search, as JSON Schema and the API server read it
    ],
)
def test_patterns_match_as_re2_matches_them(pattern: str, text: str, expected: bool) -> None:
    assert pattern_matches(pattern, text) is expected


def test_a_pattern_re2_cannot_compile_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="not an RE2 regular expression"):
        schema_validator({"type": "string", "pattern": "^(?=a)"}).validate("a")


def test_the_validator_keeps_the_draft_and_the_keyword() -> None:
    """Draft 6 schemas (AWS's add-on schema) keep their draft; errors still name ``pattern``."""
    validator = schema_validator(
        {"$schema": "http://json-schema.org/draft-06/schema#", "type": "string", "pattern": "^a$"},
        formats=False,
    )
    (error,) = validator.iter_errors("a\n")
    assert error.validator == "pattern"
    assert validator.META_SCHEMA["$schema"] == "http://json-schema.org/draft-06/schema#"
