"""``spec.podDefaults.resources``: a limit below its request is refused at admission, naming the limit
(the API server refused the operator's Deployment for it after the spec had been accepted)."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from igw.config.resource_quantities import RULE, parse_quantity
from igw.config.validate import validate_document

BASE: dict[str, Any] = {
    "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
    "kind": "InferenceGatewayConfig",
    "metadata": {"name": "x", "namespace": "inference"},
    "spec": {
        "bbr": {"enabled": False},
        "schedulers": [{"name": "a", "modelName": "m", "modelSelector": {"matchLabels": {"app": "m"}}}],
    },
}


def _with_resources(requests: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["spec"]["podDefaults"] = {"resources": {"requests": requests, "limits": limits}}
    return doc


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("1", Decimal(1)),
        (2, Decimal(2)),
        ("2Gi", Decimal(2 * 1024**3)),
        ("1.5G", Decimal("1.5e9")),
        ("1e3", Decimal(1000)),
        (".5", Decimal("0.5")),
        ("100n", Decimal("1e-7")),
    ],
)
def test_kubernetes_quantities_parse_in_their_base_unit(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1 Gi", "Gi", "1GB", "", True, None, 1.5])
def test_what_is_not_a_quantity_parses_to_none(text: Any) -> None:
    assert parse_quantity(text) is None


@pytest.mark.parametrize(
    ("requests", "limits", "path"),
    [
        ({"cpu": "1"}, {"cpu": "500m"}, "spec.podDefaults.resources.limits.cpu"),
        ({"memory": "1Gi"}, {"memory": "1000Mi"}, "spec.podDefaults.resources.limits.memory"),
        ({"memory": "1.1G"}, {"memory": "1Gi"}, "spec.podDefaults.resources.limits.memory"),
    ],
)
def test_a_limit_below_its_request_is_refused_naming_the_limit(
    requests: dict[str, Any], limits: dict[str, Any], path: str
) -> None:
    (problem,) = [p for p in validate_document(_with_resources(requests, limits)) if p.rule == RULE]
    assert problem.path == path
    assert "must be at least spec.podDefaults.resources.requests." in problem.message


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "1", "memory": "1G"}, {"cpu": "1000m", "memory": "1Gi"}),
        ({"cpu": "1"}, {"memory": "1Gi"}),  # no request for the limit: nothing to compare
        ({"cpu": 2}, {"cpu": "2"}),
    ],
)
def test_limits_at_or_above_requests_in_any_unit_are_accepted(
    requests: dict[str, Any], limits: dict[str, Any]
) -> None:
    assert validate_document(_with_resources(requests, limits)) == []
