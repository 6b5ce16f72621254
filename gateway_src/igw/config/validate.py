"""Validate an ``InferenceGatewayConfig`` document: the JSON Schema, then the cross-field rules.

Every problem is reported, not just the first, each with the exact field path and a message a user
can act on (``unknown field "spec.foo"``, ``spec.schedulers[1].modelName: duplicates
spec.schedulers[0].modelName ("llama")``); see :mod:`igw.config.schema_messages` for the wording.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jsonschema.protocols import Validator

from igw.config.errors import Problem
from igw.config.extension_references import reference_problems
from igw.config.model import KIND
from igw.config.resource_quantities import resource_problems
from igw.config.rules import check_rules
from igw.config.schema import admission_rules, resolved_schema, schema_version
from igw.config.schema_messages import PROVIDER_PATH, ProblemCollector, json_type
from igw.config.schema_validator import schema_validator


def is_gateway_config(doc: Any) -> bool:
    """Whether a parsed document claims to be an InferenceGatewayConfig (by ``kind``)."""
    return isinstance(doc, Mapping) and doc.get("kind") == KIND


@functools.lru_cache(maxsize=4)
def _validator_for(_version: tuple[Path, tuple[tuple[str, int], ...]]) -> Validator:
    return schema_validator(resolved_schema(_version[0]))


def _validator(folder: Path | None) -> Validator:
    """One compiled validator per version of the contract files (rebuilt when a file changes)."""
    return _validator_for(schema_version(folder))


@functools.lru_cache(maxsize=4)
def _provider_validator_for(_version: tuple[Path, tuple[tuple[str, int], ...]]) -> Validator:
    node: Any = resolved_schema(_version[0])
    for part in PROVIDER_PATH:
        node = node["properties"][part]
    return schema_validator(node)


def _provider_list(doc: Mapping[str, Any]) -> list[Any] | None:
    node: Any = doc
    for part in PROVIDER_PATH:
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, list) else None


def schema_problems(doc: Mapping[str, Any], *, schemas: Path | None = None) -> list[Problem]:
    """Problems the JSON Schema finds (closed objects, types, limits, patterns, formats).

    ``auth.jwt.provider`` written as a list is rejected (one object is the contract), and each
    item is still checked as a provider, so the user fixes everything in one round.
    """
    collector = ProblemCollector()
    for error in _validator(schemas).iter_errors(doc):
        collector.translate(error)
    providers = _provider_list(doc)
    if providers is not None:
        validator = _provider_validator_for(schema_version(schemas))
        for index, item in enumerate(providers):
            for error in validator.iter_errors(item):
                collector.translate(error, prefix=(*PROVIDER_PATH, index))
    return collector.problems()


def rule_problems(doc: Mapping[str, Any], *, schemas: Path | None = None) -> list[Problem]:
    """Problems the cross-field admission rules find (see :mod:`igw.config.rules`)."""
    return check_rules(doc, rule_ids=[rule.id for rule in admission_rules(schemas)])


def validate_document(doc: Mapping[str, Any], *, schemas: Path | None = None) -> list[Problem]:
    """All problems of one parsed InferenceGatewayConfig document; empty means valid.

    The caller decides what is an IGWC (see :func:`is_gateway_config`); a document passed here is
    checked against the IGWC contract whatever it claims to be. ``schemas`` overrides the folder
    the contract is read from (tests; normally ``schemas/``).
    """
    if not isinstance(doc, Mapping):
        return [Problem(path="", message=f"expected an object, got {json_type(doc)}", rule="schema.type")]
    return [
        *schema_problems(doc, schemas=schemas),
        *rule_problems(doc, schemas=schemas),
        *reference_problems(doc),
        *resource_problems(doc),
    ]
