"""The cluster stack: the EKS control plane and system nodes, and the HyperPod cluster it orchestrates."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from cdk.config import DeploymentConfig
from cdk.constructs.eks_cluster import EksCluster
from cdk.constructs.hyperpod_cluster import HyperPodCluster
from cdk.constructs.network import Network
from cdk.constructs.typing_fixes import as_icluster


class ClusterStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id_: str, *, config: DeploymentConfig, network: Network | None, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        # An imported VPC creates no resource, and CloudFormation rejects an empty stack: import it here.
        self.network = network or Network(
            self,
            "Network",
            config=config.network,
            availability_zones=config.availability_zones,
            cluster_name=config.cluster_name,
        )
        network = self.network
        self.eks = EksCluster(
            self,
            "Eks",
            config=config.cluster,
            cluster_name=config.cluster_name,
            vpc=network.vpc,
            private_subnets=network.private_subnets,
        )
        self.eks_cluster = self.eks.cluster
        self.cluster = as_icluster(self.eks.cluster)
        self.vpc = network.vpc
        # Always: the S3 and FSx CSI drivers' roles are IRSA roles whatever the workload identity mode.
        self.oidc_provider = eks.OidcProviderNative(
            self, "OidcProvider", url=self.eks_cluster.cluster_open_id_connect_issuer_url
        )
        if config.hyperpod is None:
            raise ValueError("the cluster stack needs the hyperpod section (existing clusters use their own)")
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            config=config.hyperpod,
            eks_cluster=self.eks_cluster,
            private_subnets=network.private_subnets,
            after=[self.eks.vpc_cni],
        )
        self.hyperpod_cluster_arn: str | None = self.hyperpod.cluster.attr_cluster_arn
        self._export_whatever_this_config_imports()
        cdk.CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        cdk.CfnOutput(self, "HyperPodClusterArn", value=self.hyperpod.cluster.attr_cluster_arn)

    def _export_whatever_this_config_imports(self) -> None:
        """Export every value the platform and inference stacks import in any config, in every config.

        CDK exports a value only while some consumer imports it, and CloudFormation refuses to delete an
        export still imported. The producer deploys first, so a config change that drops the last
        consumer of a value (``inference.addon.mode: awsManaged`` -> ``igw`` stops importing the
        HyperPod cluster ARN) would fail this stack's update with "Export ... cannot be deleted as it is
        in use by <prefix>Inference". Exported always, under the names CDK generates for the imports,
        the set never shrinks."""
        provider = self.cluster.kubectl_provider
        assert provider is not None  # EksCluster always builds its kubectl handler
        for value in (
            self.cluster.cluster_name,
            provider.service_token,
            self.oidc_provider.oidc_provider_arn,
            self.hyperpod.cluster.attr_cluster_arn,
        ):
            self.export_value(value)
