"""The one registry of generated files: ``igw generate`` writes them, ``--check`` proves them fresh.

Each entry is ``(output path relative to the repository root, "module:function")``. The function
takes the repository root and returns the file's full text; it must be deterministic. Entries name
their generator by string so that this registry imports nothing heavy - a generator's module (and
its dependencies) is imported only when ``igw generate`` runs it. Adding a generated file is
adding one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

GENERATED_FILES: Final[tuple[tuple[str, str], ...]] = (
    ("crds/inferencegatewayconfigs.inference.sagemaker.aws.amazon.com.yaml", "igw.config.crd:render_crd"),
    (
        "gateway_src/igw/config/bundled/inferencegatewayconfig.schema.json",
        "igw.config.bundle:render_bundled_schema",
    ),
    ("gateway_src/igw/config/bundled/admission-rules.yaml", "igw.config.bundle:render_bundled_rules"),
    (
        "gateway_src/igw/config/bundled/inference-extension.schema.json",
        "igw.config.bundle:render_bundled_inference_extension",
    ),
    (
        "crds/inferenceobjectives.inference.networking.x-k8s.io.yaml",
        "igw.config.inference_extension_crds:render_objective_crd",
    ),
    (
        "crds/inferencemodelrewrites.inference.networking.x-k8s.io.yaml",
        "igw.config.inference_extension_crds:render_rewrite_crd",
    ),
    (
        "addon/chart/inference-gateway/templates/crd-inferenceobjectives.yaml",
        "igw.addon.schemas:render_objective_crd_template",
    ),
    (
        "addon/chart/inference-gateway/templates/crd-inferencemodelrewrites.yaml",
        "igw.addon.schemas:render_rewrite_crd_template",
    ),
    ("addon/chart/inference-gateway/values.schema.json", "igw.addon.schemas:render_values_schema"),
    ("addon/configuration-schema.json", "igw.addon.schemas:render_configuration_schema"),
    (
        "addon/chart/inference-gateway/templates/crd-inferencegatewayconfigs.yaml",
        "igw.addon.schemas:render_crd_template",
    ),
    (
        "crds/globalrouterconfigs.inference.sagemaker.aws.amazon.com.yaml",
        "igw.global_router.crd:render_global_crd",
    ),
    (
        "gateway_src/igw/config/bundled/globalrouterconfig.schema.json",
        "igw.global_router.schema:render_bundled_global_schema",
    ),
    ("addon/chart/inference-gateway/files/alert-rules.yaml", "igw.addon.alert_rules:render_alert_rules"),
    ("addon/prometheus/igw-global-router-rules.yaml", "igw.addon.alert_rules:render_global_alert_rules"),
    (
        "addon/chart/inference-gateway/files/dashboards/igw-overview.json",
        "igw.addon.dashboards:render_overview",
    ),
    (
        "addon/chart/inference-gateway/files/dashboards/igw-pool.json",
        "igw.addon.dashboards:render_pool_detail",
    ),
    (
        "addon/chart/inference-gateway/files/dashboards/igw-security.json",
        "igw.addon.dashboards:render_security",
    ),
)

Generator = Callable[[Path], str]


@dataclass(frozen=True, slots=True)
class FileStatus:
    path: str
    state: str
    """``fresh``, ``stale`` or ``missing``."""
    expected: str


def resolve_generator(target: str) -> Generator:
    """Import ``"module:function"``; ``LookupError`` naming the entry if it does not exist."""
    module_name, _, attr = target.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"generator {target!r} cannot be loaded: {exc}") from exc
    if not callable(function):
        raise LookupError(f"generator {target!r} is not callable")
    generator: Generator = function
    return generator


def file_status(root: Path, entry: tuple[str, str]) -> FileStatus:
    """Render one entry and compare it with what is on disk."""
    rel, target = entry
    expected = resolve_generator(target)(root)
    path = root / rel
    if not path.is_file():
        return FileStatus(path=rel, state="missing", expected=expected)
    current = path.read_text(encoding="utf-8")
    return FileStatus(path=rel, state="fresh" if current == expected else "stale", expected=expected)


def write_file(root: Path, status: FileStatus) -> None:
    path = root / status.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(status.expected, encoding="utf-8")
