"""Rule ``gateway-pods-not-model-servers``: a modelSelector the gateway's own pods satisfy is refused.

The operator gives the gateway's pods ``spec.podDefaults.labels`` plus its own keys; a scheduler
whose selector those labels satisfy would discover the gateway's pods as model servers and route
requests to itself. The corpus (``cases.py``) holds the refused shapes; here are the accepted ones
the rule must not refuse (the operator's keys win over podDefaults.labels), and the message's one
source.
"""

from __future__ import annotations

from typing import Any

import pytest

from igw.config.schema import admission_rules
from igw.config.validate import validate_document

from .cases import base_document
from .cel_harness import cel_failures, disagreements

RULE = "gateway-pods-not-model-servers"


def _with(labels: dict[str, str], selector: dict[str, Any]) -> dict[str, Any]:
    doc = base_document()
    doc["spec"]["podDefaults"]["labels"] = labels
    doc["spec"]["schedulers"][1]["modelSelector"] = selector
    return doc


ACCEPTED = {
    "pods-lack-a-selected-label": ({"team": "ml"}, {"matchLabels": {"app": "qwen", "team": "ml"}}),
    "pods-have-another-value": ({"app": "gateway"}, {"matchLabels": {"app": "qwen"}}),
    "operator-key-wins-over-pod-defaults": (
        {"app.kubernetes.io/name": "qwen"},
        {"matchLabels": {"app.kubernetes.io/name": "qwen"}},
    ),
    "selector-excludes-the-gateway": (
        {"app": "qwen"},
        {
            "matchLabels": {"app": "qwen"},
            "matchExpressions": [
                {"key": "app.kubernetes.io/name", "operator": "NotIn", "values": ["inference-gateway"]}
            ],
        },
    ),
    "not-in-lists-the-pods-value": (
        {"app": "gateway"},
        {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["gateway"]}]},
    ),
    "pods-carry-a-forbidden-label": (
        {"app": "qwen", "role": "router"},
        {"matchLabels": {"app": "qwen"}, "matchExpressions": [{"key": "role", "operator": "DoesNotExist"}]},
    ),
}


@pytest.mark.parametrize(("labels", "selector"), ACCEPTED.values(), ids=list(ACCEPTED))
def test_selectors_the_gateway_pods_miss_are_accepted(
    labels: dict[str, str], selector: dict[str, Any]
) -> None:
    doc = _with(labels, selector)
    assert validate_document(doc) == []
    assert cel_failures(doc) == set()


def test_the_refusal_names_the_selector_and_quotes_the_rule_message() -> None:
    doc = _with({"app": "qwen", "team": "ml"}, {"matchLabels": {"app": "qwen"}})
    (problem,) = validate_document(doc)
    (rule,) = [r for r in admission_rules() if r.id == RULE]
    assert problem.path == "spec.schedulers[1].modelSelector"
    assert problem.rule == RULE
    assert problem.message.startswith(rule.message)
    assert '{"app": "qwen", "team": "ml"}' in problem.message
    assert cel_failures(doc) == {(RULE, "spec")}
    assert disagreements(doc) == []


def test_an_empty_selector_is_left_to_its_own_rule() -> None:
    doc = _with({"app": "qwen"}, {})
    assert {p.rule for p in validate_document(doc)} == {"model-selector-not-empty"}
    assert {rule for rule, _ in cel_failures(doc)} == {"model-selector-not-empty"}
