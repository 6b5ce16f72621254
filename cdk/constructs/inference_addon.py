"""Our add-on: the EKS-managed ``CfnAddon`` (default) or the chart installed through Helm (self-managed).

Managed: ``configurationValues`` are validated at synth against the add-on's configuration schema
(draft-06, what EKS enforces) and the InferenceGatewayConfig rules, *before* any token (a role ARN) is
added, so a mistake fails ``cdk synth`` rather than ``cdk deploy``. Self-managed: the chart in
``addon/chart`` ships as an asset and Helm validates the same values against ``values.schema.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from cdk.config import REPO_ROOT, AddonConfig, IdentityMode
from cdk.constructs.gateway_role import GatewayRole
from cdk.constructs.nag_ack import acknowledge, asset_bucket
from cdk.constructs.typing_fixes import as_icluster
from igw.addon import addon_version, configuration, pins, schemas


class InferenceAddon(Construct):
    """Exposes ``resource`` (the ``CfnAddon`` or ``HelmChart``) so the stack can order things after it."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        config: AddonConfig,
        identity: IdentityMode,
        gateway_role: GatewayRole,
    ) -> None:
        super().__init__(scope, id_)
        if not addon_version.at_least(config.version, pins.ADDON_MINIMUM_VERSION):
            raise ValueError(f"add-on version {config.version} is below {pins.ADDON_MINIMUM_VERSION}")
        configuration.validated(config.configuration_values)
        values = _with_identity(
            config.configuration_values, identity=identity, role_arn=gateway_role.role.role_arn
        )
        self.resource: Construct
        if config.mode == "managed":
            associations = None
            if identity == "podIdentity":
                associations = [
                    eks.CfnAddon.PodIdentityAssociationProperty(
                        role_arn=gateway_role.role.role_arn, service_account=pins.GATEWAY_SERVICE_ACCOUNT
                    )
                ]
            self.resource = eks.CfnAddon(
                self,
                "Addon",
                cluster_name=cluster.cluster_name,
                addon_name=pins.ADDON_NAME,
                addon_version=config.version,
                resolve_conflicts=config.conflict_policy,
                configuration_values=cdk.Stack.of(self).to_json_string(values) if values else None,
                pod_identity_associations=associations,
                namespace_config=eks.CfnAddon.NamespaceConfigProperty(namespace=pins.ADDON_NAMESPACE),
            )
        else:
            chart = s3_assets.Asset(self, "ChartAsset", path=str(REPO_ROOT / schemas.CHART_DIR))
            _acknowledge_chart_asset_read(cluster)
            self.resource = eks.HelmChart(
                self,
                "Chart",
                cluster=as_icluster(cluster),
                chart_asset=chart,
                release=pins.CHART_NAME,
                namespace=pins.ADDON_NAMESPACE,
                create_namespace=True,
                wait=True,
                timeout=cdk.Duration.minutes(10),
                values=values,
            )
            if identity == "podIdentity":
                association = eks.CfnPodIdentityAssociation(
                    self,
                    "GatewayIdentity",
                    cluster_name=cluster.cluster_name,
                    namespace=pins.ADDON_NAMESPACE,
                    service_account=pins.GATEWAY_SERVICE_ACCOUNT,
                    role_arn=gateway_role.role.role_arn,
                )
                self.resource.node.add_dependency(association)


def _with_identity(values: Mapping[str, Any], *, identity: IdentityMode, role_arn: str) -> dict[str, Any]:
    """IRSA: annotate the gateway's service account with the role (Pod Identity needs no values)."""
    out: dict[str, Any] = json.loads(json.dumps(values))
    if identity == "irsa":
        out.setdefault("serviceAccount", {})["roleArn"] = role_arn
    return out


def _acknowledge_chart_asset_read(cluster: eks.Cluster) -> None:
    """Installing a chart from an asset grants the kubectl handler read access to the CDK asset bucket."""
    provider = cluster.kubectl_provider
    if provider is None:
        return
    stack = cdk.Stack.of(cluster)
    assets = asset_bucket(stack)
    acknowledge(
        provider.node.find_child("Handler").node.find_child("ServiceRole"),
        "AwsSolutions-IAM5",
        reason="the kubectl handler downloads our chart from the CDK asset bucket; CDK's asset grant is "
        "object read on that bucket only",
        findings=[
            *(f"Action::s3:{action}" for action in ("GetBucket*", "GetObject*", "List*")),
            f"Resource::arn:aws:s3:::{assets}/*",
        ],
    )
