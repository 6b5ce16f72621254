"""Existing-cluster mode: only the platform add-ons and the gateway; no VPC, cluster or HyperPod."""

from __future__ import annotations

import json

import kubernetes_validate
from aws_cdk import assertions

from cdk.constructs import ipv4_check
from igw.addon import pins
from tests.cdk.support import EXISTING_OIDC, Synthesized


def test_existing_cluster_creates_no_vpc_cluster_or_hyperpod(existing: Synthesized) -> None:
    assert set(existing.templates) == {"cluster", "platform", "inference"}
    for template in existing.templates.values():
        types = {resource["Type"] for resource in template["Resources"].values()}
        assert not types & {
            "AWS::EKS::Cluster",
            "AWS::EC2::VPC",
            "AWS::SageMaker::Cluster",
            "AWS::EKS::Nodegroup",
        }


def test_kubectl_handler_gets_an_access_entry_on_the_existing_cluster(existing: Synthesized) -> None:
    access = assertions.Template.from_json(existing.templates["cluster"])
    access.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {
            "ClusterName": "igw-inference",
            "AccessPolicies": [
                assertions.Match.object_like({"AccessScope": {"Type": "cluster"}}),
            ],
        },
    )
    (entry,) = access.find_resources("AWS::EKS::AccessEntry").values()
    assert "Fn::GetAtt" in json.dumps(entry["Properties"]["PrincipalArn"])


def test_installed_addons_are_left_alone_and_irsa_uses_the_existing_provider(existing: Synthesized) -> None:
    platform = assertions.Template.from_json(existing.templates["platform"])
    names = {a["Properties"]["AddonName"] for a in platform.find_resources("AWS::EKS::Addon").values()}
    assert pins.POD_IDENTITY_AGENT_ADDON not in names
    assert {d.name for d in pins.DEPENDENCY_ADDONS} <= names
    platform.has_resource_properties(
        "AWS::EKS::Addon",
        {
            "AddonName": pins.VPC_CNI_ADDON,
            "ConfigurationValues": assertions.Match.serialized_json({"enableNetworkPolicy": "true"}),
        },
    )
    platform.resource_count_is("AWS::IAM::OIDCProvider", 0)
    trust = json.dumps(platform.find_resources("AWS::IAM::Role"))
    assert EXISTING_OIDC in trust


def test_gateway_chart_installed_into_the_existing_cluster(existing: Synthesized) -> None:
    inference = assertions.Template.from_json(existing.templates["inference"])
    (chart,) = inference.find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    assert chart["Properties"]["ClusterName"] == "igw-inference"


def test_an_ipv6_cluster_fails_the_first_stack_not_the_load_balancer_wait(existing: Synthesized) -> None:
    """Session s42: an existing IPv6 cluster with ``existingCluster.ipFamily`` left out went through
    the platform stack and failed the inference stack after its 10-minute wait for a load balancer host
    name. The cluster-access stack now applies a Service that only an IPv4 cluster accepts, after the
    handler's access entry (the API server's refusal is Kubernetes' documented rule, not run here)."""
    access = assertions.Template.from_json(existing.templates["cluster"])
    manifests = access.find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    checks = [r for r in manifests.values() if ipv4_check.NAME in json.dumps(r["Properties"]["Manifest"])]
    assert len(checks) == 1, manifests
    (resource,) = checks
    (service,) = json.loads(resource["Properties"]["Manifest"])
    assert service["spec"]["ipFamilyPolicy"] == "SingleStack"
    assert service["spec"]["ipFamilies"] == ["IPv4"]
    assert "selector" not in service["spec"]
    kubernetes_validate.validate(service, "1.34", strict=True)
    (entry_id,) = access.find_resources("AWS::EKS::AccessEntry")
    assert entry_id in resource["DependsOn"]
    # Every later stack's kubectl call waits for it (the stacks depend on this one).
    assert {"platform", "inference"} <= set(existing.templates)
