"""Every field of every generated CRD carries a description, so ``kubectl explain`` documents it.

``kubectl explain igwc.spec.schedulers`` printed ``<no description>`` for most fields (121 of the
159 outside ``spec.extensions``, ``spec`` and all of ``status`` among them): the schemas in
``schemas/`` left them undescribed and nothing noticed. The walk reads the committed CRDs in
``crds/`` (``igw generate --check`` keeps them equal to the schemas), so a CRD added later is held
to the same rule without a change here.

The only fields allowed without a description are the top-level ``apiVersion``, ``kind`` and
``metadata``: the CRD generators write them as bare types, and the API server publishes them with
TypeMeta's and ObjectMeta's own descriptions (``kubectl explain igwc.metadata`` shows ObjectMeta's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from .support import REPO_ROOT

DOCUMENTED_BY_THE_API_SERVER = {"apiVersion": "string", "kind": "string", "metadata": "object"}
"""Top-level fields the API server describes itself (TypeMeta, ObjectMeta), with the bare type the
generators give them: anything more on them would be ours and need a description too."""

CRD_FILES = sorted((REPO_ROOT / "crds").glob("*.yaml"))


def undescribed_fields(schema: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """Dotted paths (``[]`` for list items, ``{}`` for map values) of fields without a description."""
    for name, sub in (schema.get("properties") or {}).items():
        field = f"{path}.{name}" if path else name
        if not str(sub.get("description") or "").strip():
            yield field
        yield from undescribed_fields(sub, field)
    if isinstance(schema.get("items"), Mapping):
        yield from undescribed_fields(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from undescribed_fields(schema["additionalProperties"], f"{path}{{}}")


def _versions(path: Path) -> list[tuple[str, dict[str, Any]]]:
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [(v["name"], v["schema"]["openAPIV3Schema"]) for v in crd["spec"]["versions"]]


def test_the_walk_finds_undescribed_fields_at_every_depth() -> None:
    schema = {
        "properties": {
            "spec": {
                "description": "d",
                "properties": {
                    "list": {
                        "description": "d",
                        "items": {"properties": {"a": {"type": "string"}, "b": {"description": "d"}}},
                    },
                    "map": {
                        "description": "d",
                        "additionalProperties": {"properties": {"c": {"description": " "}}},
                    },
                    "plain": {"type": "integer"},
                },
            }
        }
    }
    assert list(undescribed_fields(schema)) == ["spec.list[].a", "spec.map{}.c", "spec.plain"]


def test_the_committed_crds_are_found() -> None:
    names = {path.name.split(".")[0] for path in CRD_FILES}
    assert {
        "inferencegatewayconfigs",
        "globalrouterconfigs",
        "inferenceobjectives",
        "inferencemodelrewrites",
    } <= names


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.name.split(".")[0])
def test_every_field_of_the_crd_has_a_description(path: Path) -> None:
    for version, schema in _versions(path):
        missing = [f for f in undescribed_fields(schema) if f not in DOCUMENTED_BY_THE_API_SERVER]
        assert missing == [], (
            f"{path.name} {version}: {len(missing)} field(s) without a description: {missing}"
        )
        for name, kind in DOCUMENTED_BY_THE_API_SERVER.items():
            assert schema["properties"][name] == {"type": kind}, (path.name, name)
