"""The Kubernetes API server's static cost estimate of a CRD's CEL rules, checked at generation.

When a CustomResourceDefinition is created or updated, the API server type-checks every
``x-kubernetes-validations`` rule and estimates its worst-case cost from the schema's bounds
(``maxItems``, ``maxLength``, ``maxProperties``; a missing bound is taken as "as many as fit in a
3 MiB request"). It multiplies that by the rule's cardinality (how many times it can run: the
product of the ``maxItems``/``maxProperties`` of the lists and maps above it) and refuses the CRD
when one rule exceeds 10,000,000 or all rules together exceed 100,000,000 ("estimated rule cost
exceeds budget by factor of ..."). A pairwise uniqueness rule over a list of a thousand entries
passes every unit test and still makes the add-on uninstallable, which is why the estimate is
checked where the CRDs are generated.

Written by hand because no Python library implements this estimator (cel-python evaluates CEL but
has no cost model). It follows the upstream model (cel-go's ``checker/cost.go`` and the API
server's size estimates) for the subset of CEL our rules use, and refuses what it does not model
(:class:`CelCostError`) rather than guessing low:

* identifiers and field selections cost 1, constants 0, ``has()`` 1 plus its operand;
* ``&&``/``||`` cost both operands, ``?:`` the condition plus the dearer branch;
* ``==``/``!=`` and string ordering cost ``ceil(0.1 × the smaller operand's size)`` plus the
  operands (scalars have size 1); ``in`` over a list costs the list's size; other functions
  (``size``, ``!``, ``duration``, arithmetic, ``<`` on numbers) cost 1 plus their arguments;
* a list literal costs 10 plus its elements;
* the macros ``all``/``exists``/``exists_one``/``map``/``filter`` cost their range, plus the
  range's size times (loop condition + step), as cel-go expands them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import lark
from celpy.celparser import CELParseError, CELParser

from igw.config.schema import SchemaError

PER_RULE_LIMIT: Final = 10_000_000
"""The API server's ``StaticEstimatedCostLimit``: the most one rule may cost, times its cardinality."""
PER_CRD_LIMIT: Final = 100_000_000
"""The API server's ``StaticEstimatedCRDCostLimit``: the most all rules of one CRD may cost together."""
MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
"""The request size the API server assumes when a list, map or string has no bound."""

_STRING_TRAVERSAL_FACTOR: Final = 0.1
_LIST_CREATE_COST: Final = 10
_MAP_CREATE_COST: Final = 30
_FORMAT_STRING_SIZES: Final = {"duration": 32, "date": 10, "date-time": 32}
"""Largest JSON strings of the formats the API server bounds without a maxLength."""
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
_O1_FUNCTIONS: Final = frozenset(
    {"size", "duration", "timestamp", "int", "uint", "double", "string", "bool", "dyn", "type"}
)


class CelCostError(SchemaError):
    """A rule uses CEL this estimator does not model, or its schema scope cannot be typed."""


@dataclass(frozen=True, slots=True)
class _Value:
    """What the estimator knows about one sub-expression: its kind, largest size and schema."""

    kind: str
    """``object``, ``list``, ``map``, ``string``, ``scalar`` or ``dyn``."""
    size: int
    """Largest ``size()`` (characters, items or entries); 1 for scalars."""
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RuleCost:
    """One rule's estimate as the API server computes it."""

    path: str
    """Where the rule sits, e.g. ``spec.extensions.flowControl.objectives``."""
    rule: str
    cost: int
    """The expression's own worst-case cost."""
    cardinality: int
    """How many times the rule can run in one object."""

    @property
    def total(self) -> int:
        return self.cost * self.cardinality


