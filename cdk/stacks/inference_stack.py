"""The inference stack: the gateway and the InferenceGatewayConfig it serves.

By default our chart (``addon/chart``) is installed through Helm with the image built from
``gateway_src/Dockerfile``; with an endpoint, an ACM certificate on the load balancer's TLS listener and
a Route 53 record. With ``inference.addon.mode: awsManaged`` AWS's add-on is installed instead, with
the roles and bucket AWS documents.

Ordering: the stack depends on the platform stack (cert-manager and the Load Balancer Controller first);
inside it the chart or add-on (which brings the CRD) comes before the InferenceGatewayConfig.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from cdk.config import DeploymentConfig
from cdk.constructs.aws_inference_addon import AwsInferenceAddon
from cdk.constructs.gateway_config_manifest import GatewayConfig
from cdk.constructs.gateway_endpoint import GatewayCertificate, GatewayDnsRecord
from cdk.constructs.gateway_image import GatewayImage
from cdk.constructs.igw_chart import RELEASE, IgwChart
from cdk.stacks.cluster_handle import ClusterHandle
from igw.addon import pins


class InferenceStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id_: str, *, config: DeploymentConfig, cluster: ClusterHandle, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        installed: Construct
        self.chart: IgwChart | None = None
        self.aws_addon: AwsInferenceAddon | None = None
        if config.addon.mode == "awsManaged":
            if cluster.hyperpod_cluster_arn is None:
                raise ValueError("AWS's add-on needs the HyperPod cluster ARN")
            self.aws_addon = AwsInferenceAddon(
                self,
                "AwsInferenceAddon",
                cluster=cluster.cluster,
                oidc_provider=cluster.oidc_provider,
                config=config.addon,
                hyperpod_cluster_arn=cluster.hyperpod_cluster_arn,
            )
            installed = self.aws_addon.addon
            cdk.CfnOutput(self, "GatewayControllerRoleArn", value=self.aws_addon.gateway_role.role_arn)
        else:
            certificate = (
                GatewayCertificate(self, "Certificate", config=config.endpoint) if config.endpoint else None
            )
            self.image = GatewayImage(self, "GatewayImage", config=config.image)
            self.chart = IgwChart(
                self,
                "Gateway",
                cluster=cluster.cluster,
                config=config.addon,
                gateway_config=config.gateway_config,
                image=self.image,
                certificate_arn=certificate.certificate.certificate_arn if certificate else None,
            )
            installed = self.chart.chart
            if certificate is not None and config.endpoint is not None:
                self.dns = GatewayDnsRecord(
                    self,
                    "Dns",
                    cluster=cluster.cluster,
                    config=config.endpoint,
                    zone=certificate.zone,
                    service_name=RELEASE,
                    namespace=pins.ADDON_NAMESPACE,
                    after=self.chart.chart,
                )
                cdk.CfnOutput(self, "GatewayUrl", value=f"https://{config.endpoint.fqdn}")
        self.gateway_config = GatewayConfig(
            self, "GatewayConfig", cluster=cluster.cluster, config=config.gateway_config
        )
        self.gateway_config.node.add_dependency(installed)
