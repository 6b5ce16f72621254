"""One construct at a time, each in a bare stack (fast: no cluster, no kubectl layer)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_eks_v2 as eks

from cdk.config import AddonConfig, GatewayConfigManifest, NetworkConfig
from cdk.constructs.gateway_config_manifest import GatewayConfig, InvalidGatewayConfigError
from cdk.constructs.gateway_role import CLUSTER_TAG, GatewayRole
from cdk.constructs.hyperpod_cluster import lifecycle_bucket_name
from cdk.constructs.inference_addon import InferenceAddon
from cdk.constructs.network import Network
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import configuration, pins

ENV = cdk.Environment(account="111111111111", region="us-west-2")


def _stack():
    return cdk.Stack(cdk.App(), "Test", env=ENV)


def _imported_cluster(stack):
    return eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="igw")


def test_new_network_tags_subnets_and_logs_flows():
    stack = _stack()
    Network(
        stack,
        "Net",
        config=NetworkConfig(cidr="10.1.0.0/16"),
        availability_zones=["us-west-2a", "us-west-2b"],
        cluster_name="igw",
    )
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.1.0.0/16"})
    template.resource_count_is("AWS::EC2::Subnet", 4)
    template.resource_count_is("AWS::EC2::FlowLog", 1)
    template.has_resource_properties(
        "AWS::EC2::Subnet",
        {"Tags": assertions.Match.array_with([{"Key": "kubernetes.io/cluster/igw", "Value": "shared"}])},
    )


def test_imported_network_creates_nothing():
    stack = _stack()
    network = Network(
        stack,
        "Net",
        config=NetworkConfig(
            vpc_id="vpc-0123456789abcdef0",
            private_subnet_ids=("subnet-0123456789abcdef0", "subnet-0123456789abcdef1"),
        ),
        availability_zones=["us-west-2a", "us-west-2b"],
        cluster_name="igw",
    )
    assert [s.subnet_id for s in network.private_subnets] == [
        "subnet-0123456789abcdef0",
        "subnet-0123456789abcdef1",
    ]
    assert assertions.Template.from_stack(stack).to_json().get("Resources", {}) == {}


def test_pod_identity_role_trusts_eks_pods_with_session_tags():
    stack = _stack()
    role = WorkloadRole(
        stack,
        "Role",
        cluster=_imported_cluster(stack),
        identity="podIdentity",
        namespace="ns",
        service_account="sa",
        description="test",
    )
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ],
                "Version": "2012-10-17",
            }
        },
    )
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"ClusterName": "igw", "Namespace": "ns", "ServiceAccount": "sa"}
    )
    assert role.association is not None


def test_irsa_role_needs_the_oidc_provider():
    stack = _stack()
    with pytest.raises(ValueError, match="OIDC provider"):
        WorkloadRole(
            stack,
            "Role",
            cluster=_imported_cluster(stack),
            identity="irsa",
            namespace="ns",
            service_account="sa",
            description="t",
        )


def test_gateway_role_conditions_every_statement_on_the_cluster_tag():
    stack = _stack()
    GatewayRole(
        stack,
        "Gateway",
        cluster=_imported_cluster(stack),
        cluster_name="igw",
        identity="podIdentity",
        oidc_provider=None,
    )
    template = assertions.Template.from_stack(stack)
    (policy,) = template.find_resources("AWS::IAM::Policy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert {s["Sid"] for s in statements} == {"ImportTaggedCertificates", "ManageOwnCertificates"}
    for statement in statements:
        (condition,) = statement["Condition"]["StringEquals"].items()
        assert condition[0].endswith(f"/{CLUSTER_TAG}")
        assert condition[1] == "igw"
        assert statement["Resource"] == "arn:aws:acm:us-west-2:111111111111:certificate/*"
    template.resource_count_is("AWS::EKS::PodIdentityAssociation", 0)  # the add-on binds it


def _addon_stack(config):
    stack = _stack()
    cluster = _imported_cluster(stack)
    gateway = GatewayRole(
        stack, "Gateway", cluster=cluster, cluster_name="igw", identity="podIdentity", oidc_provider=None
    )
    InferenceAddon(
        stack, "Addon", cluster=cluster, config=config, identity="podIdentity", gateway_role=gateway
    )
    return assertions.Template.from_stack(stack)


def test_managed_addon_carries_validated_values():
    template = _addon_stack(AddonConfig(configuration_values={"replicaCount": 4}, conflict_policy="PRESERVE"))
    template.has_resource_properties(
        "AWS::EKS::Addon",
        {
            "AddonName": pins.ADDON_NAME,
            "AddonVersion": pins.ADDON_VERSION,
            "ResolveConflicts": "PRESERVE",
            "ConfigurationValues": assertions.Match.serialized_json({"replicaCount": 4}),
            "NamespaceConfig": {"Namespace": pins.ADDON_NAMESPACE},
        },
    )


def test_managed_addon_rejects_invalid_values_at_synth():
    with pytest.raises(configuration.ConfigurationValuesError, match=r"service\.scheme"):
        _addon_stack(AddonConfig(configuration_values={"service": {"scheme": "public"}}))


def test_managed_addon_rejects_versions_without_the_gateway():
    with pytest.raises(ValueError, match=r"below v2\.0\.0-eksbuild\.2"):
        _addon_stack(AddonConfig(version="v1.5.0-eksbuild.1"))


def test_gateway_config_manifest_is_validated_at_synth():
    stack = _stack()
    bad = GatewayConfigManifest(
        name="gw",
        namespace="default",
        spec={
            "bbr": {"enabled": False},
            "schedulers": [
                {"name": "a", "modelName": "m1", "modelSelector": {"matchLabels": {"app": "a"}}},
                {"name": "b", "modelName": "m2", "modelSelector": {"matchLabels": {"app": "b"}}},
            ],
        },
    )
    with pytest.raises(InvalidGatewayConfigError, match="bbr"):
        GatewayConfig(stack, "Config", cluster=_imported_cluster(stack), config=bad)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("igw-hyperpod", "sagemaker-igw-hyperpod-111111111111-us-west-2"),
        ("A" * 63, "sagemaker-" + "a" * 30 + "-111111111111-us-west-2"),
    ],
)
def test_lifecycle_bucket_name_is_a_sagemaker_bucket_within_s3_limits(name, expected):
    bucket = lifecycle_bucket_name(hyperpod_name=name, account="111111111111", region="us-west-2")
    assert bucket == expected
    assert len(bucket) <= 63
