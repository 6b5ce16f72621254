"""Instant values of the PromQL the alert rules use, over series given with their values: the one
evaluator of the alert-rule tests, walking ``promql-parser``'s tree.

Enough of Prometheus's evaluation to check that a rule fires on a synthetic situation and stays quiet
on its near-misses, each rule after the operators page
(https://prometheus.io/docs/prometheus/latest/querying/operators/):

- vector matching (``on``/``ignoring``, ``group_left``/``group_right``) with the result's labels as
  Prometheus keeps them: one-to-one keeps the left side's (reduced to ``on``'s, less
  ``ignoring``'s), a grouped match the "many" side's plus the group labels from the "one" side;
- cardinality errors as Prometheus raises them (:class:`QueryError`): a match group repeated on the
  "one" side (the right side for a one-to-one match), a one-to-one match group kept twice on the left,
  a grouped match whose results are not unique - never a silent pick;
- arithmetic by IEEE rules (``0 / 0`` is NaN, which no comparison but ``!=`` passes), dropping the
  metric name; comparisons as filters keeping it, or with ``bool`` as 0/1 without it;
- ``and``/``or``/``unless``; ``sum``/``min``/``max``/``count`` by or without labels (``min``/``max``
  skip NaN unless every value is NaN); ``time()`` as the ``at`` given.

A range function (``rate``, ``increase``) is taken as the value the test gives the series: the test
states the rates. Anything else raises :class:`NotImplementedError` rather than be guessed.

Each result element also carries the given series it was computed from (their indices), and
:func:`reach` evaluates without values: every threshold crossed where that lets more series through
and none where it lets fewer through (under ``unless``'s right side), the most an alert can fire for
over a page's series.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import promql_parser

Labels = frozenset[tuple[str, str]]
Given = list[tuple[dict[str, str], float]]
Key = tuple[tuple[str, str], ...]
Fired = dict[Key, float]


class Element(NamedTuple):
    """One element of an instant vector: its value and the indices of the given series it was
    computed from."""

    value: float
    inputs: frozenset[int]


Vector = dict[Labels, Element]


class QueryError(Exception):
    """An expression Prometheus refuses to evaluate over these series (a vector-matching cardinality
    error): the rule would fail to evaluate there, never fire."""


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


class _Context(NamedTuple):
    given: Given
    at: float
    crossed: bool | None
    """``None``: comparisons on values; else whether each comparison passes (:func:`reach`)."""


def values(expr: str, given: Given, *, at: float = 0.0) -> dict[Labels, float] | float:
    """The instant vector (or number) ``expr`` gives over ``given``, ``time()`` being ``at``."""
    result = _eval(promql_parser.parse(expr), _Context(given, at, None))
    if isinstance(result, float):
        return result
    return {labels: e.value for labels, e in result.items()}


def fired(expr: str, given: Given, *, at: float = 0.0) -> Fired:
    """The alerts ``expr`` fires over ``given``: each element's labels (without the metric name) as a
    sorted tuple of pairs, and its value."""
    result = _eval(promql_parser.parse(expr), _Context(given, at, None))
    assert not isinstance(result, float), expr
    return {_sorted(labels): e.value for labels, e in result.items()}


def reach(expr: str, series: list[dict[str, str]]) -> dict[Key, frozenset[int]]:
    """The alerts ``expr`` can fire over ``series`` with every counter moved and every threshold
    crossed where that lets more series through (none crossed under ``unless``'s right side): each
    element's labels (as :func:`fired` gives them) and the indices of the ``series`` it was computed
    from."""
    result = _eval(promql_parser.parse(expr), _Context([(s, 1.0) for s in series], 0.0, True))
    assert not isinstance(result, float), expr
    return {_sorted(labels): e.inputs for labels, e in result.items()}


def _sorted(labels: Labels) -> Key:
    return tuple(sorted(_drop(labels, {_NAME})))


def _divide(a: float, b: float) -> float:
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _matches(labels: dict[str, str], name: str, op: str, value: str) -> bool:
    have = labels.get(name, "")
    if op in ("MatchOp.Equal", "MatchOp.NotEqual"):
        return (have == value) == (op == "MatchOp.Equal")
    if op not in ("MatchOp.Re", "MatchOp.NotRe"):
        raise NotImplementedError(op)
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


def _apply(op: str, a: float, b: float, ctx: _Context, return_bool: bool) -> tuple[float, bool]:
    """``a op b`` as Prometheus computes it: the value and whether the element is kept. A comparison
    keeps ``a`` (the left operand), or gives 0/1 with ``bool``."""
    if op in _COMPARE:
        passed = _COMPARE[op](a, b) if ctx.crossed is None else ctx.crossed
        return (float(passed), True) if return_bool else (a, passed)
    if op == "/":
        return _divide(a, b), True
    if op not in _ARITHMETIC:
        raise NotImplementedError(op)
    return _ARITHMETIC[op](a, b), True


def _eval(node: Any, ctx: _Context) -> Vector | float:
    kind = type(node).__name__
    if kind == "NumberLiteral":
        return float(node.val)
    if kind == "ParenExpr":
        return _eval(node.expr, ctx)
    if kind == "MatrixSelector":
        return _eval(node.vector_selector, ctx)
    if kind == "VectorSelector":
        if not node.name:
            raise NotImplementedError("a selector without a metric name")
        matchers = [(m.name, str(m.op), m.value) for m in node.matchers.matchers]
        out: Vector = {}
        for i, (labels, v) in enumerate(ctx.given):
            if labels[_NAME] == node.name and all(_matches(labels, *m) for m in matchers):
                out[frozenset(labels.items())] = Element(v, frozenset({i}))
        return out
    if kind == "Call":
        if node.func.name == "time":
            return ctx.at
        if node.func.name not in ("rate", "increase"):
            raise NotImplementedError(node.func.name)
        inner = _eval(node.args[0], ctx)
        assert not isinstance(inner, float)
        return {_drop(labels, {_NAME}): e for labels, e in inner.items()}
    if kind == "AggregateExpr":
        return _aggregate(node, ctx)
    if kind != "BinaryExpr":
        raise NotImplementedError(kind)
    return _binary(node, ctx)


def _extreme(pick: Callable[[float, float], bool]) -> Callable[[list[float]], float]:
    """``min``/``max`` as Prometheus folds them: a NaN gives way to any number, so NaN only where
    every value is NaN."""

    def fold(vs: list[float]) -> float:
        best = vs[0]
        for v in vs[1:]:
            if pick(v, best) or math.isnan(best):
                best = v
        return best

    return fold


_COMBINE: dict[str, Callable[[list[float]], float]] = {
    "sum": lambda vs: sum(vs, 0.0),
    "min": _extreme(operator.lt),
    "max": _extreme(operator.gt),
    "count": lambda vs: float(len(vs)),
}


def _aggregate(node: Any, ctx: _Context) -> Vector:
    op = str(node.op)
    if op not in _COMBINE:
        raise NotImplementedError(op)
    inner = _eval(node.expr, ctx)
    assert not isinstance(inner, float)
    groups: dict[Labels, list[Element]] = {}
    for labels, e in inner.items():
        if node.modifier is None:
            key: Labels = frozenset()
        elif str(node.modifier.type) == "AggModifierType.By":
            key = frozenset((k, x) for k, x in labels if k in node.modifier.labels)
        else:
            key = _drop(labels, set(node.modifier.labels) | {_NAME})
        groups.setdefault(key, []).append(e)
    return {
        key: Element(_COMBINE[op]([e.value for e in es]), frozenset().union(*(e.inputs for e in es)))
        for key, es in groups.items()
    }


def _binary(node: Any, ctx: _Context) -> Vector | float:
    op = str(node.op)
    modifier = node.modifier
    return_bool = modifier is not None and bool(modifier.return_bool)
    lhs = _eval(node.lhs, ctx)
    rhs_ctx = ctx if op != "unless" or ctx.crossed is None else ctx._replace(crossed=not ctx.crossed)
    rhs = _eval(node.rhs, rhs_ctx)
    if isinstance(lhs, float) and isinstance(rhs, float):
        assert op not in _COMPARE or return_bool, "the parser refuses a scalar comparison without bool"
        return _apply(op, lhs, rhs, ctx, return_bool)[0]
    if isinstance(lhs, float) or isinstance(rhs, float):
        assert op not in _SETS, "the parser refuses a set operator with a scalar"
        out: Vector = {}
        vector = rhs if isinstance(lhs, float) else lhs
        assert not isinstance(vector, float)
        for labels, e in vector.items():
            a, b = (lhs, e.value) if isinstance(lhs, float) else (e.value, rhs)
            assert isinstance(a, float)
            assert isinstance(b, float)
            value, keep = _apply(op, a, b, ctx, return_bool)
            if not keep:
                continue
            if op in _COMPARE and not return_bool:
                out[labels] = e  # a filter keeps the vector's own element, on either side
            else:
                out[_drop(labels, {_NAME})] = Element(value, e.inputs)
        return out
    if op in _SETS:
        return _set(op, lhs, rhs, modifier)
    return _match(op, lhs, rhs, modifier, ctx, return_bool)


def _set(op: str, lhs: Vector, rhs: Vector, modifier: Any) -> Vector:
    """``and``/``or``/``unless``: many-to-many, the left side's elements (``or``: and the right
    side's whose match group the left lacks). An element kept or dropped by the other side counts it
    among its inputs (it was computed from it)."""
    right: dict[Labels, frozenset[int]] = {}
    for labels, e in rhs.items():
        key = _key(labels, modifier)
        right[key] = right.get(key, frozenset()) | e.inputs
    if op == "or":
        left = {_key(labels, modifier) for labels in lhs}
        return {**lhs, **{k: e for k, e in rhs.items() if _key(k, modifier) not in left}}
    out: Vector = {}
    for labels, e in lhs.items():
        key = _key(labels, modifier)
        if (key in right) == (op == "and"):
            out[labels] = Element(e.value, e.inputs | right.get(key, frozenset()))
    return out


def _match(op: str, lhs: Vector, rhs: Vector, modifier: Any, ctx: _Context, return_bool: bool) -> Vector:
    """Vector-to-vector arithmetic or comparison, one-to-one or grouped, with Prometheus's
    cardinality errors."""
    card = str(modifier.card) if modifier is not None else "VectorMatchCardinality.OneToOne"
    one_to_many = card.endswith("OneToMany")
    many, one = (rhs, lhs) if one_to_many else (lhs, rhs)
    ones: dict[Labels, tuple[Labels, Element]] = {}
    for labels, e in one.items():
        key = _key(labels, modifier)
        if key in ones:
            side = "left" if one_to_many else "right"
            raise QueryError(
                f"found duplicate series for the match group {sorted(key)} on the {side} hand-side of the "
                "operation; many-to-many matching not allowed: matching labels must be unique on one side"
            )
        ones[key] = (labels, e)
    matched: dict[Labels, set[Labels]] = {}
    out: Vector = {}
    for labels, e in many.items():
        key = _key(labels, modifier)
        if key not in ones:
            continue
        other_labels, other = ones[key]
        a, b = (other.value, e.value) if one_to_many else (e.value, other.value)
        value, keep = _apply(op, a, b, ctx, return_bool)
        if not keep:
            continue
        result = labels if op in _COMPARE and not return_bool else _drop(labels, {_NAME})
        if card.endswith("OneToOne"):
            if key in matched:
                raise QueryError(
                    "multiple matches for labels: many-to-one matching must be explicit "
                    "(group_left/group_right)"
                )
            matched[key] = set()
            matching = modifier.matching if modifier is not None else None
            if matching is not None and str(matching.type) == "LabelModifierType.Include":
                result = frozenset((k, x) for k, x in result if k in matching.labels)
            elif matching is not None:
                result = _drop(result, set(matching.labels))
        else:
            include = set(modifier.group_labels or ())
            extra = {(k, x) for k, x in other_labels if k in include}
            result = _drop(result, include) | extra
            if result in matched.setdefault(key, set()):
                raise QueryError("multiple matches for labels: grouping labels must ensure unique matches")
            matched[key].add(result)
        if result in out:
            raise QueryError(f"vector cannot contain metrics with the same labelset {sorted(result)}")
        out[result] = Element(value, e.inputs | other.inputs)
    return out
