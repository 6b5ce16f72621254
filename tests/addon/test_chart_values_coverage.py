"""Every value the chart's schemas take is read by a template, and every value a template reads is in
them: a key only in the schema is accepted by ``aws eks create-addon`` and changes nothing; a key only
in the templates cannot be set through ``--configuration-values`` (EKS refuses it: the schema is closed)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from igw.addon import chart, schemas
from igw.config import paths

_VALUES_PATH = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_WITH_VALUES = re.compile(r"\{\{-?\s*with\s+\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)\s*-?\}\}")
_RELATIVE = re.compile(r"(?<![\w$)\]])\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.DOTALL)
_BLOCK_OPEN = re.compile(r"^\s*(if|with|range|define|block)\b")
_BLOCK_END = re.compile(r"^\s*end\b")


def template_reads(directory: Path) -> set[str]:
    """The dotted value paths the chart's templates read: ``.Values.a.b`` anywhere, and ``.c`` inside
    ``{{ with .Values.a.b }}`` as ``a.b.c`` (the templates' one relative form)."""
    found: set[str] = set()
    for file in sorted((directory / "templates").iterdir()):
        text = file.read_text(encoding="utf-8")
        found |= {match.group(1).lstrip(".") for match in _VALUES_PATH.finditer(text)}
        stack: list[str | None] = []
        for action in _ACTION.finditer(text):
            body = action.group(1)
            if _BLOCK_END.match(body):
                if stack:
                    stack.pop()
                continue
            scope = next((s for s in reversed(stack) if s is not None), None)
            if scope is not None and not body.lstrip().startswith("with"):
                for match in _RELATIVE.finditer(body.replace(".Values", "")):
                    found.add(f"{scope}.{match.group(1)}")
            if _BLOCK_OPEN.match(body):
                with_values = _WITH_VALUES.match(action.group(0))
                stack.append(with_values.group(1).lstrip(".") if with_values else None)
    found.discard("")
    return found


def schema_paths(schema: dict[str, Any]) -> dict[str, bool]:
    """Every dotted property path of ``schema`` (``$ref``s to definitions followed at the top), each
    with whether it lists properties of its own (then each of those must be read, not it alone)."""
    definitions = schema.get("definitions", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref", "")
        return resolve(definitions[ref.rsplit("/", 1)[-1]]) if ref.startswith("#/definitions/") else node

    found: dict[str, bool] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, child in (resolve(node).get("properties") or {}).items():
            path = f"{prefix}{key}"
            # definitions below the top (LabelMap, ResourceList, an InferenceGatewayConfig spec) are
            # Kubernetes or igw shapes passed through whole: not walked
            inline = child if "$ref" not in child else {}
            found[path] = bool(inline.get("properties"))
            walk(inline, f"{path}.")

    walk(schema, "")
    return found


def coverage_problems(directory: Path, schema: dict[str, Any]) -> list[str]:
    """Both directions, one line each: schema keys no template reads, template reads the schema lacks."""
    reads = template_reads(directory)
    declared = schema_paths(schema)
    problems: list[str] = []
    # a read with nothing read below it takes the whole value (toYaml, range, a default): all of it is used
    whole = {r for r in reads if not any(other.startswith(f"{r}.") for other in reads)}
    for path in sorted(declared):
        is_read = path in reads or any(r.startswith(f"{path}.") for r in reads)
        if not is_read and not any(path.startswith(f"{r}.") for r in whole):
            problems.append(f"{path}: in the schema, read by no template")
    for read in sorted(reads):
        parts = read.split(".")
        prefixes = [".".join(parts[: n + 1]) for n in range(len(parts))]
        covered = read in declared or any(p in declared and not declared[p] for p in prefixes)
        if not covered:
            problems.append(f"{read}: read by a template, not in the schema")
    return problems


def test_every_schema_value_is_read_and_every_read_value_is_in_the_schema() -> None:
    directory = chart.chart_dir()
    values_schema = json.loads((paths.REPO_ROOT / schemas.VALUES_SCHEMA_FILE).read_text(encoding="utf-8"))
    assert coverage_problems(directory, values_schema) == []
    assert coverage_problems(directory, schemas.addon_configuration_schema()) == []


def test_the_configuration_schema_takes_exactly_the_values_schemas_keys() -> None:
    values_schema = json.loads((paths.REPO_ROOT / schemas.VALUES_SCHEMA_FILE).read_text(encoding="utf-8"))
    assert schema_paths(schemas.addon_configuration_schema()) == schema_paths(values_schema)


def test_the_cross_check_catches_a_key_on_either_side_only(tmp_path: Path) -> None:
    """Planted: a schema key no template reads, and a template read of a key the schema lacks (at the
    top, below a section, and inside a ``with`` block)."""
    directory = tmp_path / "chart"
    shutil.copytree(chart.chart_dir(), directory)
    schema = json.loads((directory / "values.schema.json").read_text(encoding="utf-8"))
    schema["properties"]["unusedTop"] = {"type": "string"}
    schema["properties"]["image"]["properties"]["unusedNested"] = {"type": "string"}
    (directory / "templates" / "planted.yaml").write_text(
        "{{- if .Values.notInSchema }}{{ .Values.podMonitor.notInSchemaEither }}{{ end }}\n"
        "{{- with .Values.gateway.cloudWatch }}{{ .agent.notInSchemaNested }}{{ end }}\n",
        encoding="utf-8",
    )
    assert coverage_problems(directory, schema) == [
        "image.unusedNested: in the schema, read by no template",
        "unusedTop: in the schema, read by no template",
        "gateway.cloudWatch.agent.notInSchemaNested: read by a template, not in the schema",
        "notInSchema: read by a template, not in the schema",
        "podMonitor.notInSchemaEither: read by a template, not in the schema",
    ]
