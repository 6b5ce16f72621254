"""Bounded YAML/JSON loading for untrusted manifest files.

``yaml.safe_load`` is safe from code execution but not from size: alias bombs ("billion laughs")
expand into enormous structures once walked. We cap file size, the number of aliases per file, and
the size of each document *as expanded* (counted with an early exit, so the count itself is bounded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from igw.errors import IgwToolingError

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 2_000_000


class ManifestFileError(IgwToolingError, ValueError):
    """A file that cannot be read as manifests; the message names the file and the reason."""


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                raise ManifestFileError(f"more than {MAX_ALIASES} YAML aliases")
        return super().compose_node(parent, index)


def _check_expanded_size(doc: Any) -> None:
    budget = MAX_EXPANDED_NODES
    stack = [doc]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise ManifestFileError(
                f"a document expands to more than {MAX_EXPANDED_NODES} nodes (YAML alias bomb?)"
            )
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def load_documents(text: str) -> list[Any]:
    """All documents of a YAML (or JSON) text; ``ManifestFileError`` with the parser's reason."""
    try:
        loader = _BoundedLoader(text)
    except yaml.YAMLError as exc:  # the reader rejects control characters up front
        raise ManifestFileError(f"not valid YAML: {str(exc).splitlines()[0]}") from exc
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            doc = loader.get_data()
            _check_expanded_size(doc)
            docs.append(doc)
        return docs
    except (yaml.YAMLError, RecursionError) as exc:
        raise ManifestFileError(f"not valid YAML: {str(exc).splitlines()[0]}") from exc
    finally:
        loader.dispose()


def read_text(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ManifestFileError(f"{size} bytes is over the {MAX_FILE_BYTES}-byte limit")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestFileError(f"not UTF-8 text: {exc}") from exc
