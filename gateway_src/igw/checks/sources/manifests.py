"""Source: a directory (or file) of Kubernetes manifests - rendered charts, model deployments, configs.

Files that cannot be parsed are listed in ``Inventory.errors`` (the CLI prints them and exits 3 if
nothing was readable) instead of aborting the scan: one bad file must not hide the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from igw.checks.inventory import AwsView, Inventory, SourceLocation
from igw.checks.k8s import ref
from igw.checks.sources.documents import static_view
from igw.config.documents import MANIFEST_LIMITS, DocumentReadError, parse_text, read_text

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
    locations: dict[str, SourceLocation] = {}
    files = manifest_files(root)
    for path in files:
        try:
            text = read_text(path)
            if "{{" in text and "}}" in text and path.parent.name == "templates":
                errors.append(f"{path}: an unrendered Helm template (render the chart first)")
                continue
            loaded = parse_text(text, source=str(path), limits=MANIFEST_LIMITS)
        except DocumentReadError as exc:  # the message names the file
            errors.append(str(exc))
            continue
        for document in loaded:
            doc = document.content
            docs.append(doc)
            if isinstance(doc, dict) and doc.get("kind"):
                locations.setdefault(ref(doc), SourceLocation(str(path), document.line))
    # A document counts when it is a Kubernetes object: /etc/passwd (one YAML string) or a folder of
    # comments was scanned as an empty cluster and reported "1 failed ... exit 0", not as a mistake.
    objects = [d for d in docs if isinstance(d, dict) and d.get("kind")]
    if not files or (not objects and not errors):
        raise FileNotFoundError(
            f"{root}: no manifests found (no .yaml, .yml or .json file with a Kubernetes object)"
        )
    source = f"manifests {root}"
    return Inventory(
        kube=static_view(docs, source=source),
        aws=AwsView.absent(
            "manifests carry no AWS account state (use --cluster-name for a live scan or --cdk-out)"
        ),
        source=source,
        errors=errors,
        locations=locations,
        default_location=SourceLocation(str(root)),
    )


def inventory_from_documents(docs: list[Any], *, source: str) -> Inventory:
    """For callers that already hold documents (e.g. a chart rendered in memory)."""
    return Inventory(
        kube=static_view(docs, source=source),
        aws=AwsView.absent("in-memory manifests carry no AWS account state"),
        source=source,
    )
