"""Instant values of the PromQL the alert rules use, over series given with their values.

Enough of Prometheus's evaluation to check that a rule fires on a synthetic situation and stays quiet
on its near-misses: vector matching (``on``/``ignoring``, ``group_left``/``group_right``, the
result's labels as Prometheus keeps them), arithmetic by IEEE rules (``0 / 0`` is NaN, which no
comparison passes), comparisons as filters, ``and``/``or``/``unless``, ``sum``/``min``/``max``/
``count`` by or without labels. A range function (``rate``, ``increase``) is taken as the value the
test gives the series: the test states the rates. Anything else fails rather than be guessed.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

import promql_parser

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
Given = list[tuple[dict[str, str], float]]
Fired = dict[tuple[tuple[str, str], ...], float]

_NAME = "__name__"
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}
_SETS = frozenset({"and", "or", "unless"})


def _divide(a: float, b: float) -> float:
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a)


def _matches(labels: dict[str, str], name: str, op: str, value: str) -> bool:
    have = labels.get(name, "")
    if op in ("MatchOp.Equal", "MatchOp.NotEqual"):
        return (have == value) == (op == "MatchOp.Equal")
    assert op in ("MatchOp.Re", "MatchOp.NotRe"), op
    return (re.fullmatch(value, have) is not None) == (op == "MatchOp.Re")


def _drop(labels: Labels, names: set[str]) -> Labels:
    return frozenset((k, v) for k, v in labels if k not in names)


def _key(labels: Labels, modifier: Any) -> Labels:
    """What a binary operation matches a series on: ``on(...)``'s labels, else every label but
    ``ignoring(...)``'s and the metric name."""
    matching = modifier.matching if modifier is not None else None
    if matching is not None and str(matching.type) == "LabelModifierType.Include":
        return frozenset((k, v) for k, v in labels if k in matching.labels)
    ignored = set(matching.labels) if matching is not None else set()
    return _drop(labels, ignored | {_NAME})


def _apply(op: str, a: float, b: float) -> tuple[float, bool]:
    """``a op b`` as Prometheus computes it: the value and whether the element is kept."""
    if op in _COMPARE:
        return a, _COMPARE[op](a, b)
    if op == "/":
        return _divide(a, b), True
    return _ARITHMETIC[op](a, b), True


def values(expr: str, given: Given) -> Vector | float:
    """The instant vector (or number) ``expr`` gives over ``given``."""
    return _eval(promql_parser.parse(expr), given)


def fired(expr: str, given: Given) -> Fired:
    """The alerts ``expr`` fires over ``given``: each element's labels (without the metric name) as a
    sorted tuple of pairs, and its value."""
    result = values(expr, given)
    assert not isinstance(result, float), expr
    return {tuple(sorted(_drop(labels, {_NAME}))): v for labels, v in result.items()}


def _eval(node: Any, given: Given) -> Vector | float:
    kind = type(node).__name__
    if kind == "NumberLiteral":
        return float(node.val)
    if kind == "ParenExpr":
        return _eval(node.expr, given)
    if kind == "MatrixSelector":
        return _eval(node.vector_selector, given)
    if kind == "VectorSelector":
        matchers = [(m.name, str(m.op), m.value) for m in node.matchers.matchers]
        out: Vector = {}
        for labels, v in given:
            if labels[_NAME] == node.name and all(_matches(labels, *m) for m in matchers):
                out[frozenset(labels.items())] = v
        return out
    if kind == "Call":
        assert node.func.name in ("rate", "increase"), node.func.name
        inner = _eval(node.args[0], given)
        assert not isinstance(inner, float)
        return {_drop(labels, {_NAME}): v for labels, v in inner.items()}
    if kind == "AggregateExpr":
        return _aggregate(node, given)
    assert kind == "BinaryExpr", kind
    return _binary(node, given)


