"""Every ``pattern`` of every schema in ``schemas/``, and of the chart's values schema, says in words
what it allows (``x-igw-hint``).

Found by probing (session s48): 68 patterns had none, and a bad value was refused with the regular
expression itself: ``spec.extensions.rateLimits.redis.url: must be a string matching
^(redis|rediss|unix)://`` from ``igw validate``, ``stackPrefix: '9bad' does not match
'^[A-Za-z][A-Za-z0-9-]{0,39}$'`` from the CDK app. The walk below fails while a new pattern ships
bare. The chart's values schema had 43 more (``operator.awsRegion: must be a string matching
^([a-z]{2}(-[a-z]+)+-[0-9]+)?$`` from ``igw addon``), and the add-on schema dropped the hints of
``gateway.config.spec``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from igw.addon import schemas as addon_schemas
from igw.config.validate import validate_document
from tests.config.cases import base_document

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
SCHEMA_FILES = sorted(SCHEMAS.rglob("*.json"))
WALKED = [*SCHEMA_FILES, ROOT / "gateway_src" / "igw" / "addon" / "chart_values.schema.json"]
NOT_WALKED: dict[str, str] = {
    "gateway_src/igw/addon/aws_hyperpod_inference.schema.json": (
        "AWS's own add-on configuration schema, kept as describe-addon-configuration returns it"
    ),
    "gateway_src/igw/checks/render/report.schema.json": "an output schema: igw's reports, no user value",
    "tests/checks/sarif-schema-2.1.0.json": "an output schema (OASIS SARIF), a test fixture",
    "addon/chart/inference-gateway/values.schema.json": (
        "generated from chart_values.schema.json and schemas/ (igw generate --check); Helm's refusal "
        "cannot print a hint, and the add-on schema built the same way is walked below"
    ),
    "addon/configuration-schema.json": "generated; walked below as addon_configuration_schema() builds it",
    "gateway_src/igw/config/bundled/globalrouterconfig.schema.json": "a generated copy of schemas/",
    "gateway_src/igw/config/bundled/inference-extension.schema.json": "a generated copy of schemas/",
    "gateway_src/igw/config/bundled/inferencegatewayconfig.schema.json": "a generated copy of schemas/",
}
"""Schema files the walk leaves out, each with why."""


def bare_patterns(node: Any, path: str = "") -> Iterator[str]:
    """The JSON pointer of each schema node in ``node`` with a ``pattern`` and no ``x-igw-hint``."""
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str) and not node.get("x-igw-hint"):
            yield path or "/"
        for key, value in node.items():
            yield from bare_patterns(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from bare_patterns(value, f"{path}/{index}")


def test_the_walk_finds_a_planted_bare_pattern() -> None:
    """The walk reaches patterns under properties, items, $defs and combinators, and a hint-less one
    (or an empty hint) is reported: otherwise the test below would pass vacuously."""
    planted = {
        "properties": {
            "a": {"type": "string", "pattern": "^a$", "x-igw-hint": "a"},
            "b": {"type": "array", "items": {"type": "string", "pattern": "^b$"}},
        },
        "$defs": {"c": {"anyOf": [{"pattern": "^c$", "x-igw-hint": ""}]}},
    }
    assert list(bare_patterns(planted)) == ["/properties/b/items", "/$defs/c/anyOf/0"]


@pytest.mark.parametrize("schema_file", WALKED, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_pattern_has_a_hint(schema_file: Path) -> None:
    bare = list(bare_patterns(json.loads(schema_file.read_text(encoding="utf-8"))))
    assert not bare, f"{schema_file.name}: patterns without an x-igw-hint (what they allow, in words): {bare}"


def test_the_walk_covers_the_gateway_router_and_cdk_schemas() -> None:
    names = {str(path.relative_to(SCHEMAS)) for path in SCHEMA_FILES}
    assert {
        "inferencegatewayconfig.schema.json",
        "globalrouterconfig.schema.json",
        "inference-extension.schema.json",
        "deployment-config.schema.json",
        "global-router-deployment.schema.json",
        "extensions/rateLimits.schema.json",
    } <= names


def test_every_schema_file_is_walked_or_left_out_with_a_reason() -> None:
    """A new schema file outside ``schemas/`` is not silently left out of the walk."""
    found = {
        str(path.relative_to(ROOT))
        for folder in ("schemas", "gateway_src", "addon", "tests")
        for path in (ROOT / folder).rglob("*schema*.json")
    }
    walked = {str(path.relative_to(ROOT)) for path in WALKED}
    assert found == walked | set(NOT_WALKED)
    assert not walked & set(NOT_WALKED)


def test_the_addon_schema_keeps_the_hints_of_the_gateway_config_spec() -> None:
    """``igw addon`` checks ``configurationValues`` against the generated add-on schema; its
    ``gateway.config.spec`` is converted to draft-06, which dropped every ``x-*`` annotation."""
    bare = list(bare_patterns(addon_schemas.addon_configuration_schema()))
    assert not bare, f"add-on configuration schema: patterns without an x-igw-hint: {bare}"


@pytest.mark.parametrize(
    ("extensions", "path", "message"),
    [
        (
            {"rateLimits": {"redis": {"url": "http://cache:6379"}}},
            "spec.extensions.rateLimits.redis.url",
            'must be a redis://, rediss:// or unix:// URL; got "http://cache:6379"',
        ),
        (
            {"globalHeartbeat": {"cluster": "a", "region": "us-east-1", "interval": "5 s"}},
            "spec.extensions.globalHeartbeat.interval",
            "must be a duration of up to four parts of 1 to 5 digits and a unit h, m, s or ms, such as "
            '10s, 1h30m or 500ms; got "5 s"',
        ),
        (
            {"authorization": {"tenantHeader": "x_tenant"}},
            "spec.extensions.authorization.tenantHeader",
            "must be empty, or a header name: letters and digits, in words joined by single hyphens (-); "
            'got "x_tenant"',
        ),
    ],
)
def test_a_gateway_config_pattern_is_refused_in_words(
    extensions: dict[str, Any], path: str, message: str
) -> None:
    document = base_document()
    document["spec"]["extensions"] = extensions
    problems = [problem for problem in validate_document(document) if problem.path == path]
    assert [problem.message for problem in problems] == [message]
    assert "^" not in message
