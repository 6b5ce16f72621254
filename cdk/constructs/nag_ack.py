"""Acknowledging cdk-nag findings beside the resource they concern, always with a reason.

cdk-nag 3 reports through CDK's policy-validation plugins; a finding is acknowledged with
``Validations.of(construct).acknowledge(...)`` under the id ``AwsSolutions::<rule>[<finding>]``.
Acknowledge the exact findings (``findings=("Resource::*",)``) wherever they are knowable, so a new
wildcard added later is still reported; a bare rule id acknowledges every finding of that rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import IConstruct

PACK = "AwsSolutions"
MIN_REASON = 20


def acknowledge(construct: IConstruct, rule: str, *, reason: str, findings: Sequence[str] = ()) -> None:
    """Acknowledge ``rule`` (e.g. ``AwsSolutions-IAM5``) on ``construct`` and its children."""
    if len(reason) < MIN_REASON:
        raise ValueError(f"acknowledging {rule} needs a real reason, got {reason!r}")
    ids = [f"{PACK}::{rule}[{finding}]" for finding in findings] or [f"{PACK}::{rule}"]
    cdk.Validations.of(construct).acknowledge(*(cdk.Acknowledgment(id=i, reason=reason) for i in ids))


def managed_policy(name: str) -> str:
    """The IAM4 finding for an AWS managed policy (``service-role/...`` names included)."""
    return f"Policy::arn:<AWS::Partition>:iam::aws:policy/{name}"


def attach_aws_managed_policy(role: iam.IRole, name: str, *, reason: str) -> None:
    """Attach the AWS managed policy ``name`` to ``role`` and acknowledge exactly that IAM4 finding."""
    role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(name))
    acknowledge(role, "AwsSolutions-IAM4", reason=reason, findings=[managed_policy(name)])


def arn_of(resource: IConstruct) -> str:
    """How cdk-nag prints ``Fn::GetAtt [<logical id>, Arn]`` of a construct's default resource."""
    child = resource.node.default_child
    assert isinstance(child, cdk.CfnElement)
    return f"<{cdk.Stack.of(resource).get_logical_id(child)}.Arn>"


def bootstrap_qualifier(stack: cdk.Stack) -> str:
    """The bootstrap qualifier the stack's synthesizer uses (``cdk bootstrap --qualifier``, the
    ``@aws-cdk/core:bootstrapQualifier`` context value, or CDK's default)."""
    qualifier = stack.synthesizer.bootstrap_qualifier
    if qualifier is None:
        context = stack.node.try_get_context("@aws-cdk/core:bootstrapQualifier")
        qualifier = str(context) if context else cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER
    return qualifier


def asset_bucket(stack: cdk.Stack) -> str:
    """The bootstrap asset bucket that CDK's asset grants name, with the stack's qualifier."""
    return f"cdk-{bootstrap_qualifier(stack)}-assets-{stack.account}-{stack.region}"


def partition_of(stack: cdk.Stack) -> str:
    """The AWS partition of a stack's (concrete) region, as a literal."""
    if cdk.Token.is_unresolved(stack.region):
        raise ValueError(f"{stack.stack_name}: needs a concrete region (env) to name ARNs literally")
    if stack.region.startswith("cn-"):
        return "aws-cn"
    if stack.region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"
