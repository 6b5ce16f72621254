"""The gateway's IAM role: ACM import for auto-issued TLS certificates, and nothing else.

A certificate the gateway imports must be tagged with the cluster (``aws:RequestTag``), and it may
only describe, re-import or delete certificates carrying that tag (``aws:ResourceTag``), so one
cluster's gateway cannot touch another's certificates. ``acm:ImportCertificate`` of a *new*
certificate has no ARN yet, hence ``certificate/*`` scoped by the request-tag condition.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import IdentityMode
from cdk.constructs.nag_ack import acknowledge, partition_of
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import pins

CLUSTER_TAG = "igw.dev/cluster"


class GatewayRole(Construct):
    """Exposes ``identity`` (a :class:`WorkloadRole`; the add-on or stack binds it) and ``role``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        cluster_name: str,
        identity: IdentityMode,
        oidc_provider: eks.OidcProviderNative | None,
    ) -> None:
        super().__init__(scope, id_)
        self.identity = WorkloadRole(
            self,
            "Identity",
            cluster=cluster,
            identity=identity,
            namespace=pins.ADDON_NAMESPACE,
            service_account=pins.GATEWAY_SERVICE_ACCOUNT,
            oidc_provider=oidc_provider,
            associate=False,
            description="inference gateway: import its auto-issued TLS certificate into ACM",
        )
        self.role = self.identity.role
        stack = cdk.Stack.of(self)
        # A literal ARN (not a partition token) so the policy and its cdk-nag acknowledgement match exactly.
        certificates = f"arn:{partition_of(stack)}:acm:{stack.region}:{stack.account}:certificate/*"
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ImportTaggedCertificates",
                actions=["acm:ImportCertificate", "acm:AddTagsToCertificate"],
                resources=[certificates],
                conditions={"StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": cluster_name}},
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ManageOwnCertificates",
                actions=["acm:ImportCertificate", "acm:DescribeCertificate", "acm:DeleteCertificate"],
                resources=[certificates],
                conditions={"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster_name}},
            )
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            reason=(
                "a certificate the gateway imports has no ARN before import; certificate/* in "
                "this account and "
                "region is narrowed by the igw.dev/cluster request/resource tag conditions"
            ),
            findings=[f"Resource::{certificates}"],
        )
