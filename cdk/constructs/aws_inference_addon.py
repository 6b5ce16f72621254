"""AWS's own add-on, ``amazon-sagemaker-hyperpod-inference`` (only when the deployment config asks for
``inference.addon.mode: awsManaged``), with what AWS documents it needs:

- an execution role with the managed ``AmazonSageMakerHyperPodInferenceAccess``
  (``executionRoleArn``), trusted by SageMaker and, through IRSA, by the operator's service account;
- an S3 bucket for the TLS certificates the operator issues (``tlsCertificateS3Bucket``);
- an IRSA role for ``hyperpod-inference-system:inference-gateway-controller`` with the managed
  ``AmazonSageMakerHyperPodInferenceGatewayAccess`` (``inferenceGateway.serviceAccount.roleArn``),
  created before the add-on because the controller reads it at start;
- ``alb.enabled: false``: the platform stack already runs the Load Balancer Controller.

With ``inferenceOperator.enabled: false`` nothing runs under the execution role: AWS's schema still
requires ``executionRoleArn`` and ``tlsCertificateS3Bucket``, so the role and the bucket are still
created and passed, but the role carries no permission (neither the managed policy nor the bucket
grant). Least privilege: before session s43 a role no deployed component used kept
``AmazonSageMakerHyperPodInferenceAccess`` and read/write on the bucket; before s44 the operator's
grant was CDK's ``grant_read_write`` (delete, abort, ``GetBucket*``, ``List*``), now
:data:`TLS_OBJECT_ACTIONS` on the objects and :data:`TLS_BUCKET_ACTIONS` on the bucket. SageMaker's
trust carries ``aws:SourceAccount`` (:mod:`cdk.constructs.service_trust`).

The values are checked at synth against AWS's schema (:mod:`igw.addon.aws_addon`), never our chart's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import AddonConfig
from cdk.constructs.buckets import access_log_bucket, logged_bucket
from cdk.constructs.nag_ack import acknowledge, arn_of, managed_policy
from cdk.constructs.service_trust import account_service_principal
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import aws_addon, pins

OPERATOR_SERVICE_ACCOUNT: Final = "hyperpod-inference-controller-manager"
PLACEHOLDER_ROLE: Final = "arn:aws:iam::111111111111:role/placeholder"
PLACEHOLDER_CLUSTER: Final = "arn:aws:sagemaker:us-west-2:111111111111:cluster/placeholder"
TLS_OBJECT_ACTIONS: Final = ("s3:GetObject", "s3:PutObject")
"""What the operator does with its TLS bucket's objects: writes the certificates it issues and reads
them back. No delete, no multipart abort, no ACL or version access (CDK's ``grant_read_write`` gave
``s3:DeleteObject*``, ``s3:Abort*``, ``s3:GetObject*`` and ``s3:GetBucket*``)."""
TLS_BUCKET_ACTIONS: Final = ("s3:ListBucket",)
"""On the bucket itself: a read of a missing certificate is then a 404 the operator can act on, not a
403 (S3 answers 403 for a missing key without ``s3:ListBucket``)."""


def operator_enabled(values: Mapping[str, Any]) -> bool:
    """Whether AWS's add-on runs its inference operator (``inferenceOperator.enabled``, on unless
    false): the one component that uses the execution role and the TLS-certificate bucket."""
    operator = values.get("inferenceOperator") or {}
    return operator.get("enabled", True) is not False


class AwsInferenceAddon(Construct):
    """Exposes ``addon`` (the ``CfnAddon``), ``execution_role``, ``gateway_role`` and ``tls_bucket``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        oidc_provider: iam.IOidcProvider,
        config: AddonConfig,
        hyperpod_cluster_arn: str,
    ) -> None:
        super().__init__(scope, id_)
        aws_values = aws_addon.values_for(
            config.configuration_values,
            execution_role_arn=PLACEHOLDER_ROLE,
            tls_bucket="placeholder-bucket",
            hyperpod_cluster_arn=PLACEHOLDER_CLUSTER,
            gateway_role_arn=PLACEHOLDER_ROLE,
            install_load_balancer_controller=True,
        )
        found = aws_addon.problems(aws_values)
        if found:
            raise aws_addon.AwsAddonValuesError(found)
        self.access_logs = access_log_bucket(self, "AccessLogs", logs_of="TLS certificate bucket")
        self.tls_bucket = logged_bucket(
            self, "TlsCertificates", access_logs=self.access_logs, log_prefix="tls-certificates/"
        )
        operator = WorkloadRole(
            self,
            "OperatorIdentity",
            cluster=cluster,
            identity="irsa",
            namespace=pins.ADDON_NAMESPACE,
            service_account=OPERATOR_SERVICE_ACCOUNT,
            oidc_provider=oidc_provider,
            description="HyperPod inference operator (AWS's add-on) execution role",
            extra_principals=[account_service_principal(self, "sagemaker.amazonaws.com", if_exists=True)],
        )
        self.execution_role = operator.role
        self.operator_enabled = operator_enabled(config.configuration_values)
        if self.operator_enabled:
            self.execution_role.add_managed_policy(
                iam.ManagedPolicy.from_aws_managed_policy_name(aws_addon.EXECUTION_POLICY)
            )
            self.execution_role.add_to_policy(
                iam.PolicyStatement(
                    sid="TlsCertificateObjects",
                    actions=list(TLS_OBJECT_ACTIONS),
                    resources=[self.tls_bucket.arn_for_objects("*")],
                )
            )
            self.execution_role.add_to_policy(
                iam.PolicyStatement(
                    sid="TlsCertificateBucket",
                    actions=list(TLS_BUCKET_ACTIONS),
                    resources=[self.tls_bucket.bucket_arn],
                )
            )
        gateway = WorkloadRole(
            self,
            "GatewayControllerIdentity",
            cluster=cluster,
            identity="irsa",
            namespace=pins.ADDON_NAMESPACE,
            service_account=pins.AWS_GATEWAY_CONTROLLER_SERVICE_ACCOUNT,
            oidc_provider=oidc_provider,
            description="HyperPod inference gateway controller: imports its certificates into ACM",
        )
        self.gateway_role = gateway.role
        self.gateway_role.add_managed_policy(
            iam.ManagedPolicy.from_aws_managed_policy_name(aws_addon.GATEWAY_POLICY)
        )
        self.values = aws_addon.values_for(
            config.configuration_values,
            execution_role_arn=self.execution_role.role_arn,
            tls_bucket=self.tls_bucket.bucket_name,
            hyperpod_cluster_arn=hyperpod_cluster_arn,
            gateway_role_arn=self.gateway_role.role_arn,
            install_load_balancer_controller=True,
        )
        self.addon = eks.CfnAddon(
            self,
            "Addon",
            cluster_name=cluster.cluster_name,
            addon_name=pins.AWS_ADDON_NAME,
            addon_version=config.version,
            resolve_conflicts=config.conflict_policy,
            configuration_values=cdk.Stack.of(self).to_json_string(self.values),
            namespace_config=eks.CfnAddon.NamespaceConfigProperty(namespace=pins.ADDON_NAMESPACE),
        )
        self.addon.node.add_dependency(self.execution_role, self.gateway_role)
        self._acknowledge()

    def _acknowledge(self) -> None:
        acknowledge(
            self.gateway_role,
            "AwsSolutions-IAM4",
            reason="AWS's add-on documents AmazonSageMakerHyperPodInferenceGatewayAccess (ACM import of "
            "the gateway's own certificates) as the gateway controller's policy",
            findings=[managed_policy(aws_addon.GATEWAY_POLICY)],
        )
        if not self.operator_enabled:
            return
        acknowledge(
            self.execution_role,
            "AwsSolutions-IAM4",
            reason="AWS's add-on documents AmazonSageMakerHyperPodInferenceAccess as the operator "
            "execution role's policy; AWS maintains it with the operator",
            findings=[managed_policy(aws_addon.EXECUTION_POLICY)],
        )
        acknowledge(
            self.execution_role,
            "AwsSolutions-IAM5",
            reason="the operator writes and reads certificate objects under keys it chooses (AWS does "
            "not document a prefix) in its own TLS bucket; the grant names that one bucket's objects",
            findings=[f"Resource::{arn_of(self.tls_bucket)}/*"],
        )
