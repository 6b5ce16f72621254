"""One Secrets Manager secret synced into a Kubernetes Secret by the External Secrets Operator.

Used for the global router's Redis AUTH token (``inference.globalHeartbeatToken``): tier-1 gateways read
it from an environment variable filled from a Kubernetes Secret, and the token lives in the global
router stack's Secrets Manager secret (any region). The construct installs the operator from its
official Helm chart (:data:`igw.addon.pins.EXTERNAL_SECRETS_CHART_VERSION`, CRDs included) and gives the
controller's service account a role (Pod Identity or IRSA, as the deployment's identity mode says) that
may only read and describe that one secret (and decrypt with its customer-managed key, through Secrets
Manager only). After the chart it applies a namespaced ``SecretStore`` for Secrets Manager in the
secret's region, authenticating as the controller itself (no ``auth`` block: the AWS SDK's default
credential chain, which Pod Identity and IRSA feed), and an ``ExternalSecret`` writing the secret's
string value into ``secret_name``/``key``, read again every ``refresh_interval``.
"""

from __future__ import annotations

from typing import Any, Final

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import GlobalHeartbeatTokenConfig, IdentityMode, partition_of_region
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import pins
from igw.operator.placement import OFF_HYPERPOD_NODES

RELEASE: Final = "external-secrets"
STORE_NAME: Final = "igw-secretsmanager"
"""The namespaced SecretStore the ExternalSecret reads through."""
SECRET_ACTIONS: Final = ("secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret")

HIGHLY_AVAILABLE: Final[dict[str, Any]] = {
    "replicaCount": 2,
    "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "matchLabelKeys": ["pod-template-hash"],
        }
    ],
}
"""The operator's controller and its webhook: two replicas, a disruption budget and a spread over
nodes (the chart's defaults are one replica and no budget). Why: the chart registers its validating
webhook with ``failurePolicy: Fail``, so while its only webhook pod is away (a node drain, a node
lost) every create or update of a SecretStore or ExternalSecret - this stack's next deployment
included - is refused; and a single controller stops the token's refresh until it is rescheduled.
The controller runs with leader election, so its second replica only stands by. The cert controller
stays single: it renews the webhook's certificate every few minutes at most, and missing a turn
breaks nothing."""


def via_secrets_manager(region: str) -> str:
    """The ``kms:ViaService`` value of Secrets Manager's calls to KMS in ``region``."""
    suffix = "amazonaws.com.cn" if partition_of_region(region) == "aws-cn" else "amazonaws.com"
    return f"secretsmanager.{region}.{suffix}"


def secret_store(config: GlobalHeartbeatTokenConfig) -> dict[str, Any]:
    """The SecretStore: Secrets Manager in the secret's region, with the controller's own credentials."""
    return {
        "apiVersion": pins.EXTERNAL_SECRETS_API_VERSION,
        "kind": "SecretStore",
        "metadata": {"name": STORE_NAME, "namespace": config.namespace},
        "spec": {"provider": {"aws": {"service": "SecretsManager", "region": config.region}}},
    }


def external_secret(config: GlobalHeartbeatTokenConfig) -> dict[str, Any]:
    """The ExternalSecret: the secret's whole string value as ``key`` of the Secret ``secret_name``."""
    return {
        "apiVersion": pins.EXTERNAL_SECRETS_API_VERSION,
        "kind": "ExternalSecret",
        "metadata": {"name": config.secret_name, "namespace": config.namespace},
        "spec": {
            "refreshInterval": config.refresh_interval,
            "secretStoreRef": {"kind": "SecretStore", "name": STORE_NAME},
            "target": {"name": config.secret_name, "creationPolicy": "Owner"},
            "data": [{"secretKey": config.key, "remoteRef": {"key": config.secret_arn}}],
        },
    }


class SyncedSecret(Construct):
    """Exposes ``role`` (the controller's :class:`WorkloadRole`), ``chart`` (the operator's
    ``HelmChart``) and ``manifest`` (the SecretStore and ExternalSecret, applied after the chart)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        identity: IdentityMode,
        oidc_provider: iam.IOidcProvider | None,
        config: GlobalHeartbeatTokenConfig,
    ) -> None:
        super().__init__(scope, id_)
        self.role = WorkloadRole(
            self,
            "ControllerRole",
            cluster=cluster,
            identity=identity,
            namespace=pins.EXTERNAL_SECRETS_NAMESPACE,
            service_account=pins.EXTERNAL_SECRETS_SERVICE_ACCOUNT,
            oidc_provider=oidc_provider,
            description="External Secrets Operator: reads the global router's Redis AUTH token",
        )
        self.role.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadTheSyncedSecret",
                actions=list(SECRET_ACTIONS),
                resources=[config.secret_arn],
            )
        )
        if config.kms_key_arn is not None:
            self.role.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="DecryptThroughSecretsManager",
                    actions=["kms:Decrypt"],
                    resources=[config.kms_key_arn],
                    conditions={"StringEquals": {"kms:ViaService": via_secrets_manager(config.region)}},
                )
            )
        service_account: dict[str, Any] = {"create": True, "name": pins.EXTERNAL_SECRETS_SERVICE_ACCOUNT}
        if identity == "irsa":
            service_account["annotations"] = {"eks.amazonaws.com/role-arn": self.role.role.role_arn}
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            chart=pins.EXTERNAL_SECRETS_CHART,
            repository=pins.EXTERNAL_SECRETS_REPOSITORY,
            version=pins.EXTERNAL_SECRETS_CHART_VERSION,
            namespace=pins.EXTERNAL_SECRETS_NAMESPACE,
            release=RELEASE,
            wait=True,  # the webhook validates SecretStores and ExternalSecrets: up before they are applied
            timeout=cdk.Duration.minutes(15),
            values={
                "installCRDs": True,
                "serviceAccount": service_account,
                "affinity": OFF_HYPERPOD_NODES,
                # Two of each, one leading (the controller elects a leader; the webhook answers from
                # both), a disruption budget keeping one up through a node drain, spread over nodes.
                **HIGHLY_AVAILABLE,
                "leaderElect": True,
                "webhook": {"affinity": OFF_HYPERPOD_NODES, **HIGHLY_AVAILABLE},
                "certController": {"affinity": OFF_HYPERPOD_NODES},
            },
        )
        # The role, its policy and (Pod Identity) the association exist before the controller starts.
        self.chart.node.add_dependency(self.role)
        self.manifest = eks.KubernetesManifest(
            self,
            "SecretStoreAndExternalSecret",
            cluster=cluster,
            manifest=[secret_store(config), external_secret(config)],
            overwrite=True,
        )
        self.manifest.node.add_dependency(self.chart)
