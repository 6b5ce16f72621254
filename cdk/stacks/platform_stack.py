"""The platform stack: dependency add-ons (cert-manager, metrics-server, S3 and FSx CSI) and the Load
Balancer Controller — everything the inference add-on needs before it is installed."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from cdk.config import DeploymentConfig
from cdk.constructs.dependency_addons import DependencyAddons
from cdk.constructs.load_balancer_controller import LoadBalancerController
from cdk.stacks.cluster_stack import ClusterStack


class PlatformStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: DeploymentConfig,
        cluster: ClusterStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.dependency_addons = DependencyAddons(
            self,
            "DependencyAddons",
            cluster=cluster.cluster,
            identity=config.platform.identity,
            model_buckets=config.platform.model_buckets,
            oidc_provider=cluster.oidc_provider,
        )
        self.load_balancer_controller = LoadBalancerController(
            self,
            "LoadBalancerController",
            cluster=cluster.cluster,
            vpc=cluster.network.vpc,
            identity=config.platform.identity,
            oidc_provider=cluster.oidc_provider,
        )
        # cert-manager's webhook must be up before the controller's chart (and later ours) are applied.
        self.load_balancer_controller.chart.node.add_dependency(self.dependency_addons.addons["cert-manager"])
        if self.dependency_addons.pod_identity_agent is not None:
            self.load_balancer_controller.chart.node.add_dependency(self.dependency_addons.pod_identity_agent)
