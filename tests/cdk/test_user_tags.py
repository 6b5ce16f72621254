"""The deployment config's ``tags`` reach every resource, CDK's own ``Name`` tags included (session s42).

Before the fix a user's ``Name`` landed on the EKS cluster, the roles and the buckets but lost, without a
word, wherever CDK names a resource itself: the new VPC, its subnets, route tables, NAT gateway, Elastic
IP, internet gateway, S3 endpoint and flow log (``IgwNetwork/Network/Vpc/privateSubnet1``, ...) and the
endpoint's ACM certificate (``IgwInference/Certificate/Certificate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cdk.support import example_document, synthesize


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in resource.get("Properties", {}).get("Tags", [])}


def test_a_user_name_tag_wins_over_cdks_own(tmp_path: Path) -> None:
    document = example_document()
    document["tags"] = {"project": "igw", "Name": "igw-prod"}
    templates = synthesize(document, tmp_path / "cdk.out").templates

    named = {
        (role, logical_id, resource["Type"]): _tags(resource).get("Name")
        for role, template in templates.items()
        for logical_id, resource in template["Resources"].items()
        if isinstance(resource.get("Properties", {}).get("Tags"), list)
    }
    assert {where: name for where, name in named.items() if name != "igw-prod"} == {}
    types = {resource_type for _, _, resource_type in named}
    assert {"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::NatGateway"} <= types
    assert "AWS::CertificateManager::Certificate" in types
    # The stacks' own subnet tags still hold: the Load Balancer Controller finds the subnets by them.
    network = templates["network"]["Resources"].values()
    subnets = [_tags(r) for r in network if r["Type"] == "AWS::EC2::Subnet"]
    assert sum(tags.get("kubernetes.io/role/internal-elb") == "1" for tags in subnets) == 3
    assert sum(tags.get("kubernetes.io/role/elb") == "1" for tags in subnets) == 3
