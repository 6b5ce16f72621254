"""Load the gateway's configuration from a file: read, validate, build - or fail with every reason.

Used by ``igw serve`` at start-up and by its hot reload, which must keep the running config when a
new file is broken; hence one exception type (:class:`~igw.config.errors.ConfigError`) for every
failure - syntax errors and a broken contract file in ``schemas/`` included - carrying all problems.
"""

from __future__ import annotations

from pathlib import Path

from igw.config.build import build_gateway_config
from igw.config.documents import DocumentReadError, read_resources
from igw.config.errors import ConfigError, Problem
from igw.config.model import GatewayConfig
from igw.config.schema import SchemaError
from igw.config.validate import is_gateway_config, validate_document


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """The first InferenceGatewayConfig document in ``path`` (YAML or JSON; the items of a
    ``kind: List`` count as documents, as for ``kubectl apply -f``), validated and built."""
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
        if problems:
            raise ConfigError(
                problems, source=f"{source} (document {document.index + 1}, line {document.line})"
            )
        return build_gateway_config(document.content)
    raise ConfigError(
        [
            Problem(
                path="",
                message=f"no InferenceGatewayConfig document found ({len(documents)} document(s) read)",
                rule="no-config",
            )
        ],
        source=source,
    )