@dataclass(frozen=True, slots=True)
class CrdCostReport:
    name: str
    rules: tuple[RuleCost, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return sum(rule.total for rule in self.rules)

    def problems(self) -> list[str]:
        """What the API server would refuse, in its own terms (empty when the CRD fits)."""
        found = [
            f"{self.name}: the rule at {rule.path} ({rule.rule!r}) has an estimated cost of {rule.total:,}"
            f" ({rule.cost:,} × cardinality {rule.cardinality:,}), over the API server's per-rule budget of"
            f" {PER_RULE_LIMIT:,} by a factor of {rule.total / PER_RULE_LIMIT:.1f}: bound the lists and"
            " strings it iterates (maxItems, maxLength) or simplify it"
            for rule in self.rules
            if rule.total > PER_RULE_LIMIT
        ]
        if self.total > PER_CRD_LIMIT:
            found.append(
                f"{self.name}: all rules together have an estimated cost of {self.total:,}, over the API"
                f" server's per-CRD budget of {PER_CRD_LIMIT:,}"
            )
        return found


def _schema_type(schema: Mapping[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "string"
    declared = schema.get("type")
    if declared is None and schema.get("x-kubernetes-preserve-unknown-fields"):
        return "dyn"
    return str(declared) if declared is not None else "dyn"


def _min_json_size(schema: Mapping[str, Any]) -> int:
    """The smallest serialised size of a value of ``schema`` (the API server's ``estimateMinSizeJSON``)."""
    kind = _schema_type(schema)
    if kind == "string":
        return 2 + int(schema.get("minLength", 0))
    if kind == "boolean":
        return 4
    if kind in {"integer", "number"}:
        return 1
    if kind == "array":
        return 2
    if kind == "object":
        required = set(schema.get("required", []))
        size = 2
        for name, sub in schema.get("properties", {}).items():
            if isinstance(sub, Mapping) and (name in required or "default" in sub):
                size += len(name) + _min_json_size(sub) + 4
        return size
    return 1


def _max_items(schema: Mapping[str, Any]) -> int:
    if "maxItems" in schema:
        return int(schema["maxItems"])
    items = schema.get("items")
    return (MAX_REQUEST_BYTES - 2) // (_min_json_size(items if isinstance(items, Mapping) else {}) + 1)


def _max_properties(schema: Mapping[str, Any]) -> int:
    if "maxProperties" in schema:
        return int(schema["maxProperties"])
    values = schema.get("additionalProperties")
    value_size = _min_json_size(values) if isinstance(values, Mapping) else 1
    return (MAX_REQUEST_BYTES - 2) // (value_size + 6)


def _max_length(schema: Mapping[str, Any]) -> int:
    if "maxLength" in schema:
        return int(schema["maxLength"])
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return max(len(str(value)) for value in enum)
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMAT_STRING_SIZES:
        return _FORMAT_STRING_SIZES[fmt]
    return MAX_REQUEST_BYTES - 2


def value_of(schema: Mapping[str, Any]) -> _Value:
    """The estimator's view of a value described by ``schema``."""
    kind = _schema_type(schema)
    if kind == "array":
        return _Value("list", _max_items(schema), schema)
    if kind == "object":
        if isinstance(schema.get("additionalProperties"), Mapping) and not schema.get("properties"):
            return _Value("map", _max_properties(schema), schema)
        return _Value("object", 1, schema)
    if kind == "string":
        return _Value("string", _max_length(schema), schema)
    if kind in {"integer", "number", "boolean"}:
        return _Value("scalar", 1, schema)
    return _Value("dyn", MAX_REQUEST_BYTES, schema)


_DYN: Final = _Value("dyn", MAX_REQUEST_BYTES)
_SCALAR: Final = _Value("scalar", 1)


def _quoted_length(text: str) -> int:
    """An upper bound of a string literal's size: its source length without prefix and quotes."""
    body = text.lstrip("rRbB")
    quote = 3 if body[:3] in {'"""', "'''"} else 1
    return max(0, len(body) - 2 * quote)


def _children(tree: lark.Tree[Any]) -> list[Any]:
    return [child for child in tree.children if child is not None]


class _Estimator:
    """One rule's walk over cel-python's parse tree, with the iteration variables in scope."""

    def __init__(self, rule: str, self_value: _Value) -> None:
        self.rule = rule
        self.scope: dict[str, list[_Value]] = {"self": [self_value]}

    def fail(self, what: str) -> CelCostError:
        return CelCostError(f"cannot estimate the cost of CEL rule {self.rule!r}: {what}")

    # -- expressions --------------------------------------------------------------------------

    def estimate(self, tree: Any) -> tuple[int, _Value]:
        """``(worst-case cost, value)`` of one parse-tree node."""
        if not isinstance(tree, lark.Tree):
            raise self.fail(f"unexpected token {tree!r}")
        handler = getattr(self, f"_{tree.data}", None)
        if handler is None:
            raise self.fail(f"the construct {tree.data!r} is not modelled")
        result: tuple[int, _Value] = handler(tree)
        return result

    def _single(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        (only,) = _children(tree)
        return self.estimate(only)

    _paren_expr = _single

    def _expr(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        parts = _children(tree)
        if len(parts) == 1:
            return self.estimate(parts[0])
        condition, when_true, when_false = (self.estimate(part) for part in parts)
        size = max(when_true[1].size, when_false[1].size)
        kind = when_true[1].kind if when_true[1].kind == when_false[1].kind else "dyn"
        schema = when_true[1].schema or when_false[1].schema
        return condition[0] + max(when_true[0], when_false[0]), _Value(kind, size, schema)

    def _logical(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        parts = _children(tree)
        if len(parts) == 1:
            return self.estimate(parts[0])
        left, right = parts
        return self.estimate(left)[0] + self.estimate(right)[0], _SCALAR

    _conditionalor = _logical
    _conditionaland = _logical

    def _binary(
        self, tree: lark.Tree[Any]
    ) -> tuple[str, tuple[int, _Value], tuple[int, _Value]] | tuple[int, _Value]:
        """``(operator, left, right)`` of a binary-operator node, or the estimate of a lone operand."""
        parts = _children(tree)
        if len(parts) == 1:
            return self.estimate(parts[0])
        operator, right_tree = parts
        (left_tree,) = _children(operator)
        return str(operator.data), self.estimate(left_tree), self.estimate(right_tree)

    def _relation(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        found = self._binary(tree)
        if len(found) == 2:
            return found
        op, (left_cost, left), (right_cost, right) = found
        arguments = left_cost + right_cost
        if op == "relation_in":
            return (1 if right.kind == "map" else right.size) + arguments, _SCALAR
        if "object" in {left.kind, right.kind} and op in {"relation_eq", "relation_ne"}:
            raise self.fail("equality of whole objects is not modelled")
        if op in {"relation_eq", "relation_ne"} or "string" in {left.kind, right.kind}:
            smallest = min(left.size, right.size)
            return math.ceil(smallest * _STRING_TRAVERSAL_FACTOR) + arguments, _SCALAR
        return 1 + arguments, _SCALAR

    def _addition(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        found = self._binary(tree)
        if len(found) == 2:
            return found
        op, (left_cost, left), (right_cost, right) = found
        arguments = left_cost + right_cost
        if op == "addition_add" and left.kind == "string" and right.kind == "string":
            size = left.size + right.size
            return math.ceil(size * _STRING_TRAVERSAL_FACTOR) + arguments, _Value("string", size)
        if op == "addition_add" and left.kind == "list":
            return 1 + arguments, _Value("list", left.size + right.size, left.schema)
        return 1 + arguments, _SCALAR

    def _multiplication(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        found = self._binary(tree)
        if len(found) == 2:
            return found
        _op, (left_cost, _left), (right_cost, _right) = found
        return 1 + left_cost + right_cost, _SCALAR

    def _unary(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        parts = _children(tree)
        if len(parts) == 1:
            return self.estimate(parts[0])
        _operator, operand = parts
        return 1 + self.estimate(operand)[0], _SCALAR

    def _member(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        return self._single(tree)

    def _primary(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        return self._single(tree)

    def _literal(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        (token,) = _children(tree)
        if token.type in {"STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"}:
            return 0, _Value("string", _quoted_length(str(token)))
        return 0, _SCALAR

    def _ident(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        (token,) = _children(tree)
        bound = self.scope.get(str(token))
        if not bound:
            raise self.fail(f"unknown identifier {str(token)!r}")
        return 1, bound[-1]

    def _list_lit(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        parts = _children(tree)
        elements = _children(parts[0]) if parts else []
        cost = _LIST_CREATE_COST + sum(self.estimate(element)[0] for element in elements)
        return cost, _Value("list", len(elements))

    def _member_dot(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        operand_tree, name = _children(tree)
        cost, operand = self.estimate(operand_tree)
        return cost + 1, self._field(operand, str(name))

    def _member_index(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        operand_tree, index_tree = _children(tree)
        cost, operand = self.estimate(operand_tree)
        index_cost, _ = self.estimate(index_tree)
        return cost + index_cost + 1, self._element(operand)

    def _field(self, operand: _Value, name: str) -> _Value:
        if operand.kind == "object" and operand.schema is not None:
            properties = operand.schema.get("properties", {})
            if name in properties:
                return value_of(properties[name])
            raise self.fail(f"the schema has no field {name!r}")
        if operand.kind == "map":
            return self._element(operand)
        return _DYN

    def _element(self, container: _Value) -> _Value:
        schema = container.schema or {}
        if container.kind == "list" and isinstance(schema.get("items"), Mapping):
            return value_of(schema["items"])
        if container.kind == "map" and isinstance(schema.get("additionalProperties"), Mapping):
            return value_of(schema["additionalProperties"])
        return _DYN

    def _ident_arg(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        parts = _children(tree)
        name = str(parts[0])
        arguments = _children(parts[1]) if len(parts) > 1 else []
        if name == "has":
            (selection,) = arguments
            target = self._descend_to(selection, "member_dot", "has() needs a field selection")
            operand_tree, _field = _children(target)
            return 1 + self.estimate(operand_tree)[0], _SCALAR
        if name not in _O1_FUNCTIONS:
            raise self.fail(f"the function {name!r} is not modelled")
        return 1 + sum(self.estimate(argument)[0] for argument in arguments), _SCALAR

    def _descend_to(self, tree: Any, node_kind: str, what: str) -> lark.Tree[Any]:
        """The first ``node_kind`` node down a chain of single-child wrappers, or fail with ``what``."""
        node: Any = tree
        while isinstance(node, lark.Tree) and node.data != node_kind:
            parts = _children(node)
            if len(parts) != 1:
                raise self.fail(what)
            node = parts[0]
        if not isinstance(node, lark.Tree):
            raise self.fail(what)
        return node

    def _member_dot_arg(self, tree: lark.Tree[Any]) -> tuple[int, _Value]:
        parts = _children(tree)
        target_tree, name = parts[0], str(parts[1])
        arguments = _children(parts[2]) if len(parts) > 2 else []
        if name in _MACROS:
            return self._macro(name, target_tree, arguments)
        target_cost, target = self.estimate(target_tree)
        argument_costs = [self.estimate(argument) for argument in arguments]
        arguments_cost = target_cost + sum(cost for cost, _ in argument_costs)
        if name in {"startsWith", "endsWith"} and argument_costs:
            return math.ceil(argument_costs[0][1].size * _STRING_TRAVERSAL_FACTOR) + arguments_cost, _SCALAR
        if name == "contains" and argument_costs:
            substring = argument_costs[0][1].size
            product = math.ceil(target.size * _STRING_TRAVERSAL_FACTOR) * math.ceil(
                substring * _STRING_TRAVERSAL_FACTOR
            )
            return product + arguments_cost, _SCALAR
        if name == "size":
            return 1 + arguments_cost, _SCALAR
        raise self.fail(f"the method {name!r} is not modelled")

    def _macro(self, name: str, target_tree: Any, arguments: list[Any]) -> tuple[int, _Value]:
        if len(arguments) != 2:
            raise self.fail(f"{name}() with {len(arguments)} arguments is not modelled")
        range_cost, container = self.estimate(target_tree)
        if container.kind not in {"list", "map"}:
            raise self.fail(f"{name}() over a {container.kind} is not modelled")
        name_node = self._descend_to(
            arguments[0], "ident", "a macro's first argument must be a variable name"
        )
        variable = str(_children(name_node)[0])
        element = self._element(container) if container.kind == "list" else _Value("string", _DYN.size)
        self.scope.setdefault(variable, []).append(element)
        try:
            predicate_cost, predicate = self.estimate(arguments[1])
        finally:
            self.scope[variable].pop()
        # Loop condition + step per element, as cel-go's macro expansion writes them.
        if name == "all":
            per_element, result = 2 + 1 + predicate_cost, 1  # @not_strictly_false(acc); acc && p
        elif name == "exists":
            per_element, result = 3 + 1 + predicate_cost, 1  # @not_strictly_false(!acc); acc || p
        elif name == "exists_one":
            per_element, result = predicate_cost + 2, 2  # p ? acc + 1 : acc; acc == 1
        elif name == "map":
            per_element, result = (
                predicate_cost + 2 + _LIST_CREATE_COST,
                1 + _LIST_CREATE_COST,
            )  # acc + [f(x)]
        else:  # filter: p ? acc + [x] : acc
            per_element, result = predicate_cost + 3 + _LIST_CREATE_COST, 1 + _LIST_CREATE_COST
        cost = range_cost + result + container.size * per_element
        if name in {"map", "filter"}:
            produced = predicate if name == "map" else element
            return cost, _Value("list", container.size, {"items": dict(produced.schema or {})})
        return cost, _SCALAR


_PARSER: CELParser | None = None


def rule_cost(rule: str, scope_schema: Mapping[str, Any]) -> int:
    """The worst-case cost of ``rule`` evaluated with ``self`` described by ``scope_schema``."""
    global _PARSER
    if _PARSER is None:
        _PARSER = CELParser()
    try:
        tree = _PARSER.parse(rule)
    except CELParseError as exc:
        raise CelCostError(f"CEL rule {rule!r} does not parse: {exc}") from exc
    cost, _ = _Estimator(rule, value_of(scope_schema)).estimate(tree)
    return cost


def _rules_under(
    schema: Mapping[str, Any], path: str, cardinality: int | None
) -> Iterator[tuple[str, Mapping[str, Any], int, str]]:
    """Every rule below ``schema`` with its cardinality.

    ``cardinality`` is the product of the bounds of the lists and maps above, or ``None`` once one
    of them is unbounded; then, as the API server does, the rule's node is assumed to repeat as
    often as its smallest serialisation fits in one request.
    """
    for entry in schema.get("x-kubernetes-validations", []):
        times = cardinality if cardinality is not None else MAX_REQUEST_BYTES // (_min_json_size(schema) + 1)
        yield path, schema, times, str(entry["rule"])
    for name, sub in schema.get("properties", {}).items():
        if isinstance(sub, Mapping):
            yield from _rules_under(sub, f"{path}.{name}" if path else name, cardinality)
    items = schema.get("items")
    if isinstance(items, Mapping):
        bound = schema.get("maxItems")
        below = cardinality * int(bound) if cardinality is not None and bound is not None else None
        yield from _rules_under(items, f"{path}[]", below)
    values = schema.get("additionalProperties")
    if isinstance(values, Mapping):
        bound = schema.get("maxProperties")
        below = cardinality * int(bound) if cardinality is not None and bound is not None else None
        yield from _rules_under(values, f"{path}{{}}", below)


def crd_cost_reports(crd: Mapping[str, Any]) -> list[CrdCostReport]:
    """One report per served version of ``crd`` (a CustomResourceDefinition document)."""
    name = str(crd.get("metadata", {}).get("name", "?"))
    reports = []
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        rules = tuple(
            RuleCost(path=path or "<root>", rule=rule, cost=rule_cost(rule, node), cardinality=cardinality)
            for path, node, cardinality, rule in _rules_under(schema, "", 1)
        )
        reports.append(CrdCostReport(name=f"{name} {version['name']}", rules=rules))
    return reports


def require_within_budget(crd: Mapping[str, Any]) -> None:
    """Raise :class:`CelCostError` naming every rule the API server's cost check would refuse."""
    problems = [problem for report in crd_cost_reports(crd) for problem in report.problems()]
    if problems:
        raise CelCostError("; ".join(problems))
