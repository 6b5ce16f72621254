"""Source: a directory (or file) of Kubernetes manifests - rendered charts, model deployments, configs.

Files that cannot be parsed are listed in ``Inventory.errors`` (the CLI prints them and exits 3 if
nothing was readable) instead of aborting the scan: one bad file must not hide the rest.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from igw.checks.inventory import AwsView, Inventory, SourceLocation
from igw.checks.k8s import ref
from igw.checks.sources.documents import static_view
from igw.config.documents import MANIFEST_LIMITS, DocumentReadError, parse_text, read_text

SUFFIXES = (".yaml", ".yml", ".json")


def unresolvable_link(path: Path) -> str | None:
    """Why the symlink ``path`` leads to no file (a loop, or a target that does not exist), or
    ``None`` when ``path`` is no such link. ``Path.is_file`` answers False for both, so a manifest
    behind such a link was skipped without a word (until session s50)."""
    if not path.is_symlink():
        return None
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{path}: a symlink loop (it never reaches a file)"
        return f"{path}: a broken symlink (its target {os.readlink(path)!r} does not exist)"
    return None


def manifest_files(root: Path) -> tuple[list[Path], list[str]]:
    """The manifest files under ``root`` (sorted), and a source problem for each manifest-named
    symlink that leads to no file."""
    if root.is_file():
        return [root], []
    files: list[Path] = []
    problems: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() not in SUFFIXES:
            continue
        if path.is_file():
            files.append(path)
        elif (problem := unresolvable_link(path)) is not None:
            problems.append(problem)
    return files, problems


def load_manifests(root: Path) -> Inventory:
    if not root.exists():
        raise FileNotFoundError(unresolvable_link(root) or f"{root}: no such file or directory")
    docs: list[Any] = []
    locations: dict[str, SourceLocation] = {}
    files, errors = manifest_files(root)
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
    if not objects and not errors:
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
