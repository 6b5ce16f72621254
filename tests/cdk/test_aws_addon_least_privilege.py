"""AWS's add-on (``inference.addon.mode: awsManaged``): its execution role carries permissions only
while AWS's inference operator, the one component that runs under it, is deployed.

``inferenceOperator.enabled: false`` is accepted (the gateway controller has its own role), and AWS's
schema still requires ``executionRoleArn`` and ``tlsCertificateS3Bucket``, so both are created. Before
session s43 that role still carried the managed ``AmazonSageMakerHyperPodInferenceAccess`` and
read/write on the certificate bucket although no pod and no service used them.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from cdk.config import AddonConfig
from cdk.constructs.aws_inference_addon import AwsInferenceAddon, operator_enabled
from igw.addon import aws_addon

ACCOUNT = "111111111111"
REGION = "us-west-2"
OIDC = f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.{REGION}.amazonaws.com/id/X"


def _addon_stack(values: dict[str, Any]) -> tuple[Template, AwsInferenceAddon]:
    """AWS's add-on alone in a stack, on an imported cluster (only the IAM of the construct matters)."""
    stack = cdk.Stack(cdk.App(), "Test", env=cdk.Environment(account=ACCOUNT, region=REGION))
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="igw")
    addon = AwsInferenceAddon(
        stack,
        "AwsInferenceAddon",
        cluster=cluster,
        oidc_provider=eks.OidcProviderNative.from_oidc_provider_arn(stack, "Oidc", OIDC),
        config=AddonConfig(mode="awsManaged", configuration_values=values),
        hyperpod_cluster_arn=f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abc",
    )
    return Template.from_stack(stack), addon


def _execution_role(template: Template, addon: AwsInferenceAddon) -> tuple[str, dict[str, Any]]:
    logical_id = cdk.Stack.of(addon).get_logical_id(addon.execution_role.node.default_child)  # type: ignore[arg-type]
    role: dict[str, Any] = template.to_json()["Resources"][logical_id]
    return logical_id, role


def _policies_of(template: Template, logical_id: str) -> list[dict[str, Any]]:
    return [
        dict(policy)
        for policy in template.find_resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id} in policy["Properties"]["Roles"]
    ]


def test_without_the_operator_the_execution_role_is_allowed_nothing() -> None:
    template, addon = _addon_stack({"inferenceOperator": {"enabled": False}})
    logical_id, role = _execution_role(template, addon)

    assert role["Properties"].get("ManagedPolicyArns", []) == []
    assert _policies_of(template, logical_id) == []
    # still created and passed: AWS's schema requires both values
    addon_values = template.find_resources("AWS::EKS::Addon")
    (properties,) = [r["Properties"] for r in addon_values.values()]
    assert "executionRoleArn" in str(properties["ConfigurationValues"])
    assert "tlsCertificateS3Bucket" in str(properties["ConfigurationValues"])


@pytest.mark.parametrize("values", [{}, {"inferenceOperator": {"enabled": True}}])
def test_with_the_operator_the_execution_role_gets_awss_policy_and_its_bucket(
    values: dict[str, Any],
) -> None:
    template, addon = _addon_stack(values)
    logical_id, role = _execution_role(template, addon)

    (managed,) = role["Properties"]["ManagedPolicyArns"]
    assert aws_addon.EXECUTION_POLICY in str(managed)
    (policy,) = _policies_of(template, logical_id)
    bucket = cdk.Stack.of(addon).get_logical_id(addon.tls_bucket.node.default_child)  # type: ignore[arg-type]
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": logical_id}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Resource": {"Fn::GetAtt": [bucket, "Arn"]}})]
                )
            },
        },
    )
    assert policy["Properties"]["Roles"] == [{"Ref": logical_id}]


@pytest.mark.parametrize(
    ("values", "wanted"),
    [({}, True), ({"inferenceOperator": {}}, True), ({"inferenceOperator": {"enabled": False}}, False)],
)
def test_the_operator_runs_unless_turned_off(values: dict[str, Any], wanted: bool) -> None:
    assert operator_enabled(values) is wanted


def test_the_execution_role_is_still_one_sagemaker_can_assume() -> None:
    template, addon = _addon_stack({"inferenceOperator": {"enabled": False}})
    _, role = _execution_role(template, addon)
    assert isinstance(addon.execution_role, iam.Role)
    assert "sagemaker.amazonaws.com" in str(role["Properties"]["AssumeRolePolicyDocument"])
