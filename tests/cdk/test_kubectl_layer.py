"""The kubectl handler's layer matches the cluster's Kubernetes version (``cdk/constructs/kubectl_layer.py``).

kubectl supports a control plane one minor version away from itself. Before session s40 the app
gave CDK's kubectl handler the kubectl 1.34 layer whatever ``cluster.kubernetesVersion`` said, so a
1.31 or 1.32 cluster (both accepted by the deployment config) had every manifest and chart applied
by a kubectl three or two minor versions newer than its API server. The version is read from the
synthesized layer's own description (what the layer package says it bundles), never from our code.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from cdk import config
from cdk.constructs.kubectl_layer import layer_package
from igw.addon import pins
from tests.cdk.support import existing_cluster_stack, existing_document

ROOT = Path(__file__).resolve().parents[2]


def _kubectl_versions(template: dict[str, Any]) -> list[str]:
    """The kubectl versions of the template's Lambda layers (``/opt/kubectl/kubectl 1.31.9; ...``)."""
    found: list[str] = []
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Lambda::LayerVersion":
            description = resource["Properties"].get("Description", "")
            match = re.search(r"/opt/kubectl/kubectl (\d+\.\d+)\.", description)
            if match:
                found.append(match.group(1))
    return found


@pytest.mark.parametrize("version", pins.SUPPORTED_KUBERNETES_VERSIONS)
def test_an_existing_clusters_kubectl_handler_runs_the_kubectl_of_its_version(version: str) -> None:
    document = existing_document()
    document["existingCluster"]["kubernetesVersion"] = version
    stack = existing_cluster_stack(document)
    template = dict(cdk.assertions.Template.from_stack(stack).to_json())
    assert _kubectl_versions(template) == [version]


def test_a_new_clusters_kubectl_handler_runs_the_kubectl_of_its_version() -> None:
    from aws_cdk import aws_ec2 as ec2

    from cdk.constructs.eks_cluster import EksCluster

    stack = cdk.Stack(cdk.App(), "Cluster", env=cdk.Environment(account="111111111111", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=0)
    EksCluster(
        stack,
        "Eks",
        config=config.ClusterConfig(kubernetes_version="1.32"),
        cluster_name="c",
        vpc=vpc,
        private_subnets=vpc.isolated_subnets,
    )
    template = dict(cdk.assertions.Template.from_stack(stack).to_json())
    assert _kubectl_versions(template) == ["1.32"]


def test_the_default_app_runs_kubectl_of_the_default_version(synthesized: Any) -> None:
    assert _kubectl_versions(synthesized.templates["cluster"]) == [pins.KUBERNETES_VERSION]


def test_every_accepted_version_has_its_layer_package_declared() -> None:
    schema = json.loads((ROOT / "schemas" / "deployment-config.schema.json").read_text())
    accepted = {
        "cluster": schema["properties"]["cluster"]["properties"]["kubernetesVersion"]["enum"],
        "existingCluster": schema["properties"]["existingCluster"]["properties"]["kubernetesVersion"]["enum"],
    }
    assert accepted == {key: list(pins.SUPPORTED_KUBERNETES_VERSIONS) for key in accepted}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cdk"]
    declared = {re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0] for requirement in extra}
    wanted = [layer_package(v) for v in pins.SUPPORTED_KUBERNETES_VERSIONS]
    missing = [package for package in wanted if package not in declared]
    assert missing == []
