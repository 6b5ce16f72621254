"""Label and field selectors as the Kubernetes API server parses them (query-string form).

Kept separate from the product's own selector code on purpose: the fake API server must not
share an implementation with the code it is used to test, or a bug would hide itself.

Grammar (k8s.io/apimachinery/pkg/labels): comma-separated requirements, each one of
``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``.
A malformed selector raises :class:`SelectorError`, which the server answers with 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Mapping[str, str]], bool]

_SET_RE = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s+\((?P<values>[^()]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)\s*$")


class SelectorError(ValueError):
    """The selector string is not valid Kubernetes selector syntax."""


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside ``( … )`` value sets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in selector {selector!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in selector {selector!r}")
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Predicate:
    if match := _SET_RE.match(text):
        key = match["key"]
        values = {v.strip() for v in match["values"].split(",") if v.strip()}
        if match["op"] == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: key not in labels or labels[key] not in values
    if match := _EQ_RE.match(text):
        key, value = match["key"], match["value"]
        if match["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if match := _EXISTS_RE.match(text):
        key = match["key"]
        if match["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement {text.strip()!r}")


def parse_label_selector(selector: str | None) -> Predicate:
    """Return a predicate over a label mapping; ``None``/empty selects everything."""
    if not selector:
        return lambda labels: True
    predicates = [_requirement(part) for part in _split_requirements(selector)]
    return lambda labels: all(p(labels) for p in predicates)


def _field_value(obj: Mapping[str, Any], path: str) -> str | None:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return None if node is None else str(node)


def parse_field_selector(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """Field selectors: ``path=value``, ``path==value``, ``path!=value`` over dotted paths."""
    if not selector:
        return lambda obj: True
    checks: list[tuple[str, str, bool]] = []
    for part in _split_requirements(selector):
        match = _EQ_RE.match(part)
        if match is None:
            raise SelectorError(f"unable to parse field requirement {part.strip()!r}")
        checks.append((match["key"], match["value"], match["op"] == "!="))

    def predicate(obj: Mapping[str, Any]) -> bool:
        for path, value, negate in checks:
            actual = _field_value(obj, path) or ""
            if (actual == value) == negate:
                return False
        return True

    return predicate
