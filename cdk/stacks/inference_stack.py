"""The inference stack: the gateway and the InferenceGatewayConfig it serves.

By default our chart (``addon/chart``) is installed through Helm in its operator mode with the image
built from ``gateway_src/Dockerfile``; the deployment config's InferenceGatewayConfig is applied after
it and the operator turns that object into its gateway (Deployment, Service ``<name>-gateway`` in the
object's namespace, …). With an endpoint, the ACM certificate goes into the object's
``spec.tls.acmArn`` (the operator's Service gets the TLS 1.3 listener) and a Route 53 record points at
the load balancer of that Service. With the chart's ``mode: gateway`` the chart runs the gateway
itself (Service ``inference-gateway`` in the add-on namespace, certificate in the chart values). With
``inference.addon.mode: awsManaged`` AWS's add-on is installed instead, with the roles and bucket AWS
documents.

Ordering: the stack depends on the platform stack (cert-manager and the Load Balancer Controller first);
inside it the chart or add-on (which brings the CRD) and the namespaces the objects go into
(``cdk/constructs/namespaces.py``: created when missing, kept when the stack goes) come before the
InferenceGatewayConfig, and the record's host-name lookup after both.

With our chart, a CloudWatch dashboard and per-model/per-pool alarms over the metrics the gateway
emits as EMF (``cdk/constructs/metric_dashboards.py``).

With ``inference.globalHeartbeatToken``, the External Secrets Operator and an ExternalSecret syncing the
global router's Redis AUTH token into a Kubernetes Secret (``cdk/constructs/external_secret.py``),
applied before the InferenceGatewayConfig so the Secret is on its way when the operator starts gateways.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from cdk.config import DeploymentConfig, heartbeat_cluster_name
from cdk.constructs.aws_inference_addon import AwsInferenceAddon
from cdk.constructs.external_secret import SyncedSecret
from cdk.constructs.gateway_config_manifest import GatewayConfig
from cdk.constructs.gateway_endpoint import GatewayCertificate, GatewayDnsRecord
from cdk.constructs.gateway_image import GatewayImage
from cdk.constructs.igw_chart import RELEASE, IgwChart
from cdk.constructs.metric_dashboards import GatewayMetricsDashboard
from cdk.constructs.namespaces import Namespaces
from cdk.stacks.cluster_handle import ClusterHandle
from igw.addon import pins
from igw.gateway.emf_metrics import HEARTBEAT_EXTENSION
from igw.gateway.heartbeat import HeartbeatSettings
from igw.operator.dataplane import base_name


class InferenceStack(cdk.Stack):
    def __init__(
        self, scope: Construct, id_: str, *, config: DeploymentConfig, cluster: ClusterHandle, **kwargs: Any
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        installed: Construct
        self.chart: IgwChart | None = None
        self.aws_addon: AwsInferenceAddon | None = None
        certificate: GatewayCertificate | None = None
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
            if config.endpoint is not None:
                certificate = GatewayCertificate(self, "Certificate", config=config.endpoint)
            self.image = GatewayImage(self, "GatewayImage", config=config.image)
            self.chart = IgwChart(
                self,
                "Gateway",
                cluster=cluster.cluster,
                config=config.addon,
                gateway_config=config.gateway_config,
                image=self.image,
                certificate_arn=certificate.certificate.certificate_arn if certificate else None,
                identity=config.platform.identity,
                oidc_provider=cluster.oidc_provider,
            )
            installed = self.chart.chart
            schedulers = config.gateway_config.spec.get("schedulers") or []
            heartbeat = (config.gateway_config.spec.get("extensions") or {}).get(HEARTBEAT_EXTENSION)
            self.metrics_dashboard = GatewayMetricsDashboard(
                self,
                "GatewayMetrics",
                # Dashboard names are global to the account: the region keeps the clusters of one
                # name in two regions (tier-1 clusters of a global router) from sharing one.
                dashboard_name=f"{config.cluster_name}-{config.region}-inference-gateway",
                models=sorted({s["modelName"] for s in schedulers if "modelName" in s}),
                pools=sorted({s["name"] for s in schedulers if "name" in s}),
                # the cluster the heartbeats name; without heartbeats nothing is written (no data,
                # not a breach), and the stack's cluster (as a DNS label) is the name a heartbeat
                # added later takes
                heartbeat_cluster=str(heartbeat["cluster"])
                if heartbeat
                else heartbeat_cluster_name(config.cluster_name),
                # the gateway's own reading of the extension: its prune cadence sizes the alarm's period
                heartbeat_prune_every_s=HeartbeatSettings.from_mapping(heartbeat).prune_every_s
                if heartbeat
                else None,
            )
        operator_mode = self.chart is not None and config.addon.chart_mode == "operator"
        token = config.global_heartbeat_token
        self.namespaces = Namespaces(
            self,
            "Namespaces",
            cluster=cluster.cluster,
            names=[config.gateway_config.namespace, *([token.namespace] if token is not None else [])],
        )
        self.gateway_config = GatewayConfig(
            self,
            "GatewayConfig",
            cluster=cluster.cluster,
            config=config.gateway_config,
            acm_arn=certificate.certificate.certificate_arn if certificate and operator_mode else None,
        )
        self.gateway_config.node.add_dependency(installed)
        if self.namespaces.manifest is not None:
            self.gateway_config.node.add_dependency(self.namespaces.manifest)
        self.heartbeat_token: SyncedSecret | None = None
        if config.global_heartbeat_token is not None:
            self.heartbeat_token = SyncedSecret(
                self,
                "GlobalHeartbeatToken",
                cluster=cluster.cluster,
                identity=config.platform.identity,
                oidc_provider=cluster.oidc_provider,
                config=config.global_heartbeat_token,
            )
            self.gateway_config.node.add_dependency(self.heartbeat_token.manifest)
            if self.namespaces.manifest is not None:
                self.heartbeat_token.manifest.node.add_dependency(self.namespaces.manifest)
        if certificate is not None and config.endpoint is not None:
            # The Service whose load balancer the record names: the operator's for the applied object,
            # or the chart's own in gateway mode.
            if operator_mode:
                service_name = base_name(config.gateway_config.name)
                namespace = config.gateway_config.namespace
            else:
                service_name, namespace = RELEASE, pins.ADDON_NAMESPACE
            self.dns = GatewayDnsRecord(
                self,
                "Dns",
                cluster=cluster.cluster,
                config=config.endpoint,
                zone=certificate.zone,
                service_name=service_name,
                namespace=namespace,
                after=[installed, self.gateway_config.manifest],
            )
            cdk.CfnOutput(self, "GatewayUrl", value=f"https://{config.endpoint.fqdn}")
