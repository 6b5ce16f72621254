"""The API server's static CEL cost estimate: hand-derived costs, cardinality, shipped CRDs in budget.

Each expected cost below is derived by hand from the upstream model (cel-go's checker cost
estimator with the API server's size estimates): identifiers and selections 1, constants 0,
``has()`` 1 + operand, equality ``ceil(0.1 × smaller size)`` + operands, a list literal 10 +
elements, a macro its range + size × (loop condition + step) + result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.config.cel_cost import (
    MAX_REQUEST_BYTES,
    PER_CRD_LIMIT,
    PER_RULE_LIMIT,
    CelCostError,
    crd_cost_reports,
    require_within_budget,
    rule_cost,
)
from igw.config.crd import crd_document

REPO = Path(__file__).resolve().parents[2]

NAMED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "free": {"type": "string"},
        "count": {"type": "integer"},
        "kind": {"type": "string", "enum": ["In", "NotIn", "Exists"]},
        "timeout": {"type": "string", "format": "duration"},
    },
}


def _list_of(item: dict[str, Any], max_items: int | None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": item}
    if max_items is not None:
        schema["maxItems"] = max_items
    return schema


@pytest.mark.parametrize(
    ("rule", "schema", "expected"),
    [
        # self.name: ident 1 + select 1; 'ab' 0; == ceil(0.1 × min(20, 2)) = 1.
        ("self.name == 'ab'", NAMED, 3),
        # has(): 1 + the operand (self, 1).
        ("has(self.name)", NAMED, 2),
        # The string without maxLength is as long as a request: ceil(0.1 × (3 MiB - 2)) + 2 + 2.
        ("self.free == self.free", NAMED, -(-(MAX_REQUEST_BYTES - 2) // 10) + 4),
        # An enum bounds the string by its longest value (6): ceil(0.6) = 1, + 2 + 2.
        ("self.kind == self.kind", NAMED, 5),
        # in over a list literal: select 2 + (10 + 0 + 0) + the list's size 2.
        ("self.kind in ['In', 'NotIn']", NAMED, 14),
        # && and || cost both sides: (2) + (1 + 2 [size] ... ) - size(self.name) is 1 + 2, > 0 is 1 + 3.
        ("has(self.name) && size(self.name) > 0", NAMED, 2 + 4),
        # ?: costs the condition plus the dearer branch: 2 + max(3, 0).
        ("has(self.name) ? self.name == 'x' : true", NAMED, 2 + 3),
        # duration() and ordering of durations are O(1): (1 + 2) + 1 + (1 + 0).
        ("duration(self.timeout) > duration('0s')", NAMED, 5),
        # Arithmetic is O(1): * 1 + 2 + 0, + 1 + 3 + 0, > 1 + 4 + 0.
        ("self.count * 2 + 1 > 0", NAMED, 5),
        # String concatenation traverses both: size 22 -> ceil(2.2) + 2 + 0; == ceil(0.1 × 1) + 5 + 0.
        ("self.name + 'ab' == 'x'", NAMED, 6),
        # all over 10 ints: range 1 + result 1 + 10 × (cond 2 + step 1 + (i > 0: 1 + 1)).
        ("self.all(i, i > 0)", _list_of({"type": "integer"}, 10), 52),
        # exists over 10 ints: range 1 + result 1 + 10 × (cond 3 + step 1 + 2).
        ("self.exists(i, i > 0)", _list_of({"type": "integer"}, 10), 62),
        # exists_one: range 1 + result 2 + 10 × (predicate 2 + 2).
        ("self.exists_one(i, i > 0)", _list_of({"type": "integer"}, 10), 43),
        # The pairwise uniqueness rule over 1,000 names of up to 20 characters: p.name == o.name
        # costs ceil(0.1 × 20) + 2 + 2 = 6, the predicate has() 2 + 6, so the inner exists_one
        # 1 + 2 + 1000 × (8 + 2) = 10,003 and the outer all 1 + 1 + 1000 × (2 + 1 + (2 + 10,003)).
        (
            "self.all(o, has(o.name) ? self.exists_one(p, has(p.name) && p.name == o.name) : true)",
            _list_of(NAMED, 1000),
            10_008_002,
        ),
    ],
)
def test_rule_costs_follow_the_upstream_model(rule: str, schema: dict[str, Any], expected: int) -> None:
    assert rule_cost(rule, schema) == expected


def test_unbounded_list_counts_as_many_items_as_fit_in_a_request() -> None:
    # An int list with no maxItems: (3 MiB - 2) // (1 + 1) items, each costing cond 2 + step 1 + 2.
    items = (MAX_REQUEST_BYTES - 2) // 2
    assert rule_cost("self.all(i, i > 0)", _list_of({"type": "integer"}, None)) == 2 + items * 5


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("self.name.matches('^a')", "method 'matches'"),
        ("self.missing == 1", "no field 'missing'"),
        ("other.name == 'a'", "unknown identifier 'other'"),
        ("self == self", "equality of whole objects"),
        ("customFunction(self.name)", "function 'customFunction'"),
    ],
)
def test_what_is_not_modelled_is_refused_not_guessed(rule: str, fragment: str) -> None:
    with pytest.raises(CelCostError, match=fragment):
        rule_cost(rule, NAMED)


def _crd_with(schema: dict[str, Any]) -> dict[str, Any]:
    return crd_document(
        kind="CostProbe",
        plural="costprobes",
        short_names=(),
        printer_columns=(),
        schema={"type": "object", "properties": {"spec": schema}},
    )


PAIRWISE = "self.all(o, has(o.name) ? self.exists_one(p, has(p.name) && p.name == o.name) : true)"


def test_cardinality_multiplies_the_bounds_of_the_lists_above() -> None:
    inner = {**NAMED, "x-kubernetes-validations": [{"rule": "has(self.name)", "message": "m"}]}
    outer = {"type": "object", "properties": {"entries": _list_of(inner, 50)}}
    schema = {"type": "object", "properties": {"groups": _list_of(outer, 4)}}
    (report,) = crd_cost_reports(_crd_with(schema))
    (rule,) = report.rules
    assert (rule.path, rule.cost, rule.cardinality, rule.total) == ("spec.groups[].entries[]", 2, 200, 400)


def test_below_an_unbounded_list_the_node_repeats_as_often_as_it_fits_in_a_request() -> None:
    required = {**NAMED, "required": ["name"]}  # smallest item: {"name":""} = 2 + (4 + 2 + 4) bytes
    inner = {**required, "x-kubernetes-validations": [{"rule": "has(self.name)", "message": "m"}]}
    (report,) = crd_cost_reports(_crd_with(_list_of(inner, None)))
    (rule,) = report.rules
    assert rule.cardinality == MAX_REQUEST_BYTES // (12 + 1)


def test_a_crd_the_api_server_would_refuse_is_not_built() -> None:
    schema = {**_list_of(NAMED, 1000), "x-kubernetes-validations": [{"rule": PAIRWISE, "message": "m"}]}
    with pytest.raises(
        CelCostError, match=r"rule at spec .* per-rule budget of 10,000,000 by a factor of 1\.0"
    ):
        _crd_with(schema)
    bounded = {**_list_of(NAMED, 900), "x-kubernetes-validations": [{"rule": PAIRWISE, "message": "m"}]}
    (report,) = crd_cost_reports(_crd_with(bounded))
    assert report.rules[0].total <= PER_RULE_LIMIT


def test_the_per_crd_budget_sums_every_rule() -> None:
    cheap = {"rule": "has(self.name)", "message": "m"}
    node = {**NAMED, "x-kubernetes-validations": [cheap]}
    nested = _list_of(_list_of(_list_of(node, 1000), 1000), 100)
    with pytest.raises(CelCostError, match="per-CRD budget"):
        _crd_with({"type": "object", "properties": {"a": nested, "b": nested}})


SHIPPED_CRDS = sorted((REPO / "crds").glob("*.yaml"))
"""The chart's CRD templates are generated from the same documents (``igw generate --check``)."""


@pytest.mark.parametrize("path", SHIPPED_CRDS, ids=lambda p: p.name)
def test_every_shipped_crd_fits_the_api_servers_cost_budgets(path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    require_within_budget(document)
    for report in crd_cost_reports(document):
        assert report.total <= PER_CRD_LIMIT
        assert all(rule.total <= PER_RULE_LIMIT for rule in report.rules)


def test_the_shipped_crds_carry_the_pairwise_rules_this_guards() -> None:
    """The budget test above is meaningful only while the quadratic rules are in the CRDs."""
    path = REPO / "crds" / "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    (report,) = crd_cost_reports(document)
    paths = {rule.path for rule in report.rules if "exists_one" in rule.rule}
    assert {"spec.extensions.flowControl.objectives", "spec.extensions.modelRewrites.rules"} <= paths
