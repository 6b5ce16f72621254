"""Acknowledging checkov findings on the synthesized templates, always with a reason.

checkov reads ``Metadata.checkov.skip: [{id, comment}]`` on a CloudFormation resource. Our own
resources are acknowledged beside the code that creates them (:func:`acknowledge`); the Lambda
functions of aws-cdk-lib's custom-resource providers (kubectl, bucket deployment, auto-delete,
CfnJson, default-security-group restriction) are acknowledged by :class:`CdkProviderFunctions`, an
aspect, because their constructs are created inside aws-cdk-lib. This app defines no Lambda function
of its own (a test keeps it so), so the aspect cannot hide one of ours.
"""

from __future__ import annotations

from typing import Any, Final

import aws_cdk as cdk
import jsii
from constructs import IConstruct

MIN_REASON: Final = 20

CDK_PROVIDER_FINDINGS: Final[dict[str, str]] = {
    "CKV_AWS_115": "a CDK custom-resource provider runs only during CloudFormation deployments; a "
    "reserved-concurrency limit would only make a deployment fail under load",
    "CKV_AWS_116": "CloudFormation invokes CDK's provider functions synchronously and retries or rolls "
    "back the stack itself; a dead-letter queue would receive nothing actionable",
    "CKV_AWS_117": "CDK's provider functions that only call AWS APIs (S3, EC2, IAM) run outside the VPC; "
    "the kubectl handler, which must reach the private API endpoint, runs inside it",
    "CKV_AWS_173": "CDK's provider functions carry no secret in their environment (only endpoint and "
    "behaviour settings); the default Lambda service key encrypts it at rest",
}


def acknowledge(resource: IConstruct, check_id: str, *, reason: str) -> None:
    """Skip checkov's ``check_id`` on ``resource`` (a construct or its CloudFormation resource)."""
    if len(reason) < MIN_REASON:
        raise ValueError(f"acknowledging {check_id} needs a real reason, got {reason!r}")
    cfn = resource if isinstance(resource, cdk.CfnResource) else resource.node.default_child
    if not isinstance(cfn, cdk.CfnResource):
        raise TypeError(f"{resource.node.path}: no CloudFormation resource to acknowledge {check_id} on")
    metadata: dict[str, Any] = cfn.get_metadata("checkov") or {}
    skips = [item for item in metadata.get("skip", []) if item["id"] != check_id]
    cfn.add_metadata("checkov", {"skip": [*skips, {"id": check_id, "comment": reason}]})


@jsii.implements(cdk.IAspect)
class CdkProviderFunctions:
    """Acknowledge :data:`CDK_PROVIDER_FINDINGS` on every Lambda function (all are aws-cdk-lib's)."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, cdk.CfnResource) and node.cfn_resource_type == "AWS::Lambda::Function":
            for check_id, reason in CDK_PROVIDER_FINDINGS.items():
                acknowledge(node, check_id, reason=reason)
