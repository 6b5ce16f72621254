"""Where the contract files (``schemas/``) are read from.

In a source checkout the live ``schemas/`` folder at the repository root is used, so an edit to a
schema (or a new ``schemas/extensions/<name>.schema.json``) takes effect without a build step. An
installed package (the gateway image) has no checkout; it reads the copy that ``igw generate``
bundles into ``igw/config/bundled/``. ``IGW_SCHEMAS_DIR`` overrides both (tests use it to add a
temporary extension).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

SCHEMAS_DIR_ENV: Final = "IGW_SCHEMAS_DIR"
MAIN_SCHEMA_FILE: Final = "inferencegatewayconfig.schema.json"
ADMISSION_RULES_FILE: Final = "admission-rules.yaml"
EXTENSIONS_SUBDIR: Final = "extensions"
EXTENSION_SUFFIX: Final = ".schema.json"

PACKAGE_DIR: Final = Path(__file__).resolve().parent
BUNDLED_DIR: Final = PACKAGE_DIR / "bundled"
REPO_ROOT: Final = PACKAGE_DIR.parents[2]
"""The repository root when running from a checkout (``gateway_src/igw/config`` → three up)."""


def checkout_schemas_dir() -> Path | None:
    """``<repo>/schemas`` when this package runs from a source checkout, else ``None``."""
    candidate = REPO_ROOT / "schemas"
    return candidate if (candidate / MAIN_SCHEMA_FILE).is_file() else None


def schemas_dir() -> Path:
    """The folder the contract is read from (see the module docstring for the order)."""
    override = os.environ.get(SCHEMAS_DIR_ENV)
    if override:
        return Path(override)
    return checkout_schemas_dir() or BUNDLED_DIR
