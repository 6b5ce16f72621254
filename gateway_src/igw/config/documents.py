"""Read configuration files: YAML (several documents per file) or JSON, with useful errors.

A YAML syntax error is reported with its line and column (``line 7, column 3: mapping values are
not allowed here``), never as a traceback. Each document keeps the line it starts on so that
``igw validate`` can say which document of a multi-document file a problem belongs to.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from igw.errors import IgwConfigError


class DocumentReadError(IgwConfigError, ValueError):
    """The file cannot be read or parsed; the message names the file and, for syntax, the line."""


@dataclass(frozen=True, slots=True)
class SourceDocument:
    index: int
    """Position in the file, from 0."""
    line: int
    """Line the document starts on, from 1."""
    content: Any
    node: yaml.Node | None = field(default=None, compare=False, repr=False)
    """The YAML node tree (``None`` for JSON), used to find the line of a field."""

    def line_of(self, parts: Sequence[str | int]) -> int:
        """Line (from 1) of the field at ``parts``, or of its nearest existing ancestor."""
        node = self.node
        line = self.line
        for part in parts:
            if isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                node = None
            if node is None:
                break
            line = node.start_mark.line + 1
        return line


def _yaml_error_text(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}" + (f" ({context})" if context else "")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key) if isinstance(key, (str, int, float, bool)) else None
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_node_tree(text: str) -> yaml.Node | None:
    """Node tree of a JSON text, only to find field lines (JSON is parsed by ``json`` itself).

    JSON is (nearly) YAML flow syntax, so the YAML composer yields positions; where it disagrees
    (rare escapes), lines fall back to the document start.
    """
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def parse_text(text: str, *, source: str) -> list[SourceDocument]:
    """Parse ``text`` as JSON (when it starts with ``{`` or ``[``) or multi-document YAML.

    Empty YAML documents (``---`` with nothing after it) are dropped.
    """
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            content = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentReadError(f"{source}: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
        return [SourceDocument(index=0, line=1, content=content, node=_json_node_tree(text))]
    documents: list[SourceDocument] = []
    try:
        loader = _UniqueKeyLoader(text)
        try:
            index = 0
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                content = loader.construct_document(node)
                if content is not None:
                    documents.append(
                        SourceDocument(index=index, line=node.start_mark.line + 1, content=content, node=node)
                    )
                index += 1
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise DocumentReadError(f"{source}: {_yaml_error_text(exc)}") from exc
    return documents


def read_documents(path: str | Path) -> list[SourceDocument]:
    """Read and parse one file (``-`` is standard input); ``DocumentReadError`` if unreadable or malformed."""
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentReadError(f"{path}: cannot read file: {exc}") from exc
    return parse_text(text, source=str(path))


def iter_contents(documents: list[SourceDocument]) -> Iterator[Any]:
    for document in documents:
        yield document.content
