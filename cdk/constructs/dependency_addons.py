"""The EKS add-ons the inference add-on requires, each at its pinned version (never below its minimum).

Versions come from :data:`igw.addon.pins.DEPENDENCY_ADDONS`; a pin below its minimum fails synthesis.
The Mountpoint S3 CSI driver gets a read-only role for the configured model buckets and the FSx CSI
driver's controller a role to manage FSx for Lustre volumes. Both are IRSA roles whatever the
workload identity mode: Mountpoint's driver v1 reads credentials through IRSA only (EKS Pod Identity
arrives with its v2), and the FSx driver is documented with IRSA. Add-ons an existing cluster already
runs are left alone (``skip``), and so is their IAM: such a driver runs with the role its installer
gave it, so no role is made for it (before session s43 an existing cluster listing
``aws-fsx-csi-driver`` in ``installedAddons`` still got an unused role with ``AmazonFSxFullAccess``,
trusted by that driver's service account).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import S3_CSI_ADDON, IdentityMode
from cdk.constructs.nag_ack import acknowledge, attach_aws_managed_policy
from cdk.constructs.workload_role import WorkloadRole
from igw.addon import addon_version, pins

FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_POLICY = "AmazonFSxFullAccess"


class DependencyAddons(Construct):
    """Exposes ``addons`` (name -> CfnAddon), ``pod_identity_agent``, ``s3_csi_role`` and
    ``fsx_csi_role`` (each ``None`` where not created)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        identity: IdentityMode,
        model_buckets: Sequence[str],
        oidc_provider: iam.IOidcProvider,
        skip: Collection[str] = (),
    ) -> None:
        super().__init__(scope, id_)
        partition = cdk.Aws.PARTITION
        self.pod_identity_agent: eks.CfnAddon | None = None
        if identity == "podIdentity" and pins.POD_IDENTITY_AGENT_ADDON not in skip:
            self.pod_identity_agent = eks.CfnAddon(
                self,
                "PodIdentityAgent",
                cluster_name=cluster.cluster_name,
                addon_name=pins.POD_IDENTITY_AGENT_ADDON,
                addon_version=pins.POD_IDENTITY_AGENT_VERSION,
                resolve_conflicts="OVERWRITE",
            )
        self.s3_csi_role: WorkloadRole | None = None
        if model_buckets and S3_CSI_ADDON not in skip:
            self.s3_csi_role = self._csi_role(
                "S3CsiRole",
                cluster=cluster,
                oidc_provider=oidc_provider,
                service_account=pins.S3_CSI_SERVICE_ACCOUNT,
                description="Mountpoint S3 CSI driver: read model weights from the configured buckets",
            )
            self.s3_csi_role.role.add_to_policy(
                iam.PolicyStatement(
                    sid="ListModelBuckets",
                    actions=["s3:ListBucket"],
                    resources=[f"arn:{partition}:s3:::{bucket}" for bucket in model_buckets],
                )
            )
            self.s3_csi_role.role.add_to_policy(
                iam.PolicyStatement(
                    sid="ReadModelObjects",
                    actions=["s3:GetObject"],
                    resources=[f"arn:{partition}:s3:::{bucket}/*" for bucket in model_buckets],
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
                findings=[f"Resource::arn:<AWS::Partition>:s3:::{bucket}/*" for bucket in model_buckets],
            )
        self.fsx_csi_role: WorkloadRole | None = None
        if FSX_CSI_ADDON not in skip:
            self.fsx_csi_role = self._csi_role(
                "FsxCsiRole",
                cluster=cluster,
                oidc_provider=oidc_provider,
                service_account=pins.FSX_CSI_CONTROLLER_SERVICE_ACCOUNT,
                description="FSx CSI driver controller: create, attach and delete FSx for Lustre volumes",
            )
            attach_aws_managed_policy(
                self.fsx_csi_role.role,
                FSX_POLICY,
                reason="the FSx CSI driver's documented policy is AmazonFSxFullAccess: it creates and "
                "deletes file systems whose ARNs exist only at run time; the role is bound to its one "
                "service account",
            )
        self.addons: dict[str, eks.CfnAddon] = {}
        for dependency in pins.DEPENDENCY_ADDONS:
            if not addon_version.at_least(dependency.pinned, dependency.minimum):
                raise ValueError(
                    f"{dependency.name}: pinned {dependency.pinned} is below the minimum {dependency.minimum}"
                )
            if dependency.name in skip:
                continue
            addon = eks.CfnAddon(
                self,
                _construct_id(dependency.name),
                cluster_name=cluster.cluster_name,
                addon_name=dependency.name,
                addon_version=dependency.pinned,
                resolve_conflicts="OVERWRITE",
                service_account_role_arn=self._irsa_role_for(dependency.name),
            )
            role = self._workload_role_for(dependency.name)
            if role is not None:
                # Created after the role's inline policy and deleted before it, like CDK's functions.
                addon.node.add_dependency(role.role)
            if self.pod_identity_agent is not None:
                addon.add_resource_dependency(self.pod_identity_agent)
            self.addons[dependency.name] = addon

    def _csi_role(
        self,
        id_: str,
        *,
        cluster: eks.ICluster,
        oidc_provider: iam.IOidcProvider,
        service_account: str,
        description: str,
    ) -> WorkloadRole:
        """A CSI driver's role: IRSA for ``service_account`` in the CSI namespace whatever the workload
        identity mode, and no Pod Identity association (see the module docstring for why), so that
        both drivers' roles are made the one way."""
        return WorkloadRole(
            self,
            id_,
            cluster=cluster,
            identity="irsa",
            namespace=pins.CSI_NAMESPACE,
            service_account=service_account,
            oidc_provider=oidc_provider,
            associate=False,
            description=description,
        )

    def _workload_role_for(self, name: str) -> WorkloadRole | None:
        if name == S3_CSI_ADDON:
            return self.s3_csi_role
        if name == FSX_CSI_ADDON:
            return self.fsx_csi_role
        return None

    def _irsa_role_for(self, name: str) -> str | None:
        role = self._workload_role_for(name)
        return role.role.role_arn if role is not None else None


def _construct_id(addon_name: str) -> str:
    return "".join(part.capitalize() for part in addon_name.split("-"))
