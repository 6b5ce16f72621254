"""Our gateway on the cluster (the default): the chart in ``addon/chart`` installed through Helm under
our release name, running the image built from ``gateway_src/Dockerfile``.

In the chart's default ``mode: operator`` the chart installs the InferenceGatewayConfig CRD and
``igw operator`` (image: the built asset, which is also the image of the gateways it creates) with its
RBAC, and nothing per configuration: the inference stack applies the deployment config's
InferenceGatewayConfig and the operator brings up that object's gateway. With ``mode: gateway`` (an
explicit choice in ``inference.addon.configurationValues``) the chart runs one gateway itself, serving
the deployment config's InferenceGatewayConfig from its ConfigMap, and with an endpoint the ACM
certificate goes on the chart's Service.

The gateway calls no AWS API, so no gateway service account gets an IAM role. The operator does: with
auto-issued TLS on (``operator.autoTls``, the chart's default) it imports certificates into ACM, so
its service account gets the role of :mod:`cdk.constructs.operator_role` (Pod Identity association,
or ``operator.roleArn`` for IRSA) before the chart starts it, unless the values name a role already.

The values are validated at synth against the chart's own configuration schema with placeholders
standing in for values CloudFormation only knows at deploy time (image URI, certificate ARN), so a
mistake fails ``cdk synth`` rather than a Helm install ten minutes into ``cdk deploy``.
"""

from __future__ import annotations

import json
from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from cdk.config import REPO_ROOT, AddonConfig, GatewayConfigManifest, IdentityMode
from cdk.constructs.gateway_endpoint import PLACEHOLDER_CERTIFICATE
from cdk.constructs.gateway_image import GatewayImage
from cdk.constructs.nag_ack import acknowledge, asset_bucket, partition_of
from cdk.constructs.operator_role import OperatorRole, operator_service_account, wants_operator_role
from igw.addon import configuration, pins, schemas

PLACEHOLDER_REPOSITORY: Final = "111111111111.dkr.ecr.us-west-2.amazonaws.com/placeholder"
PLACEHOLDER_ROLE: Final = "arn:aws:iam::111111111111:role/placeholder"
RELEASE: Final = pins.CHART_NAME
"""Helm release name; with no ``fullnameOverride`` it is also the gateway Service's name (``mode:
gateway``)."""


def chart_values(
    config: AddonConfig,
    *,
    gateway_config: GatewayConfigManifest,
    repository: str,
    tag: str,
    certificate_arn: str | None,
    operator_role_arn: str | None = None,
    region: str | None = None,
) -> dict[str, Any]:
    """The chart values for this deployment (the user's values win where they set the same key).

    ``mode`` is always explicit; both modes send the gateway pods' EMF to the CloudWatch agent. Only
    ``mode: gateway`` gets the served configuration and the certificate: in operator mode both
    travel in the applied InferenceGatewayConfig instead, ``operator_role_arn`` (IRSA) annotates
    the operator's service account and ``region`` is the operator's AWS region (its ACM calls).
    """
    values: dict[str, Any] = json.loads(json.dumps(dict(config.configuration_values)))
    values["mode"] = config.chart_mode
    image = values.setdefault("image", {})
    image.setdefault("repository", repository)
    image.setdefault("tag", tag)
    gateway = values.setdefault("gateway", {})
    # The platform stack's CloudWatch agent listens for EMF: the gateway pods' tier-1 metrics go there
    # (in operator mode the chart hands this to the operator, which renders it into every data plane).
    gateway.setdefault("cloudWatch", {}).setdefault("enabled", True)
    if config.chart_mode == "operator":
        operator = values.setdefault("operator", {})
        if operator_role_arn is not None:
            operator.setdefault("roleArn", operator_role_arn)
        # ACM of the stack's region (the load balancers'): EKS Pod Identity injects no region, and the
        # operator's NetworkPolicy keeps it from the instance metadata service the SDK falls back on.
        if region is not None:
            operator.setdefault("awsRegion", region)
        return values
    gateway.setdefault(
        "config",
        {
            "name": gateway_config.name,
            "namespace": gateway_config.namespace,
            "spec": json.loads(json.dumps(gateway_config.spec)),
        },
    )
    if certificate_arn is not None:
        service = values.setdefault("service", {})
        service.setdefault("tls", {})["certificateArn"] = certificate_arn
    return values


class IgwChart(Construct):
    """Exposes ``chart`` (the ``HelmChart``), ``image`` and ``values`` (as sent to Helm)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        config: AddonConfig,
        gateway_config: GatewayConfigManifest,
        image: GatewayImage,
        certificate_arn: str | None,
        identity: IdentityMode,
        oidc_provider: iam.IOidcProvider | None,
    ) -> None:
        super().__init__(scope, id_)
        self.operator_role: OperatorRole | None = None
        if wants_operator_role(config.configuration_values):
            self.operator_role = OperatorRole(
                self,
                "OperatorRole",
                cluster=cluster,
                identity=identity,
                oidc_provider=oidc_provider,
                service_account=operator_service_account(config.configuration_values, release=RELEASE),
            )
        irsa_role = self.operator_role is not None and identity == "irsa"
        stack_region = cdk.Stack.of(self).region
        region = None if cdk.Token.is_unresolved(stack_region) else stack_region
        configuration.validated(
            chart_values(
                config,
                gateway_config=gateway_config,
                repository=PLACEHOLDER_REPOSITORY,
                tag=pins.APP_VERSION,
                certificate_arn=PLACEHOLDER_CERTIFICATE if certificate_arn is not None else None,
                operator_role_arn=PLACEHOLDER_ROLE if irsa_role else None,
                region=region,
            )
        )
        self.image = image
        self.values = chart_values(
            config,
            gateway_config=gateway_config,
            repository=image.repository,
            tag=image.tag,
            certificate_arn=certificate_arn,
            operator_role_arn=self.operator_role.role.role.role_arn
            if self.operator_role is not None and irsa_role
            else None,
            region=region,
        )
        chart_asset = s3_assets.Asset(self, "ChartAsset", path=str(REPO_ROOT / schemas.CHART_DIR))
        _acknowledge_chart_asset_read(cluster)
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            chart_asset=chart_asset,
            release=RELEASE,
            namespace=pins.ADDON_NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=cdk.Duration.minutes(10),
            values=self.values,
        )
        if self.operator_role is not None:
            # The role, its policy and (Pod Identity) the association exist before the operator starts.
            self.chart.node.add_dependency(self.operator_role)


def _acknowledge_chart_asset_read(cluster: eks.ICluster) -> None:
    """Installing a chart from an asset grants the kubectl handler read access to the CDK asset bucket."""
    provider = cluster.kubectl_provider
    if provider is None:
        return
    handler = provider.node.try_find_child("Handler")
    if handler is None:
        return
    stack = cdk.Stack.of(provider)
    acknowledge(
        handler.node.find_child("ServiceRole"),
        "AwsSolutions-IAM5",
        reason="the kubectl handler downloads our chart from the CDK asset bucket; CDK's asset grant is "
        "object read on that bucket only",
        findings=[
            *(f"Action::s3:{action}" for action in ("GetBucket*", "GetObject*", "List*")),
            f"Resource::arn:{partition_of(stack)}:s3:::{asset_bucket(stack)}/*",
        ],
    )
