"""Load the gateway's configuration from a file: read, validate, build - or fail with every reason.

Used by ``igw serve`` at start-up and by its hot reload, which must keep the running config when a
new file is broken; hence one exception type (:class:`~igw.config.errors.ConfigError`) for every
failure - syntax errors and a broken contract file in ``schemas/`` included - carrying all problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from igw.config.build import build_gateway_config
from igw.config.documents import DocumentReadError, read_resources
from igw.config.errors import ConfigError, Problem
from igw.config.jsonpath import parse_path
from igw.config.kinds import unknown_kind_problem
from igw.config.model import GatewayConfig
from igw.config.schema import SchemaError
from igw.config.unused_fields import note_text, unused_field_notes
from igw.config.validate import is_gateway_config, validate_document


def served_name_problems(doc: Mapping[str, Any]) -> list[Problem]:
    """A problem when ``doc`` (valid) has ``metadata.generateName`` and no ``metadata.name``.

    The contract accepts that shape (``kubectl create`` does: the API server completes the prefix
    into a name before the object is stored, so the operator always sees a name); a gateway serving
    the file as it is has no API server to do so, and the name identifies the gateway. Before
    session s39 both ``igw validate`` and ``igw serve`` refused it as a missing field."""
    metadata = doc.get("metadata")
    if isinstance(metadata, Mapping) and "name" not in metadata and "generateName" in metadata:
        return [
            Problem(
                path="metadata.name",
                message="required to serve a file: metadata.generateName is completed into a name only "
                "by the API server (kubectl create), and igw serve reads the file as it is",
                rule="serve-needs-name",
            )
        ]
    return []


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """The first InferenceGatewayConfig document in ``path`` (YAML or JSON, a JSON stream included;
    the items of a ``kind: List`` count as documents, as for ``kubectl apply -f``), validated and
    built; it must have a ``metadata.name`` (:func:`served_name_problems`). Its
    :attr:`~GatewayConfig.notes` name the fields of AWS's that it sets without effect here."""
    source = str(path)
    try:
        documents = read_resources(path)
    except DocumentReadError as exc:
        raise ConfigError([Problem(path="", message=str(exc), rule="syntax")], source=source) from exc
    for document in documents:
        if not is_gateway_config(document.content):
            continue
        try:
            problems = validate_document(document.content)
        except SchemaError as exc:  # a broken schemas/ file: still one exception type for callers
            raise ConfigError([Problem(path="", message=str(exc), rule="contract")], source=source) from exc
        problems += served_name_problems(document.content)
        if problems:
            raise ConfigError(
                problems, source=f"{source} (document {document.index + 1}, line {document.line})"
            )
        notes = [
            (document.line_of(parse_path(note.path)), note_text(note))
            for note in unused_field_notes(document.content, skip_defaults=True)
        ]
        return replace(
            build_gateway_config(document.content),
            notes=tuple(f"{source}:{line}: note: {text}" for line, text in sorted(notes)),
        )
    # a misspelled kind (``InferenceGatewayconfig``) is named, not only counted
    misspelled = [
        Problem(path=p.path, message=f"document {d.index + 1}, line {d.line}: {p.message}", rule=p.rule)
        for d in documents
        if (p := unknown_kind_problem(d.content)) is not None
    ]
    raise ConfigError(
        [
            Problem(
                path="",
                message=f"no InferenceGatewayConfig document found ({len(documents)} document(s) read)",
                rule="no-config",
            ),
            *misspelled,
        ],
        source=source,
    )
