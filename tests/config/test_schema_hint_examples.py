"""What an ``x-igw-hint`` says is true of its ``pattern``: the examples it quotes are allowed, the
lengths it states are the pattern's, and common wrong values of the usual kinds are refused.

A hint is printed to the user in place of the regular expression (``must be <hint>; got "..."``), so a
wrong example or length sends them to another wrong value. Convention for examples: they follow
``such as `` or ``e.g. `` and run to the first ``": "``, ``"; "``, ``" ("`` or the end of the hint;
``", "`` and ``" or "`` separate them; surrounding double quotes are stripped. A stated length is
``N to M``, ``at most M``, ``N-digit`` or ``N lower-case hex digits``: right after the ``": "`` that
starts the hint's description it is the whole value's length (the pattern's width within
``minLength``/``maxLength``, from 0 after ``empty, or``), elsewhere the width of some part of the
pattern (``vpc- and 8 to 17 lower-case hex digits``).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from igw.config.schema_validator import pattern_matches
from tests.config.test_schema_hints import ROOT, WALKED

_parser: Any = importlib.import_module("re._parser")
"""Python's regular-expression parser (no typeshed stub; ``sre_parse``, stubbed, warns on import). Its
``getwidth`` gives a (sub)pattern's least and greatest length; the patterns here are in the syntax
RE2 and Python share."""
UNBOUNDED = _parser.MAXREPEAT - 1
"""What ``getwidth`` reports as the greatest length of an unbounded pattern."""

Node = tuple[str, dict[str, Any]]


def hinted_patterns(node: Any, path: str = "") -> Iterator[Node]:
    """The JSON pointer and node of each schema node in ``node`` with a ``pattern`` and a hint."""
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str) and node.get("x-igw-hint"):
            yield path or "/", node
        for key, value in node.items():
            yield from hinted_patterns(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from hinted_patterns(value, f"{path}/{index}")


HINTED: list[Node] = [
    (f"{schema_file.relative_to(ROOT)}#{pointer}", node)
    for schema_file in WALKED
    for pointer, node in hinted_patterns(json.loads(schema_file.read_text(encoding="utf-8")))
]
"""Each hinted pattern of the walked schemas (``test_schema_hints``), named by file and pointer."""
NODES = [pytest.param(node, id=name) for name, node in HINTED]


def allowed(node: dict[str, Any], value: str) -> bool:
    """Whether ``value`` passes the node's ``pattern`` (RE2, as the API server and ``igw validate``
    match it) and its ``minLength``/``maxLength``."""
    return (
        pattern_matches(node["pattern"], value)
        and len(value) >= node.get("minLength", 0)
        and len(value) <= node.get("maxLength", len(value))
    )


def examples(hint: str) -> list[str]:
    """The examples ``hint`` quotes (the convention in the module docstring)."""
    found: list[str] = []
    for start in re.finditer(r"\b(?:such as|e\.g\.) ", hint):
        tail = re.split(r": |; | \(", hint[start.end() :], maxsplit=1)[0]
        found += [item.strip('"') for item in re.split(r", | or ", tail)]
    return found


def stated_lengths(hint: str) -> Iterator[tuple[int, int, bool]]:
    """Each length ``hint`` states: (least, greatest, whether of the whole value)."""
    described = hint.find(": ") + 2 if ": " in hint else 0
    spans = (
        r"\b(?P<least>\d+) to (?P<greatest>\d+)\b(?! *[/<])",
        r"\bat most (?P<greatest>\d+)\b",
        r"\b(?P<least>\d+)-digit\b",
        r"(?<!to )\b(?P<least>\d+) lower-case hex digits\b",
    )
    for expression in spans:
        for match in re.finditer(expression, hint):
            found = match.groupdict()
            least = int(found.get("least") or 1)
            greatest = int(found.get("greatest") or least)
            whole = match.start() == described
            if whole and (hint.startswith("empty, or ") or "least" not in found):
                least = 0
            yield least, greatest, whole


def whole_width(node: dict[str, Any]) -> tuple[int, int]:
    """The least and greatest length of a value the node allows (``UNBOUNDED`` if none)."""
    least, greatest = _parser.parse(node["pattern"]).getwidth()
    return max(least, node.get("minLength", 0)), min(greatest, node.get("maxLength", UNBOUNDED))


def part_widths(pattern: str) -> set[tuple[int, int]]:
    """The least and greatest length of every run of consecutive items, at every nesting level, of
    ``pattern``: the parts a hint may give a length of."""
    widths: set[tuple[int, int]] = set()

    def visit(sequence: Any) -> None:
        items = list(sequence)
        for first in range(len(items)):
            for last in range(first + 1, len(items) + 1):
                widths.add(_parser.SubPattern(sequence.state, items[first:last]).getwidth())
        for op, argument in items:
            for inner in _nested(op, argument):
                visit(inner)

    visit(_parser.parse(pattern))
    return widths


def _nested(op: Any, argument: Any) -> list[Any]:
    """The sub-sequences inside one parsed item (a group, a repeat, an alternation)."""
    if op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT):
        return [argument[2]]
    if op is _parser.SUBPATTERN:
        return [argument[3]]
    if op is _parser.BRANCH:
        return list(argument[1])
    return []


def length_mismatches(node: dict[str, Any]) -> list[str]:
    """The lengths the node's hint states that its pattern and length bounds do not give."""
    wrong = []
    for least, greatest, whole in stated_lengths(node["x-igw-hint"]):
        if whole:
            if whole_width(node) != (least, greatest):
                wrong.append(f"{least} to {greatest} (the value is {whole_width(node)})")
        elif (least, greatest) not in part_widths(node["pattern"]):
            wrong.append(f"{least} to {greatest} (no part of the pattern is)")
    return wrong