def _aggregate(node: Any, given: Given) -> Vector:
    op = str(node.op)
    assert op in ("sum", "min", "max", "count"), op
    inner = _eval(node.expr, given)
    assert not isinstance(inner, float)
    groups: dict[Labels, list[float]] = {}
    for labels, v in inner.items():
        if node.modifier is None:
            key: Labels = frozenset()
        elif str(node.modifier.type) == "AggModifierType.By":
            key = frozenset((k, x) for k, x in labels if k in node.modifier.labels)
        else:
            key = _drop(labels, set(node.modifier.labels) | {_NAME})
        groups.setdefault(key, []).append(v)
    combine: dict[str, Callable[[list[float]], float]] = {
        "sum": lambda vs: math.fsum(vs),
        "min": min,
        "max": max,
        "count": lambda vs: float(len(vs)),
    }
    return {key: combine[op](vs) for key, vs in groups.items()}


def _binary(node: Any, given: Given) -> Vector | float:
    op = str(node.op)
    modifier = node.modifier
    assert modifier is None or not modifier.return_bool, "bool modifier"
    lhs, rhs = _eval(node.lhs, given), _eval(node.rhs, given)
    if isinstance(lhs, float) and isinstance(rhs, float):
        assert op in ("+", "-", "*", "/"), op
        return _apply(op, lhs, rhs)[0]
    if isinstance(lhs, float) or isinstance(rhs, float):
        assert op not in _SETS, op
        out: Vector = {}
        vector = rhs if isinstance(lhs, float) else lhs
        assert not isinstance(vector, float)
        for labels, v in vector.items():
            a, b = (lhs, v) if isinstance(lhs, float) else (v, rhs)
            assert isinstance(a, float)
            assert isinstance(b, float)
            value, keep = _apply(op, a, b)
            if keep:
                # a comparison keeps the vector's own value and name; arithmetic drops the name
                out[labels if op in _COMPARE else _drop(labels, {_NAME})] = v if op in _COMPARE else value
        return out
    if op in _SETS:
        right = {_key(labels, modifier) for labels in rhs}
        if op == "or":
            left = {_key(labels, modifier) for labels in lhs}
            return {**lhs, **{k: v for k, v in rhs.items() if _key(k, modifier) not in left}}
        return {k: v for k, v in lhs.items() if (_key(k, modifier) in right) == (op == "and")}
    return _match(op, lhs, rhs, modifier)


def _match(op: str, lhs: Vector, rhs: Vector, modifier: Any) -> Vector:
    """Vector-to-vector arithmetic or comparison, one-to-one or grouped."""
    card = str(modifier.card) if modifier is not None else "VectorMatchCardinality.OneToOne"
    many, one = (rhs, lhs) if card.endswith("OneToMany") else (lhs, rhs)
    ones: dict[Labels, tuple[Labels, float]] = {}
    for labels, v in one.items():
        key = _key(labels, modifier)
        assert key not in ones, f"many-to-many match on {sorted(key)}"
        ones[key] = (labels, v)
    out: Vector = {}
    for labels, v in many.items():
        key = _key(labels, modifier)
        if key not in ones:
            continue
        other_labels, other = ones[key]
        a, b = (other, v) if card.endswith("OneToMany") else (v, other)
        value, keep = _apply(op, a, b)
        if not keep:
            continue
        result = labels if op in _COMPARE else _drop(labels, {_NAME})
        if card.endswith("OneToOne"):
            matching = modifier.matching if modifier is not None else None
            if matching is not None and str(matching.type) == "LabelModifierType.Include":
                result = frozenset((k, x) for k, x in result if k in matching.labels)
            elif matching is not None:
                result = _drop(result, set(matching.labels))
        else:
            include = set(modifier.group_labels or ())
            extra = {(k, x) for k, x in other_labels if k in include}
            result = _drop(result, include) | extra
        assert result not in out, f"duplicate series {sorted(result)}"
        out[result] = value
    return out
