"""The EKS add-ons the inference add-on requires, each at its pinned version (never below its minimum).

Versions come from :data:`igw.addon.pins.DEPENDENCY_ADDONS`; a pin below its minimum fails synthesis.
The Mountpoint S3 CSI driver gets a read-only role for the configured model buckets.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import IdentityMode
from cdk.constructs.nag_ack import acknowledge
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import addon_version, pins

S3_CSI_NAMESPACE = "kube-system"
S3_CSI_SERVICE_ACCOUNT = "s3-csi-driver-sa"


class DependencyAddons(Construct):
    """Exposes ``addons`` (name -> CfnAddon), ``pod_identity_agent`` (or ``None``) and ``s3_csi_role``."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.Cluster,
        identity: IdentityMode,
        model_buckets: Sequence[str],
        oidc_provider: eks.OidcProviderNative | None,
    ) -> None:
        super().__init__(scope, id_)
        self.pod_identity_agent: eks.CfnAddon | None = None
        if identity == "podIdentity":
            self.pod_identity_agent = eks.CfnAddon(
                self,
                "PodIdentityAgent",
                cluster_name=cluster.cluster_name,
                addon_name=pins.POD_IDENTITY_AGENT_ADDON,
                addon_version=pins.POD_IDENTITY_AGENT_VERSION,
                resolve_conflicts="OVERWRITE",
            )
        self.s3_csi_role: WorkloadRole | None = None
        if model_buckets:
            self.s3_csi_role = WorkloadRole(
                self,
                "S3CsiRole",
                cluster=cluster,
                identity=identity,
                namespace=S3_CSI_NAMESPACE,
                service_account=S3_CSI_SERVICE_ACCOUNT,
                oidc_provider=oidc_provider,
                associate=False,
                description="Mountpoint S3 CSI driver: read model weights from the configured buckets",
            )
            self.s3_csi_role.role.add_to_policy(
                iam.PolicyStatement(
                    sid="ListModelBuckets",
                    actions=["s3:ListBucket"],
                    resources=[f"arn:aws:s3:::{bucket}" for bucket in model_buckets],
                )
            )
            self.s3_csi_role.role.add_to_policy(
                iam.PolicyStatement(
                    sid="ReadModelObjects",
                    actions=["s3:GetObject"],
                    resources=[f"arn:aws:s3:::{bucket}/*" for bucket in model_buckets],
                )
            )
            acknowledge(
                self.s3_csi_role.role,
                "AwsSolutions-IAM5",
                reason=(
                    "the CSI driver mounts whichever model objects a volume names; read-only "
                    "GetObject on the "
                    "configured model buckets' objects is the narrowest grant that serves that"
                ),
                findings=[f"Resource::arn:aws:s3:::{bucket}/*" for bucket in model_buckets],
            )
        self.addons: dict[str, eks.CfnAddon] = {}
        for dependency in pins.DEPENDENCY_ADDONS:
            if not addon_version.at_least(dependency.pinned, dependency.minimum):
                raise ValueError(
                    f"{dependency.name}: pinned {dependency.pinned} is below the minimum {dependency.minimum}"
                )
            addon = eks.CfnAddon(
                self,
                _construct_id(dependency.name),
                cluster_name=cluster.cluster_name,
                addon_name=dependency.name,
                addon_version=dependency.pinned,
                resolve_conflicts="OVERWRITE",
                pod_identity_associations=self._pod_identity_for(dependency.name, identity),
                service_account_role_arn=self._irsa_role_for(dependency.name, identity),
            )
            if self.pod_identity_agent is not None:
                addon.add_resource_dependency(self.pod_identity_agent)
            self.addons[dependency.name] = addon

    def _s3_csi_role(self, name: str) -> WorkloadRole | None:
        return self.s3_csi_role if name == "aws-mountpoint-s3-csi-driver" else None

    def _pod_identity_for(
        self, name: str, identity: IdentityMode
    ) -> list[eks.CfnAddon.PodIdentityAssociationProperty] | None:
        role = self._s3_csi_role(name)
        if role is None or identity != "podIdentity":
            return None
        return [
            eks.CfnAddon.PodIdentityAssociationProperty(
                role_arn=role.role.role_arn, service_account=S3_CSI_SERVICE_ACCOUNT
            )
        ]

    def _irsa_role_for(self, name: str, identity: IdentityMode) -> str | None:
        role = self._s3_csi_role(name)
        return role.role.role_arn if role is not None and identity == "irsa" else None


def _construct_id(addon_name: str) -> str:
    return "".join(part.capitalize() for part in addon_name.split("-"))
