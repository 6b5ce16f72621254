"""The non-default choices: imported VPC, API_AND_CONFIG_MAP, public endpoint limited to CIDRs, IRSA, and
AWS's managed add-on instead of our chart."""

from __future__ import annotations

import json

from aws_cdk import assertions

from igw.addon import pins
from tests.cdk.support import Synthesized


def _template(variant: Synthesized, role: str) -> assertions.Template:
    return assertions.Template.from_json(variant.templates[role])


def test_imported_vpc_needs_no_network_stack(variant: Synthesized) -> None:
    assert "network" not in variant.templates
    cluster = _template(variant, "cluster")
    cluster.resource_count_is("AWS::EC2::VPC", 0)
    cluster.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "ResourcesVpcConfig": assertions.Match.object_like(
                {"SubnetIds": [f"subnet-0123456789abcdef{i}" for i in range(3)]}
            )
        },
    )


def test_authentication_mode_and_public_endpoint_cidrs(variant: Synthesized) -> None:
    cluster = _template(variant, "cluster")
    cluster.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "AccessConfig": assertions.Match.object_like({"AuthenticationMode": "API_AND_CONFIG_MAP"}),
            "ResourcesVpcConfig": assertions.Match.object_like(
                {"EndpointPublicAccess": True, "PublicAccessCidrs": ["203.0.113.0/24"]}
            ),
        },
    )
    cluster.has_resource_properties(
        "AWS::EKS::AccessEntry",
        {"PrincipalArn": "arn:aws:iam::111111111111:role/platform-admin"},
    )


def test_irsa_roles_trust_only_their_service_account(variant: Synthesized) -> None:
    cluster = _template(variant, "cluster")
    cluster.resource_count_is("AWS::IAM::OIDCProvider", 1)
    platform = _template(variant, "platform")
    platform.resource_count_is("AWS::EKS::PodIdentityAssociation", 0)
    roles = platform.find_resources("AWS::IAM::Role")
    trust = json.dumps([r["Properties"]["AssumeRolePolicyDocument"] for r in roles.values()])
    assert "sts:AssumeRoleWithWebIdentity" in trust
    assert "pods.eks.amazonaws.com" not in trust
    # The sub/aud conditions hold the issuer (a token), so CDK resolves them through a CfnJson resource.
    conditions = json.dumps(
        [r["Properties"]["Value"] for r in platform.find_resources("Custom::AWSCDKCfnJson").values()]
    )
    namespace = pins.LOAD_BALANCER_CONTROLLER_NAMESPACE
    sa = f"system:serviceaccount:{namespace}:{pins.LOAD_BALANCER_CONTROLLER_SERVICE_ACCOUNT}"
    assert sa in conditions
    assert "sts.amazonaws.com" in conditions


def test_aws_managed_addon_gets_awss_keys_and_none_of_ours(variant: Synthesized) -> None:
    inference = _template(variant, "inference")
    inference.resource_count_is("Custom::AWSCDK-EKS-HelmChart", 0)
    addons = inference.find_resources("AWS::EKS::Addon")
    ((logical, addon),) = addons.items()
    props = addon["Properties"]
    assert props["AddonName"] == pins.AWS_ADDON_NAME
    assert props["AddonVersion"] == "v2.0.0-eksbuild.2"
    values = json.dumps(props["ConfigurationValues"])
    for key in (
        "executionRoleArn",
        "tlsCertificateS3Bucket",
        "hyperpodClusterArn",
        "inferenceGateway",
        "keda",
    ):
        assert f'\\"{key}\\"' in values, key
    assert '\\"alb\\":{\\"enabled\\":false}' in values, "the platform stack runs the Load Balancer Controller"
    for ours in ("replicaCount", "gateway", "certManager", "service"):
        assert f'\\"{ours}\\":' not in values, ours
    roles = json.dumps(inference.find_resources("AWS::IAM::Role"))
    assert "AmazonSageMakerHyperPodInferenceGatewayAccess" in roles
    conditions = json.dumps(inference.find_resources("Custom::AWSCDKCfnJson"))
    controller = f"system:serviceaccount:{pins.ADDON_NAMESPACE}:{pins.AWS_GATEWAY_CONTROLLER_SERVICE_ACCOUNT}"
    assert controller in conditions
    (manifest,) = inference.find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    assert logical in manifest["DependsOn"]
