"""The inference stack: the gateway's IAM role, our add-on, and the InferenceGatewayConfig.

Ordering: the stack depends on the platform stack (cert-manager and the Load Balancer Controller first);
inside it the add-on (which installs the CRD) comes before the InferenceGatewayConfig.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from cdk.config import DeploymentConfig
from cdk.constructs.gateway_config_manifest import GatewayConfig
from cdk.constructs.gateway_role import GatewayRole
from cdk.constructs.inference_addon import InferenceAddon
from cdk.stacks.cluster_stack import ClusterStack


class InferenceStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id_: str, *, config: DeploymentConfig, cluster: ClusterStack, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        self.gateway_role = GatewayRole(
            self,
            "GatewayRole",
            cluster=cluster.cluster,
            cluster_name=config.cluster_name,
            identity=config.platform.identity,
            oidc_provider=cluster.oidc_provider,
        )
        self.addon = InferenceAddon(
            self,
            "InferenceAddon",
            cluster=cluster.cluster,
            config=config.addon,
            identity=config.platform.identity,
            gateway_role=self.gateway_role,
        )
        self.gateway_config = GatewayConfig(
            self, "GatewayConfig", cluster=cluster.cluster, config=config.gateway_config
        )
        self.gateway_config.node.add_dependency(self.addon.resource)
        cdk.CfnOutput(self, "GatewayRoleArn", value=self.gateway_role.role.role_arn)
