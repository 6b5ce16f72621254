"""The SageMaker HyperPod cluster (``AWS::SageMaker::Cluster``) orchestrated by the EKS cluster.

Its nodes run the model servers. Lifecycle scripts live in a bucket whose name starts with
``sagemaker-`` (the managed instance policy only grants ``sagemaker-*`` buckets, and SageMaker rejects
other ``SourceS3Uri`` prefixes); the scripts in ``lifecycle_scripts/`` are uploaded by the stack and
each node runs ``hyperpod.lifecycleScriptOnCreate`` (default ``on_create.sh``) of them. That name is
fixed, so the bucket is deleted with the stack (objects first): ``cdk destroy`` then ``cdk deploy``
must not find it left over. The execution role carries the managed
``AmazonSageMakerClusterInstanceRolePolicy``, the ENI permissions EKS orchestration needs, ECR pull
(model-server and plugin images) and ``eks-auth:AssumeRoleForPodIdentity`` on this EKS cluster for
the node's Pod Identity agent.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_deployment as s3_deployment
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from cdk.config import LIFECYCLE_SCRIPTS_DIR, HyperPodConfig, InstanceGroupConfig
from cdk.constructs import checkov_ack
from cdk.constructs.buckets import access_log_bucket, logged_bucket
from cdk.constructs.nag_ack import acknowledge, arn_of, asset_bucket, managed_policy, partition_of
from cdk.constructs.service_trust import account_service_principal

SCRIPTS_DIR = LIFECYCLE_SCRIPTS_DIR
SCRIPTS_PREFIX = "lifecycle/"
INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
MAX_BUCKET_NAME = 63


NAME_HASH_LENGTH = 8
"""Hex digits of the HyperPod name's hash that end a shortened bucket name."""


def lifecycle_bucket_name(*, hyperpod_name: str, account: str, region: str) -> str:
    """``sagemaker-<cluster>-<account>-<region>``, lower-cased. A name that does not fit S3's 63
    characters is cut and ends in a hash of the whole HyperPod name: cut alone, two HyperPod clusters
    of one account and region whose names share their first 30 or so characters were given the same
    bucket, and the second ``cdk deploy`` failed (bucket names are global). A name that lower-casing
    changed ends in that hash too, however short: HyperPod names are case-sensitive (SageMaker's
    ``CreateCluster`` allows both cases and says nothing of case-insensitive uniqueness), and
    ``GPU-Pool`` and ``gpu-pool`` were given one bucket. Lower-case names that fit are as before (a
    renamed bucket is replaced, and the HyperPod cluster's ``SourceS3Uri`` with it)."""
    base = re.sub(r"[^a-z0-9-]", "-", f"sagemaker-{hyperpod_name}".lower())
    suffix = f"-{account}-{region}"
    if base == f"sagemaker-{hyperpod_name}" and len(base) + len(suffix) <= MAX_BUCKET_NAME:
        return base + suffix
    digest = hashlib.sha256(hyperpod_name.encode()).hexdigest()[:NAME_HASH_LENGTH]
    room = MAX_BUCKET_NAME - len(suffix) - len(digest) - 1
    return f"{base[:room].rstrip('-')}-{digest}{suffix}"


