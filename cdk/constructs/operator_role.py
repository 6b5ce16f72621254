"""The IAM role of ``igw operator`` (our chart's operator mode), for auto-issued TLS.

An InferenceGatewayConfig whose ``spec.tls`` is ``{}`` (or has an empty ``acmArn``) asks the operator
for a certificate: cert-manager issues it, and the operator imports it into ACM, re-imports it when
cert-manager renews it and deletes it with the object (``igw/operator/tls.py``). Those ACM calls run
with the operator pod's own AWS credentials, so its service account needs a role. Why here: before
session s39 the app bound none, and with the chart's default ``operator.autoTls: true`` every such
object - the deployment config's own ``gatewayConfig`` without ``inference.endpoint``, or one applied
later with kubectl - stayed without a TLS listener while the operator's ACM calls were refused.

The role allows exactly the ACM actions the operator calls (:data:`igw.operator.tls.ACM_LIST_ACTIONS`
and :data:`~igw.operator.tls.ACM_CERTIFICATE_ACTIONS`): listing has no resource-level permission,
everything else is limited to certificates of this stack's account and region (the load balancer's).
Which certificate it may re-import or delete the operator decides itself, by the uid tag it put on
its own imports. It is bound to the operator's one service account, through EKS Pod Identity or IRSA
as the deployment's identity mode says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import IdentityMode
from cdk.constructs.nag_ack import acknowledge
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import pins
from igw.operator.tls import ACM_CERTIFICATE_ACTIONS, ACM_LIST_ACTIONS

MAX_NAME: Final = 63


def _helm_name(text: str) -> str:
    """Helm's ``trunc 63 | trimSuffix "-"``."""
    return text[:MAX_NAME].removesuffix("-")


def operator_service_account(values: Mapping[str, Any], *, release: str) -> str:
    """The operator's service account as the chart names it (``igw.operatorName``: the full name,
    ``fullnameOverride`` or the release, then ``-operator``)."""
    full = _helm_name(str(values.get("fullnameOverride") or release))
    return _helm_name(f"{full}-operator")


def wants_operator_role(values: Mapping[str, Any]) -> bool:
    """Whether the app gives the operator a role: operator mode with auto-issued TLS on (the chart's
    default) and no ``operator.roleArn`` of the user's own."""
    if values.get("mode", "operator") != "operator":
        return False
    operator = values.get("operator") or {}
    return operator.get("autoTls", True) is not False and not operator.get("roleArn")


class OperatorRole(Construct):
    """Exposes ``role`` (a :class:`WorkloadRole`; with Pod Identity its association binds it)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        identity: IdentityMode,
        oidc_provider: iam.IOidcProvider | None,
        service_account: str,
    ) -> None:
        super().__init__(scope, id_)
        self.role = WorkloadRole(
            self,
            "Identity",
            cluster=cluster,
            identity=identity,
            namespace=pins.ADDON_NAMESPACE,
            service_account=service_account,
            oidc_provider=oidc_provider,
            description="igw operator: imports auto-issued gateway certificates into ACM",
        )
        aws = cdk.Aws
        certificates = f"arn:{aws.PARTITION}:acm:{aws.REGION}:{aws.ACCOUNT_ID}:certificate/*"
        self.role.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="FindImportedCertificates", actions=list(ACM_LIST_ACTIONS), resources=["*"]
            )
        )
        self.role.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ManageImportedCertificates",
                actions=list(ACM_CERTIFICATE_ACTIONS),
                resources=[certificates],
            )
        )
        acknowledge(
            self.role.role,
            "AwsSolutions-IAM5",
            reason="acm:ListCertificates has no resource-level permission; the other ACM actions are "
            "limited to this account's certificates in this region, whose ARNs exist only once the "
            "operator imported them; the operator re-imports and deletes only those carrying its uid tag",
            findings=(
                "Resource::*",
                "Resource::arn:<AWS::Partition>:acm:<AWS::Region>:<AWS::AccountId>:certificate/*",
            ),
        )
