"""Existing-cluster mode: the EKS cluster (and its HyperPod cluster) already exist; this stack only
imports them and gives CDK a way to run kubectl against the cluster.

It creates the kubectl handler (in the given private subnets, so it reaches a private endpoint) and an
EKS access entry granting the handler's role cluster-admin: an imported cluster knows
nothing of CDK's handler. No VPC, EKS cluster, node group or HyperPod cluster is created.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from cdk.config import DeploymentConfig, ExistingClusterConfig
from cdk.constructs.eks_cluster import acknowledge_kubectl_provider
from cdk.constructs.ipv4_check import Ipv4Check
from cdk.constructs.kubectl_layer import kubectl_layer
from cdk.constructs.network import import_zones


class ExistingClusterStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: DeploymentConfig,
        existing: ExistingClusterConfig,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=existing.vpc_id,
            # CDK wants one zone per subnet (or a divisor); the handler only needs the subnet IDs.
            availability_zones=import_zones(
                config.availability_zones,
                region=config.region,
                subnet_count=len(existing.private_subnet_ids),
            ),
            private_subnet_ids=list(existing.private_subnet_ids),
        )
        subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{index}", subnet_id)
            for index, subnet_id in enumerate(existing.private_subnet_ids)
        ]
        security_group_id = existing.cluster_security_group_id
        target = eks.Cluster.from_cluster_attributes(
            self,
            "Target",
            cluster_name=config.cluster_name,
            vpc=self.vpc,
            cluster_security_group_id=security_group_id,
        )
        # An imported cluster ignores kubectl_provider_options: build the provider and import again with it.
        self.kubectl_provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=target,
            kubectl_layer=kubectl_layer(self, "KubectlLayer", kubernetes_version=existing.kubernetes_version),
            private_subnets=subnets,
        )
        self.cluster = eks.Cluster.from_cluster_attributes(
            self,
            "Cluster",
            cluster_name=config.cluster_name,
            vpc=self.vpc,
            cluster_security_group_id=security_group_id,
            kubectl_provider=self.kubectl_provider,
        )
        assert existing.oidc_provider_arn is not None  # the config requires it in this mode
        self.oidc_provider = eks.OidcProviderNative.from_oidc_provider_arn(
            self, "OidcProvider", existing.oidc_provider_arn
        )
        self.hyperpod_cluster_arn = existing.hyperpod_cluster_arn
        handler = self.kubectl_provider.node.find_child("Handler")
        assert isinstance(handler, lambda_.Function)
        assert handler.role is not None
        # The platform and inference stacks depend on this one, so every kubectl call comes after it.
        self.access_entry = eks.CfnAccessEntry(
            self,
            "KubectlAccess",
            cluster_name=config.cluster_name,
            principal_arn=handler.role.role_arn,
            type="STANDARD",
            access_policies=[
                eks.CfnAccessEntry.AccessPolicyProperty(
                    policy_arn=f"arn:{cdk.Aws.PARTITION}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                    access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"),
                )
            ],
        )
        # An IPv6 cluster fails here, at the first kubectl call, rather than 10 minutes into the inference
        # stack's wait for a load balancer that never reaches its pods.
        ipv4 = Ipv4Check(self, "Ipv4Check", cluster=self.cluster)
        ipv4.manifest.node.add_dependency(self.access_entry)
        acknowledge_kubectl_provider(self.cluster)