class HyperPodCluster(Construct):
    """Exposes ``cluster`` (the L1), ``execution_role``, ``lifecycle_bucket``; created ``after`` the given
    constructs (the VPC CNI add-on)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: HyperPodConfig,
        eks_cluster: eks.Cluster,
        private_subnets: Sequence[ec2.ISubnet],
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.access_logs = access_log_bucket(self, "AccessLogs", logs_of="lifecycle bucket")
        self.lifecycle_bucket_name = lifecycle_bucket_name(
            hyperpod_name=config.cluster_name, account=stack.account, region=stack.region
        )
        self.lifecycle_bucket = logged_bucket(
            self,
            "LifecycleScripts",
            access_logs=self.access_logs,
            log_prefix="lifecycle/",
            bucket_name=self.lifecycle_bucket_name,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            auto_delete_objects=True,
        )
        self.scripts = s3_deployment.BucketDeployment(
            self,
            "UploadScripts",
            sources=[s3_deployment.Source.asset(str(SCRIPTS_DIR))],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix=SCRIPTS_PREFIX,
        )
        self.execution_role = self._execution_role(eks_cluster)
        self.execution_role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadLifecycleScripts",
                actions=["s3:GetObject", "s3:ListBucket"],
                resources=[
                    self.lifecycle_bucket.bucket_arn,
                    self.lifecycle_bucket.arn_for_objects(f"{SCRIPTS_PREFIX}*"),
                ],
            )
        )
        self._acknowledge_execution_role()
        default_policy = self.execution_role.node.find_child("DefaultPolicy")
        for check_id in ("CKV_AWS_109", "CKV_AWS_111"):
            checkov_ack.acknowledge(
                default_policy,
                check_id,
                reason="ENI create/modify/delete for EKS-orchestrated HyperPod nodes and ECR's "
                "GetAuthorizationToken take no resource ARN before the ENI exists; the same grants "
                "are acknowledged for cdk-nag (AwsSolutions-IAM5) with the statement list",
            )
        self._acknowledge_bucket_deployment()
        security_group = eks_cluster.cluster_security_group_id
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=config.cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(
                    cluster_arn=eks_cluster.cluster_arn
                )
            ),
            node_recovery=config.node_recovery,
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[security_group],
                subnets=[subnet.subnet_id for subnet in private_subnets],
            ),
            instance_groups=[
                self._instance_group(group, on_create=config.lifecycle_script_on_create)
                for group in config.instance_groups
            ],
        )
        # The role's inline policy (ENI, ECR, lifecycle scripts) is a resource of its own: without the
        # dependency CloudFormation creates the cluster beside it, and on delete removes it while
        # HyperPod still tears down the nodes' network interfaces with the role.
        self.cluster.node.add_dependency(self.scripts, self.execution_role, *after)

    def _instance_group(
        self, group: InstanceGroupConfig, *, on_create: str
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.instance_count,
            execution_role=self.execution_role.role_arn,
            threads_per_core=group.threads_per_core,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                # A literal s3://sagemaker-... URI (not a token): the prefix rule is visible in the template.
                source_s3_uri=f"s3://{self.lifecycle_bucket_name}/{SCRIPTS_PREFIX}",
                on_create=on_create,
            ),
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_size_gb
                    )
                )
            ],
            on_start_deep_health_checks=list(group.deep_health_checks) or None,
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(labels=dict(group.labels))
            if group.labels
            else None,
        )

    def _execution_role(self, eks_cluster: eks.Cluster) -> iam.Role:
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=account_service_principal(self, "sagemaker.amazonaws.com", if_exists=True),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_POLICY)],
            description="HyperPod instance execution role",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="EksOrchestratedNetworking",
                actions=[
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DetachNetworkInterface",
                    "ec2:ModifyNetworkInterfaceAttribute",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                resources=["*"],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TagNetworkInterfaces",
                actions=["ec2:CreateTags"],
                # HyperPod's ENIs are created in this cluster's subnets, so in this account and region
                # (AWS's sample policy names every region and account: ec2:*:*).
                resources=[
                    f"arn:{cdk.Aws.PARTITION}:ec2:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:network-interface/*"
                ],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PullContainerImages",
                actions=[
                    "ecr:GetAuthorizationToken",
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                ],
                resources=["*"],
            )
        )
        # The Pod Identity agent on these nodes exchanges tokens of this cluster only; the action takes
        # the cluster's ARN (AWS's managed node policies grant it on every cluster).
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PodIdentityForNodeAgents",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[eks_cluster.cluster_arn],
            )
        )
        return role

    def _acknowledge_execution_role(self) -> None:
        acknowledge(
            self.execution_role,
            "AwsSolutions-IAM4",
            reason=(
                "AmazonSageMakerClusterInstanceRolePolicy is the AWS-defined contract for HyperPod instances"
            ),
            findings=[managed_policy(INSTANCE_POLICY)],
        )
        acknowledge(
            self.execution_role,
            "AwsSolutions-IAM5",
            reason=(
                "ENI Describe/Create calls for HyperPod nodes take no resource ARN before the ENI "
                "exists, ENI tags apply to ENIs HyperPod creates at run time, nodes pull images from "
                "ECR registries of several accounts (AWS's plugin and agent registries, the CDK asset "
                "repository, model-server images) and ecr:GetAuthorizationToken has no resource, and "
                "nodes read every script under the lifecycle/ prefix"
            ),
            findings=[
                "Resource::*",
                "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*",
                f"Resource::{arn_of(self.lifecycle_bucket)}/{SCRIPTS_PREFIX}*",
            ],
        )

    def _acknowledge_bucket_deployment(self) -> None:
        """The upload function is a CDK singleton at stack level; acknowledge its findings there."""
        stack = cdk.Stack.of(self)
        singleton = next(
            c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment")
        )
        reason = (
            "CDK's BucketDeployment copies the lifecycle scripts from the CDK asset bucket into the "
            "lifecycle bucket; "
            "its generated grants are object-level read on the asset bucket and read/write/delete on "
            "the target"
        )
        acknowledge(
            singleton,
            "AwsSolutions-IAM4",
            reason=reason,
            findings=[managed_policy("service-role/AWSLambdaBasicExecutionRole")],
        )
        assets = asset_bucket(stack)
        acknowledge(
            singleton,
            "AwsSolutions-IAM5",
            reason=reason,
            findings=[
                *(
                    f"Action::s3:{action}"
                    for action in ("GetObject*", "GetBucket*", "List*", "DeleteObject*", "Abort*")
                ),
                f"Resource::{arn_of(self.lifecycle_bucket)}/*",
                f"Resource::arn:{partition_of(stack)}:s3:::{assets}/*",
            ],
        )
        acknowledge(
            singleton,
            "AwsSolutions-L1",
            reason=(
                "the BucketDeployment function's runtime is pinned by aws-cdk-lib and moves with its upgrades"
            ),
        )
