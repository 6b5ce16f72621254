"""An imported VPC (``network.vpcId``) or an existing cluster's subnets synthesize whatever the number
of subnets and of ``availabilityZones``: CDK's ``Vpc.from_vpc_attributes`` wants a subnet count that is
a multiple of the zone count, and before session s39 two subnets beside the three zones every example
lists (or beside none) ended ``cdk synth`` in a jsii traceback (``Number of privateSubnetIds (2) must
be a multiple of availability zones (3)``). The zones are only labels there: every subnet ID given is
imported and used."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from cdk import config
from cdk.constructs.network import Network, import_zones
from tests.cdk.support import EXAMPLES, existing_cluster_stack, existing_document

SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]


def _imported_vpc_document(zones: list[str] | None, subnets: list[str]) -> dict[str, Any]:
    """The imported-VPC example (``aws-managed-addon.yaml``) with these zones and private subnets."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / "aws-managed-addon.yaml").read_text())
    document["network"]["privateSubnetIds"] = subnets
    if zones is None:
        document.pop("availabilityZones", None)
    else:
        document["availabilityZones"] = zones
    return document


@pytest.mark.parametrize(
    ("zones", "subnets"),
    [
        (["us-west-2a", "us-west-2b", "us-west-2c"], SUBNETS),
        (None, SUBNETS),
        (
            ["us-west-2a", "us-west-2b", "us-west-2c"],
            [*SUBNETS, "subnet-0123456789abcdef2", "subnet-0123456789abcdef3"],
        ),
        (["us-west-2a", "us-west-2b"], [*SUBNETS, "subnet-0123456789abcdef2"]),
    ],
)
def test_an_imported_vpc_takes_every_subnet_whatever_the_zones(
    zones: list[str] | None, subnets: list[str]
) -> None:
    deployment = config.parse(_imported_vpc_document(zones, subnets))
    stack = cdk.Stack(
        cdk.App(), "Net", env=cdk.Environment(account=deployment.account, region=deployment.region)
    )
    network = Network(
        stack,
        "Network",
        config=deployment.network,
        availability_zones=deployment.availability_zones,
        cluster_name=deployment.cluster_name,
    )
    cdk.CfnWaitConditionHandle(stack, "Anchor")  # an import alone is an empty (invalid) template
    cdk.CfnOutput(stack, "Subnets", value=cdk.Fn.join(",", [s.subnet_id for s in network.private_subnets]))
    template = cdk.assertions.Template.from_stack(stack).to_json()
    assert template["Outputs"]["Subnets"]["Value"] == ",".join(subnets)


def test_an_existing_clusters_subnets_are_all_imported() -> None:
    document = existing_document()
    subnets = [*SUBNETS, "subnet-0123456789abcdef2", "subnet-0123456789abcdef3"]
    document["existingCluster"]["privateSubnetIds"] = subnets  # four, beside three zones
    stack = existing_cluster_stack(document)
    assert [s.subnet_id for s in stack.vpc.private_subnets] == subnets


@pytest.mark.parametrize(
    ("zones", "count", "expected"),
    [
        (["z1", "z2", "z3"], 3, ["z1", "z2", "z3"]),
        (["z1", "z2", "z3"], 2, ["z1", "z2"]),
        (["z1", "z2", "z3"], 4, ["z1", "z2"]),
        (["z1", "z2", "z3"], 5, ["z1"]),
        (["z1", "z2"], 6, ["z1", "z2"]),
        ([], 2, ["us-east-1a", "us-east-1b"]),
    ],
)
def test_import_zones_divide_the_subnet_count(zones: list[str], count: int, expected: list[str]) -> None:
    assert import_zones(zones, region="us-east-1", subnet_count=count) == expected
