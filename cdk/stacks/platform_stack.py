"""The platform stack: dependency add-ons (cert-manager, metrics-server, S3 and FSx CSI), CloudWatch
observability (Container Insights, the CloudWatch agent), the Load Balancer Controller and the
HyperPod node dependencies (device plugins, health agent) — everything the gateway needs before it
is installed. In existing-cluster mode also vpc-cni (with network policy enforcement) unless the
cluster already runs it; add-ons the cluster already runs are left alone."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from cdk.config import DeploymentConfig
from cdk.constructs.cloudwatch_observability import CloudWatchObservability
from cdk.constructs.dependency_addons import DependencyAddons
from cdk.constructs.eks_cluster import vpc_cni_addon
from cdk.constructs.hyperpod_dependencies import HyperPodDependencies
from cdk.constructs.load_balancer_controller import LoadBalancerController
from cdk.stacks.cluster_handle import ClusterHandle
from igw.addon import pins


class PlatformStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: DeploymentConfig,
        cluster: ClusterHandle,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        installed = config.existing_cluster.installed_addons if config.existing_cluster else ()
        self.vpc_cni: eks.CfnAddon | None = None
        if config.existing_cluster is not None and pins.VPC_CNI_ADDON not in installed:
            self.vpc_cni = vpc_cni_addon(self, "VpcCni", cluster_name=cluster.cluster.cluster_name)
        self.dependency_addons = DependencyAddons(
            self,
            "DependencyAddons",
            cluster=cluster.cluster,
            identity=config.platform.identity,
            model_buckets=config.platform.model_buckets,
            oidc_provider=cluster.oidc_provider,
            skip=installed,
        )
        self.cloudwatch: CloudWatchObservability | None = None
        if pins.CLOUDWATCH_OBSERVABILITY_ADDON not in installed:
            self.cloudwatch = CloudWatchObservability(
                self,
                "CloudWatchObservability",
                cluster=cluster.cluster,
                identity=config.platform.identity,
                oidc_provider=cluster.oidc_provider,
                after=self.dependency_addons.pod_identity_agent,
            )
        self.load_balancer_controller = LoadBalancerController(
            self,
            "LoadBalancerController",
            cluster=cluster.cluster,
            vpc=cluster.vpc,
            identity=config.platform.identity,
            oidc_provider=cluster.oidc_provider,
        )
        # cert-manager's webhook must be up before the controller's chart (and later ours) are applied.
        cert_manager = self.dependency_addons.addons.get("cert-manager")
        if cert_manager is not None:
            self.load_balancer_controller.chart.node.add_dependency(cert_manager)
        if self.dependency_addons.pod_identity_agent is not None:
            self.load_balancer_controller.chart.node.add_dependency(self.dependency_addons.pod_identity_agent)
        self.hyperpod_dependencies = HyperPodDependencies(
            self,
            "HyperPodDependencies",
            cluster=cluster.cluster,
            config=config.platform.hyperpod_dependencies,
        )
