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
Reads (the certificate and its tags) cover every such certificate: finding the one an object owns
means reading the tags of all imports. Writes are limited by tag, as ACM's service authorization
reference allows (``aws:ResourceTag`` on the certificate resource; ``aws:RequestTag`` and
``aws:TagKeys`` on ``ImportCertificate`` and ``AddTagsToCertificate``): a new import must carry the
owner tag :data:`~igw.operator.tls.UID_TAG`, and re-importing, tagging or deleting needs a
certificate that carries it already (every import the operator ever made has it; the cluster tag
is added only once the cluster's uid is known, and its value is known only inside the cluster). Tags
written are ``igw.dev/*`` only. So neither a bug nor stolen operator credentials re-import or delete
the endpoint's certificate, or another team's, in one call; IAM cannot tell the tags of a new import
from tags added to an existing certificate, so tagging a foreign certificate with an owner tag
(then re-importing or deleting it) stays possible, and the operator itself also checks the uid tag's
value before it re-imports or deletes. Before session s40 the writes had no condition at all.

It is bound to the operator's one service account, through EKS Pod Identity or IRSA as the
deployment's identity mode says.
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
from igw.operator.tls import (
    ACM_CERTIFICATE_ACTIONS,
    ACM_LIST_ACTIONS,
    CLUSTER_TAG,
    NAME_TAG,
    NAMESPACE_TAG,
    UID_TAG,
)

MAX_NAME: Final = 63
ACM_READ_ACTIONS: Final = ("acm:GetCertificate", "acm:ListTagsForCertificate")
"""Of :data:`~igw.operator.tls.ACM_CERTIFICATE_ACTIONS`, those that change nothing (allowed on every
certificate of the account and region); the others are the tag-conditioned writes."""
ACM_WRITE_ACTIONS: Final = tuple(a for a in ACM_CERTIFICATE_ACTIONS if a not in ACM_READ_ACTIONS)
OWNER_TAG: Final = UID_TAG
"""The tag every import of the operator carries (the object's uid): the writes' condition."""
TAG_KEYS: Final = "igw.dev/*"
"""The only tag keys the role may write (``aws:TagKeys``)."""
assert all(
    tag.startswith(TAG_KEYS.removesuffix("*")) for tag in (UID_TAG, NAME_TAG, NAMESPACE_TAG, CLUSTER_TAG)
)


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
                sid="ReadCertificates", actions=list(ACM_READ_ACTIONS), resources=[certificates]
            )
        )
        only_our_tag_keys = {"ForAllValues:StringLike": {"aws:TagKeys": [TAG_KEYS]}}
        self.role.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ImportOwnedCertificates",
                actions=[a for a in ACM_WRITE_ACTIONS if a != "acm:DeleteCertificate"],
                resources=[certificates],
                conditions={"Null": {f"aws:RequestTag/{OWNER_TAG}": "false"}, **only_our_tag_keys},
            )
        )
        self.role.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ManageOwnedCertificates",
                actions=list(ACM_WRITE_ACTIONS),
                resources=[certificates],
                conditions={"Null": {f"aws:ResourceTag/{OWNER_TAG}": "false"}, **only_our_tag_keys},
            )
        )
        acknowledge(
            self.role.role,
            "AwsSolutions-IAM5",
            reason="acm:ListCertificates has no resource-level permission; the other ACM actions are "
            "limited to this account's certificates in this region, whose ARNs exist only once the "
            "operator imported them; its writes need the operator's owner tag on the certificate or in "
            "the import request",
            findings=(
                "Resource::*",
                "Resource::arn:<AWS::Partition>:acm:<AWS::Region>:<AWS::AccountId>:certificate/*",
            ),
        )
