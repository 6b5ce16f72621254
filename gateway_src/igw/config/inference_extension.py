"""The ``InferenceObjective`` and ``InferenceModelRewrite`` contract: schema, rules and validation.

Both kinds keep the reference endpoint picker's group, version and shape
(``inference.networking.x-k8s.io/v1alpha2``) so that YAML written for it works unchanged with the
igw operator. Their JSON Schema is ``schemas/inference-extension.schema.json`` (one document schema
per kind under ``$defs``). Cross-field rules are written there as CEL ``x-kubernetes-validations``
entries, which the CRD generator copies onto the CRDs; each entry's ``x-igw-check`` names the
Python check below that enforces the same rule for ``igw validate`` and the operator (a test runs
both on the same documents and proves they agree).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from jsonschema.protocols import Validator

from igw.config.errors import Problem
from igw.config.jsonpath import format_path, nodes_at
from igw.config.paths import BUNDLED_DIR, SCHEMAS_DIR_ENV, checkout_schemas_dir
from igw.config.schema import SchemaError, inline_refs
from igw.config.schema_messages import ProblemCollector, json_type
from igw.config.schema_validator import schema_validator

GROUP: Final = "inference.networking.x-k8s.io"
VERSION: Final = "v1alpha2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
OBJECTIVE_KIND: Final = "InferenceObjective"
REWRITE_KIND: Final = "InferenceModelRewrite"
KINDS: Final = (OBJECTIVE_KIND, REWRITE_KIND)
SCHEMA_FILE: Final = "inference-extension.schema.json"
CHECK_KEY: Final = "x-igw-check"
"""Key of a CEL entry naming its Python check (dropped from the CRD)."""


def is_inference_extension_resource(doc: Any) -> bool:
    """Whether a parsed document claims to be an InferenceObjective or InferenceModelRewrite."""
    return isinstance(doc, Mapping) and doc.get("kind") in KINDS


def _schema_folder() -> Path:
    override = os.environ.get(SCHEMAS_DIR_ENV)
    if override and (Path(override) / SCHEMA_FILE).is_file():
        return Path(override)
    return checkout_schemas_dir() or BUNDLED_DIR


@functools.lru_cache(maxsize=8)
def _kind_schema(folder: Path, kind: str, _stamp: int) -> dict[str, Any]:
    path = folder / SCHEMA_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read schema: {exc}") from exc
    if kind not in raw.get("$defs", {}):
        raise SchemaError(f"{path}: $defs has no {kind!r} document schema")
    return inline_refs({"$defs": raw["$defs"], "$ref": f"#/$defs/{kind}"}, source=str(path))


def kind_schema(kind: str, folder: Path | None = None) -> dict[str, Any]:
    """The ``$ref``-free JSON Schema of one kind's documents (``folder`` defaults to ``schemas/``)."""
    where = folder or _schema_folder()
    stamp = (where / SCHEMA_FILE).stat().st_mtime_ns if (where / SCHEMA_FILE).is_file() else 0
    return _kind_schema(where, kind, stamp)


@functools.lru_cache(maxsize=8)
def _validator(kind: str, folder: Path | None) -> Validator:
    return schema_validator(kind_schema(kind, folder))


# ---- cross-field rules -------------------------------------------------------------------------------


def _distinct_targets(targets: list[Any]) -> bool:
    names = [t.get("modelRewrite") for t in targets if isinstance(t, Mapping)]
    return len(names) == len(set(names))


def _weights_all_or_none(targets: list[Any]) -> bool:
    has_weight = [isinstance(t, Mapping) and "weight" in t for t in targets]
    return all(has_weight) or not any(has_weight)


RULE_CHECKS: Final[Mapping[str, Callable[[Any], bool]]] = {
    "distinct-rewrite-targets": _distinct_targets,
    "rewrite-weights-all-or-none": _weights_all_or_none,
}
"""The Python side of each CEL rule, keyed by its ``x-igw-check``; ``True`` means the node passes."""


@dataclass(frozen=True, slots=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry of a kind's schema and where it sits."""

    check: str
    rule: str
    message: str
    scope: tuple[str, ...]
    """Property names from the document root; ``[]`` means each list item."""


def cel_rules(kind: str, folder: Path | None = None) -> tuple[CelRule, ...]:
    """Every CEL rule of ``kind``'s schema; ``SchemaError`` for one without a known Python check."""
    found: list[CelRule] = []

    def walk(node: Mapping[str, Any], scope: tuple[str, ...]) -> None:
        for entry in node.get("x-kubernetes-validations", ()):
            check = entry.get(CHECK_KEY)
            if check not in RULE_CHECKS:
                raise SchemaError(f"{SCHEMA_FILE}: CEL rule {entry.get('rule')!r} has no known {CHECK_KEY}")
            found.append(CelRule(check, entry["rule"], entry["message"], scope))
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, (*scope, name))
        if isinstance(node.get("items"), Mapping):
            walk(node["items"], (*scope, "[]"))

    walk(kind_schema(kind, folder), ())
    return tuple(found)


def rule_problems(doc: Mapping[str, Any], *, folder: Path | None = None) -> list[Problem]:
    kind = str(doc.get("kind"))
    problems: list[Problem] = []
    for rule in cel_rules(kind, folder):
        for parts, value in nodes_at(doc, rule.scope):
            if isinstance(value, list) and not RULE_CHECKS[rule.check](value):
                problems.append(Problem(path=format_path(parts), message=rule.message, rule=rule.check))
    return problems


def validate_resource(doc: Any, *, folder: Path | None = None) -> list[Problem]:
    """Every problem of one InferenceObjective / InferenceModelRewrite document; empty means valid."""
    if not isinstance(doc, Mapping):
        return [Problem(path="", message=f"expected an object, got {json_type(doc)}", rule="schema.type")]
    kind = doc.get("kind")
    if kind not in KINDS:
        message = f"kind must be one of {', '.join(KINDS)} (got {json.dumps(kind)})"
        return [Problem(path="kind", message=message, rule="schema.enum")]
    collector = ProblemCollector()
    for error in _validator(str(kind), folder).iter_errors(doc):
        collector.translate(error)
    problems = collector.problems()
    return problems or rule_problems(doc, folder=folder)
