"""Service principals whose trust is pinned to this stack's account (and resource ARN where the service
documents one), against the cross-service confused deputy: without ``aws:SourceAccount`` any account's
use of the service could ask it to assume a role whose ARN it learned, if the service were tricked into
it. AWS documents the keys for SageMaker (``sagemaker.amazonaws.com``), VPC Flow Logs
(``vpc-flow-logs.amazonaws.com``, with ``aws:SourceArn`` of ``vpc-flow-log/*``) and ECS task roles
(``ecs-tasks.amazonaws.com``, with ``aws:SourceArn`` of ``arn:<partition>:ecs:<region>:<account>:*``);
the principals that stay without them are listed, each with its reason, in
``tests/cdk/test_service_trust_and_removal.py``.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

SOURCE_ACCOUNT = "aws:SourceAccount"
SOURCE_ARN = "aws:SourceArn"


def source_conditions(
    scope: Construct, *, source_arn: str | None = None, if_exists: bool = False
) -> dict[str, Any]:
    """``StringEquals aws:SourceAccount`` = the stack's account, and ``ArnLike aws:SourceArn`` when
    given: the trust conditions a service principal's statement carries. ``if_exists``:
    ``StringEqualsIfExists`` instead, for a service whose role AWS documents without the condition
    (HyperPod's execution roles): a request carrying another account is refused, and one carrying
    no source account, if the service sends none for this role, still assumes it rather than
    breaking the cluster on deploy (unverified against AWS which of the two HyperPod does)."""
    operator = "StringEqualsIfExists" if if_exists else "StringEquals"
    conditions: dict[str, Any] = {operator: {SOURCE_ACCOUNT: cdk.Stack.of(scope).account}}
    if source_arn is not None:
        conditions["ArnLike"] = {SOURCE_ARN: source_arn}
    return conditions


def account_service_principal(
    scope: Construct, service: str, *, source_arn: str | None = None, if_exists: bool = False
) -> iam.ServicePrincipal:
    """``service`` as a principal that may assume the role only on behalf of this account
    (``if_exists``: see :func:`source_conditions`)."""
    return iam.ServicePrincipal(
        service, conditions=source_conditions(scope, source_arn=source_arn, if_exists=if_exists)
    )


def flow_log_source_arn(scope: Construct) -> str:
    """Any VPC flow log of the stack's account and region (AWS's flow-log role documentation)."""
    stack = cdk.Stack.of(scope)
    return f"arn:{cdk.Aws.PARTITION}:ec2:{stack.region}:{stack.account}:vpc-flow-log/*"


def ecs_task_source_arn(scope: Construct) -> str:
    """Any ECS resource of the stack's account and region (AWS's ECS task IAM role documentation)."""
    stack = cdk.Stack.of(scope)
    return f"arn:{cdk.Aws.PARTITION}:ecs:{stack.region}:{stack.account}:*"


def pin_role(
    scope: Construct, role: iam.IRole, *, source_arn: str | None = None, if_exists: bool = False
) -> None:
    """Add the source conditions to the one trust statement of a role an aws-cdk-lib construct
    created for a service principal (the construct takes no principal of ours). Overriding the
    property keeps the role, its ARN and everything that references it; only the trust changes."""
    cfn = role.node.default_child
    if not isinstance(cfn, iam.CfnRole):
        raise TypeError(f"{role.node.path}: not a role of this app to pin")
    cfn.add_property_override(
        "AssumeRolePolicyDocument.Statement.0.Condition",
        source_conditions(scope, source_arn=source_arn, if_exists=if_exists),
    )


def pin_flow_log_role(scope: Construct, role: iam.CfnRole) -> None:
    """Add the source conditions to the one statement of the role CDK's ``FlowLog`` creates for
    ``vpc-flow-logs.amazonaws.com`` (the construct takes no principal of ours)."""
    role.add_property_override(
        "AssumeRolePolicyDocument.Statement.0.Condition",
        source_conditions(scope, source_arn=flow_log_source_arn(scope)),
    )
