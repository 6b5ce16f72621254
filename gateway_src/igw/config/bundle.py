"""The copy of the contract that ships inside the package (``igw/config/bundled/``).

An installed gateway (a container image, no source checkout) must validate configurations exactly
as ``igw validate`` does in the repository. ``igw generate`` writes these files from ``schemas/``;
``igw generate --check`` fails when they are stale, like any other generated file.
"""

from __future__ import annotations

import json
from pathlib import Path

from igw.config.paths import ADMISSION_RULES_FILE
from igw.config.schema import resolved_schema

BUNDLED_PREFIX = "gateway_src/igw/config/bundled"
_NOTE = "# Bundled copy of schemas/{name}, written by `igw generate`. Do not edit.\n"


def render_bundled_schema(root: Path) -> str:
    """The main schema with every extension inlined (the bundle has no ``extensions/`` folder)."""
    schema = resolved_schema(root / "schemas")
    schema["$comment"] = "Bundled by `igw generate` from schemas/ (extensions inlined). Do not edit."
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def _copy(root: Path, name: str) -> str:
    return _NOTE.format(name=name) + (root / "schemas" / name).read_text(encoding="utf-8")


def render_bundled_rules(root: Path) -> str:
    return _copy(root, ADMISSION_RULES_FILE)


def render_bundled_inference_extension(root: Path) -> str:
    """The InferenceObjective / InferenceModelRewrite schema (one file, no references to others)."""
    return (root / "schemas" / "inference-extension.schema.json").read_text(encoding="utf-8")
