"""Render a location inside a document the way users read it: ``spec.schedulers[1].modelName``.

Keys that are not plain identifiers (label keys such as ``app.kubernetes.io/name``) are written in
brackets, ``matchLabels["app.kubernetes.io/name"]``, so that a path is never ambiguous.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")

PathPart = str | int


def format_path(parts: Iterable[PathPart]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def sort_key(parts: Iterable[PathPart]) -> tuple[tuple[int, int, str], ...]:
    """Document-order-friendly sort key (list indices compare as numbers)."""
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in parts)


_TOKEN = re.compile(r'\.?([A-Za-z_$][A-Za-z0-9_$-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def parse_path(text: str) -> list[PathPart]:
    """Inverse of :func:`format_path`; ``ValueError`` for text it could not have produced."""
    parts: list[PathPart] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or (match.group(0).startswith(".") and not parts):
            raise ValueError(f"not a field path: {text!r} (at offset {pos})")
        name, index, quoted = match.groups()
        parts.append(name if name is not None else int(index) if index is not None else json.loads(quoted))
        pos = match.end()
    return parts


def nodes_at(
    node: Any, scope: Sequence[str], trail: tuple[PathPart, ...] = ()
) -> Iterator[tuple[tuple[PathPart, ...], Any]]:
    """``(path, value)`` of every node below ``node`` that ``scope`` names.

    ``scope`` is a sequence of property names where ``[]`` stands for each item of a list (the
    scope syntax of the CEL admission rules); missing properties simply yield nothing.
    """
    if not scope:
        yield trail, node
        return
    head, rest = scope[0], scope[1:]
    if head == "[]":
        if isinstance(node, list):
            for index, item in enumerate(node):
                yield from nodes_at(item, rest, (*trail, index))
    elif isinstance(node, Mapping) and head in node:
        yield from nodes_at(node[head], rest, (*trail, head))
