"""The EKS control plane (``aws_eks_v2``, native ``AWS::EKS::Cluster``) and its system node group.

HyperPod needs authentication mode API or API_AND_CONFIG_MAP; aws_eks_v2 always writes API, so the
other mode is set on the L1 resource. The API endpoint is private by default; the kubectl handler runs
in the private subnets so it can reach it. Secrets are envelope-encrypted with a rotating KMS key and
every control-plane log type is on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from constructs import Construct

from cdk.config import ClusterConfig
from cdk.constructs.kubectl_layer import kubectl_layer
from cdk.constructs.nag_ack import acknowledge, arn_of, managed_policy
from cdk.constructs.removal import removal_policy
from cdk.constructs.typing_fixes import as_icluster
from igw.addon import addon_version, pins

SYSTEM_POOL_LABEL = "igw.dev/pool"
VPC_CNI_VALUES = {"enableNetworkPolicy": "true"}
"""vpc-cni configuration: the network policy agent on (the add-on's schema takes the string "true")."""
ALL_LOG_TYPES = (
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
)


class EksCluster(Construct):
    """Exposes ``cluster`` (an ``aws_eks_v2.Cluster`` with a kubectl provider) and ``nodegroup``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: ClusterConfig,
        cluster_name: str,
        vpc: ec2.IVpc,
        private_subnets: Sequence[ec2.ISubnet],
    ) -> None:
        super().__init__(scope, id_)
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"{cluster_name} secrets",
            removal_policy=removal_policy(self),
        )
        endpoint = (
            eks.EndpointAccess.PRIVATE
            if config.endpoint_access == "private"
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*config.public_access_cidrs)
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(config.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(private_subnets))],
            endpoint_access=endpoint,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            cluster_logging=list(ALL_LOG_TYPES),
            secrets_encryption_key=self.secrets_key,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(
                    self, "KubectlLayer", kubernetes_version=config.kubernetes_version
                ),
                private_subnets=list(private_subnets),
            ),
        )
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, eks.CfnCluster)
        cfn_cluster.add_property_override("AccessConfig.AuthenticationMode", config.authentication_mode)

        # HyperPod nodes need the VPC CNI at 1.18.3 or newer: manage it instead of trusting the bootstrap
        # one. Its network policy agent enforces the NetworkPolicies the gateway chart renders.
        self.vpc_cni = vpc_cni_addon(self, "VpcCni", cluster_name=self.cluster.cluster_name)
        self.nodegroup = self.cluster.add_nodegroup_capacity(
            "System",
            instance_types=[ec2.InstanceType(config.system_instance_type)],
            min_size=config.system_min_size,
            desired_size=config.system_min_size,
            max_size=config.system_max_size,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            subnets=ec2.SubnetSelection(subnets=list(private_subnets)),
            labels={SYSTEM_POOL_LABEL: "system"},
        )
        for index, arn in enumerate(config.admin_role_arns):
            self.cluster.grant_access(
                f"Admin{index}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
        self._acknowledge()

    def _acknowledge(self) -> None:
        acknowledge_kubectl_provider(as_icluster(self.cluster))
        acknowledge(
            self.nodegroup.role,
            "AwsSolutions-IAM4",
            reason="EKS managed nodes need AmazonEKSWorkerNodePolicy, AmazonEKS_CNI_Policy and "
            "AmazonEC2ContainerRegistryReadOnly; AWS maintains them as the node contract",
            findings=[
                managed_policy("AmazonEKSWorkerNodePolicy"),
                managed_policy("AmazonEKS_CNI_Policy"),
                managed_policy("AmazonEC2ContainerRegistryReadOnly"),
            ],
        )
        acknowledge(
            self.cluster.role,
            "AwsSolutions-IAM4",
            reason=(
                "the EKS service role must carry AmazonEKSClusterPolicy, the AWS-defined "
                "control-plane contract"
            ),
            findings=[managed_policy("AmazonEKSClusterPolicy")],
        )


def vpc_cni_addon(scope: Construct, id_: str, *, cluster_name: str) -> eks.CfnAddon:
    """The pinned vpc-cni add-on with its network policy agent on."""
    if not addon_version.at_least(pins.VPC_CNI_VERSION, pins.VPC_CNI_MINIMUM_VERSION):
        raise ValueError(f"vpc-cni {pins.VPC_CNI_VERSION} is below HyperPod's {pins.VPC_CNI_MINIMUM_VERSION}")
    return eks.CfnAddon(
        scope,
        id_,
        cluster_name=cluster_name,
        addon_name=pins.VPC_CNI_ADDON,
        addon_version=pins.VPC_CNI_VERSION,
        resolve_conflicts="OVERWRITE",
        configuration_values=json.dumps(VPC_CNI_VALUES, sort_keys=True),
    )


def acknowledge_kubectl_provider(cluster: eks.ICluster) -> None:
    """cdk-nag findings of aws-cdk-lib's kubectl provider (its handler and framework functions)."""
    provider = cluster.kubectl_provider
    if provider is not None:
        lambda_basics = (
            "service-role/AWSLambdaBasicExecutionRole",
            "service-role/AWSLambdaVPCAccessExecutionRole",
        )
        handler_role = provider.node.find_child("Handler").node.find_child("ServiceRole")
        acknowledge(
            handler_role,
            "AwsSolutions-IAM4",
            reason=(
                "CDK's kubectl handler (aws-eks-v2) logs, runs in the VPC and pulls its "
                "kubectl image with these "
                "AWS managed policies; the provider is aws-cdk-lib's, not ours to reshape"
            ),
            findings=[
                *(managed_policy(name) for name in lambda_basics),
                managed_policy("AmazonEC2ContainerRegistryReadOnly"),
                _ecr_public_finding(cluster),
            ],
        )
        acknowledge(
            provider.node.find_child("Handler"),
            "AwsSolutions-L1",
            reason=(
                "the kubectl handler's Python runtime is chosen by aws-cdk-lib for its "
                "kubectl layer and moves "
                "with aws-cdk-lib upgrades"
            ),
        )
        on_event = provider.node.find_child("Provider").node.find_child("framework-onEvent")
        acknowledge(
            on_event.node.find_child("ServiceRole"),
            "AwsSolutions-IAM4",
            reason=(
                "the custom-resource framework function of CDK's kubectl provider logs and "
                "runs in the VPC "
                "with these AWS managed policies"
            ),
            findings=[managed_policy(name) for name in lambda_basics],
        )
        acknowledge(
            on_event.node.find_child("ServiceRole"),
            "AwsSolutions-IAM5",
            reason=(
                "the provider framework may invoke every version of its own handler function (ARN suffix :*)"
            ),
            findings=[f"Resource::{arn_of(provider.node.find_child('Handler'))}:*"],
        )


def _ecr_public_finding(cluster: eks.ICluster) -> str:
    """The kubectl handler's conditional ECR-public policy, as cdk-nag renders it."""
    stack = cdk.Stack.of(cluster)
    provider = cluster.kubectl_provider
    assert provider is not None
    handler = provider.node.find_child("Handler")
    condition = next(child for child in handler.node.children if isinstance(child, cdk.CfnCondition))
    name = stack.get_logical_id(condition)
    body = (
        '{"Fn::If":["' + name + '",{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},'
        '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
    )
    return f"Policy::{body}"
