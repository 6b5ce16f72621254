"""The non-default choices: imported VPC, API_AND_CONFIG_MAP, public endpoint limited to CIDRs, IRSA, and
the add-on self-managed from our chart."""

from __future__ import annotations

import json

from aws_cdk import assertions

from igw.addon import pins


def _template(variant, role):
    return assertions.Template.from_json(variant.templates[role])


def test_imported_vpc_needs_no_network_stack(variant):
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


def test_authentication_mode_and_public_endpoint_cidrs(variant):
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


def test_irsa_roles_trust_only_their_service_account(variant):
    cluster = _template(variant, "cluster")
    cluster.resource_count_is("AWS::IAM::OIDCProvider", 1)
    platform = _template(variant, "platform")
    platform.resource_count_is("AWS::EKS::PodIdentityAssociation", 0)
    inference = _template(variant, "inference")
    roles = inference.find_resources("AWS::IAM::Role")
    trust = json.dumps([r["Properties"]["AssumeRolePolicyDocument"] for r in roles.values()])
    assert "sts:AssumeRoleWithWebIdentity" in trust
    # The sub/aud conditions hold the issuer URL (a token), so CDK resolves them through a CfnJson resource.
    conditions = json.dumps(
        [r["Properties"]["Value"] for r in inference.find_resources("Custom::AWSCDKCfnJson").values()]
    )
    assert f"system:serviceaccount:{pins.ADDON_NAMESPACE}:{pins.GATEWAY_SERVICE_ACCOUNT}" in conditions
    assert "sts.amazonaws.com" in conditions


def test_self_managed_addon_installs_our_chart_with_the_irsa_role(variant):
    inference = _template(variant, "inference")
    inference.resource_count_is("AWS::EKS::Addon", 0)
    charts = inference.find_resources("Custom::AWSCDK-EKS-HelmChart")
    assert len(charts) == 1
    (chart,) = charts.values()
    props = chart["Properties"]
    assert props["Namespace"] == pins.ADDON_NAMESPACE
    assert "ChartAssetURL" in props
    values = json.dumps(props["Values"])
    assert "roleArn" in values
    assert '\\"replicaCount\\":3' in values
    manifests = inference.find_resources("Custom::AWSCDK-EKS-KubernetesResource")
    (manifest,) = manifests.values()
    assert next(iter(charts)) in manifest["DependsOn"]
