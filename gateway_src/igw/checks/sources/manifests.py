"""Source: a directory (or file) of Kubernetes manifests - rendered charts, model deployments, configs.

Files that cannot be parsed are listed in ``Inventory.errors`` (the CLI prints them and exits 3 if
nothing was readable) instead of aborting the scan: one bad file must not hide the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from igw.checks.inventory import AwsView, Inventory
from igw.checks.sources.documents import static_view
from igw.checks.sources.yaml_safe import ManifestFileError, load_documents, read_text

SUFFIXES = (".yaml", ".yml", ".json")


def manifest_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)


def load_manifests(root: Path) -> Inventory:
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or directory")
    docs: list[Any] = []
    errors: list[str] = []
    for path in manifest_files(root):
        try:
            text = read_text(path)
            if "{{" in text and "}}" in text and path.parent.name == "templates":
                raise ManifestFileError("an unrendered Helm template (render the chart first)")
            docs.extend(load_documents(text))
        except (ManifestFileError, OSError) as exc:
            errors.append(f"{path}: {exc}")
    source = f"manifests {root}"
    return Inventory(
        kube=static_view(docs, source=source),
        aws=AwsView.absent(
            "manifests carry no AWS account state (use --cluster-name for a live scan or --cdk-out)"
        ),
        source=source,
        errors=errors,
    )


def inventory_from_documents(docs: list[Any], *, source: str) -> Inventory:
    """For callers that already hold documents (e.g. a chart rendered in memory)."""
    return Inventory(
        kube=static_view(docs, source=source),
        aws=AwsView.absent("in-memory manifests carry no AWS account state"),
        source=source,
    )