@pytest.mark.parametrize("node", NODES)
def test_the_hints_examples_are_allowed(node: dict[str, Any]) -> None:
    hint = node["x-igw-hint"]
    quoted = examples(hint)
    assert all(item and " " not in item for item in quoted), f"examples not read right: {quoted}"
    refused = [item for item in quoted if not allowed(node, item)]
    assert not refused, f"{hint!r}: the pattern {node['pattern']!r} refuses its examples {refused}"


@pytest.mark.parametrize("node", NODES)
def test_the_hints_lengths_are_the_patterns(node: dict[str, Any]) -> None:
    wrong = length_mismatches(node)
    assert not wrong, f"{node['x-igw-hint']!r} states lengths {node['pattern']!r} does not give: {wrong}"


def test_examples_and_lengths_are_read_from_the_hints() -> None:
    """The convention reads every example and length, so the tests above are not vacuous."""
    assert examples('a duration such as 10s, 1h30m or 500ms (no days); e.g. "5" or "-1"') == [
        "10s",
        "1h30m",
        "500ms",
        "5",
        "-1",
    ]
    assert examples("an API group such as cert-manager.io: lower-case letters") == ["cert-manager.io"]
    assert examples("a Gateway API duration such as 10s, 1h30m, 500ms; 0s disables it") == [
        "10s",
        "1h30m",
        "500ms",
    ]
    hinted = sum(1 for _, node in HINTED if examples(node["x-igw-hint"]))
    assert hinted >= 25
    assert list(stated_lengths("a name: 1 to 40 letters, then vpc- and 8 to 17 hex digits")) == [
        (1, 40, True),
        (8, 17, False),
    ]
    assert list(stated_lengths("empty, or an image tag: 1 to 128 letters")) == [(0, 128, True)]
    assert list(stated_lengths("a label value: at most 63 letters; a 12-digit id")) == [
        (0, 63, True),
        (12, 12, False),
    ]
    assert list(stated_lengths("a CIDR with a prefix of /16 to /24")) == []


def test_a_wrong_example_or_length_is_found() -> None:
    """A planted wrong example, a wrong whole length and a wrong part length are each reported."""
    region = {"pattern": "^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", "x-igw-hint": "a region such as us-west-2a"}
    assert [item for item in examples(region["x-igw-hint"]) if not allowed(region, item)] == ["us-west-2a"]
    label = {"pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", "x-igw-hint": "a label: 1 to 64 letters"}
    assert length_mismatches(label) == ["1 to 64 (the value is (1, 63))"]
    label["x-igw-hint"] = "a label: 1 to 63 letters"
    assert length_mismatches(label) == []
    unbounded = {"pattern": "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$", "x-igw-hint": "a name: 1 to 63 letters"}
    assert length_mismatches(unbounded) == [f"1 to 63 (the value is (1, {UNBOUNDED}))"]
    vpc = {"pattern": "^vpc-[0-9a-f]{8,17}$", "x-igw-hint": "a VPC id: vpc- and 8 to 16 hex digits"}
    assert length_mismatches(vpc) == ["8 to 16 (no part of the pattern is)"]
    vpc["x-igw-hint"] = "a VPC id: vpc- and 8 to 17 hex digits"
    assert length_mismatches(vpc) == []


KINDS: dict[str, tuple[str, list[str]]] = {
    "duration": (
        r"\bduration\b",
        ["5 s", "1d", "10", "-1s", "1h 30m", "10S", "1h30", "10s\n", "P1D"],
    ),
    "region": (
        r"\bregion name\b",
        ["US-WEST-2", "us west 2", "us_west_2", "-us-west-2", "us-west-2-", "us-west-2\n"],
    ),
    "DNS label": (
        r"\bDNS-1123 label\b|\bnamespace name\b|\bDNS label\b",
        ["-a", "a-", "Abc", "a_b", "a.b", "a b", "a\n", "a" * 64],
    ),
}
"""Common wrong values of the usual kinds, each refused by every pattern whose hint names the kind."""


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_common_wrong_values_of_a_kind_are_refused(kind: str) -> None:
    named, wrong = KINDS[kind]
    nodes = [node for _, node in HINTED if re.search(named, node["x-igw-hint"])]
    assert len(nodes) >= 3, f"too few {kind} patterns found: the hint wording changed"
    passed = [(node["pattern"], value) for node in nodes for value in wrong if allowed(node, value)]
    assert not passed, f"{kind} patterns allow wrong values: {passed}"
