"""Both CDK deployment files refuse a value that fails a schema pattern in the words of its
``x-igw-hint`` (session s48): the refusals were jsonschema's bare regular expression (``stackPrefix:
'9bad' does not match '^[A-Za-z][A-Za-z0-9-]{0,39}$'``), and the global router's deployment file did not
read hints at all. ``tests/config/test_schema_hints.py`` fails while any pattern ships without one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from cdk import config
from cdk.global_router_config import EXAMPLE_FILE, GlobalRouterDeploymentError, parse
from tests.cdk.support import example_document

HYPERPOD_NAME = (
    "a HyperPod name: 1 to 63 letters, digits and hyphens (-), starting and ending with a letter or digit "
    "(no '_' or '.')"
)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        document[key] = value

    return mutate


def _hyperpod_name(document: dict[str, Any]) -> None:
    document["hyperpod"]["clusterName"] = "gpu_pool"


def _group_name(document: dict[str, Any]) -> None:
    document["hyperpod"]["instanceGroups"][0]["name"] = "gpu.workers"


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (
            _set("stackPrefix", "9bad"),
            "stackPrefix: must be 1 to 40 letters, digits and hyphens (-), starting with a letter; "
            "got '9bad'",
        ),
        (_hyperpod_name, f"hyperpod.clusterName: must be {HYPERPOD_NAME}; got 'gpu_pool'"),
        (_group_name, f"hyperpod.instanceGroups[0].name: must be {HYPERPOD_NAME}; got 'gpu.workers'"),
        (
            _set("account", "12345"),
            "account: must be a 12-digit AWS account id (quote it in YAML); got '12345'",
        ),
    ],
)
def test_a_deployment_config_pattern_is_refused_in_words(
    mutate: Callable[[dict[str, Any]], None], problem: str
) -> None:
    document = example_document()
    mutate(document)
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(document, source="deploy.yaml")
    assert caught.value.problems == [problem]


def test_a_global_router_deployment_pattern_is_refused_in_words() -> None:
    raw = yaml.safe_load(EXAMPLE_FILE.read_text())
    raw["stackName"] = "9bad"
    with pytest.raises(GlobalRouterDeploymentError) as caught:
        parse(raw, base=EXAMPLE_FILE.parent, source="global.yaml")
    assert str(caught.value) == (
        "global.yaml: stackName: must be a CloudFormation stack name: 1 to 128 letters, digits and "
        "hyphens (-), starting with a letter; got '9bad'"
    )
