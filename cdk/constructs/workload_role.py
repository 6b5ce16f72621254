"""An IAM role for one Kubernetes service account, through EKS Pod Identity or IRSA.

Pod Identity: the role trusts ``pods.eks.amazonaws.com`` (``sts:AssumeRole`` + ``sts:TagSession``) only
for the session tags of this cluster, namespace and service account, and a ``CfnPodIdentityAssociation``
binds it to exactly that service account. IRSA: the role trusts
the cluster's OIDC provider with ``sub`` pinned to ``system:serviceaccount:<ns>:<sa>`` and ``aud`` to STS.
Either way the trust is scoped to the one service account (the audit checks this). The issuer in the
IRSA conditions comes from the provider, so the same code serves a provider this app creates and one
imported from an existing cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk.config import IdentityMode

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_session_tags(cluster: eks.ICluster, namespace: str, service_account: str) -> dict[str, str]:
    """The session tags EKS Pod Identity sets when it assumes a role for a pod (AWS's "Create IAM role
    with trust policy required by EKS Pod Identity"), as trust conditions naming the one cluster,
    namespace and service account the role is for. Without them the trust admits any association in
    the account: whoever may create one and pass the role could bind it to another service account."""
    return {
        "aws:RequestTag/eks-cluster-name": cluster.cluster_name,
        "aws:RequestTag/kubernetes-namespace": namespace,
        "aws:RequestTag/kubernetes-service-account": service_account,
    }


class WorkloadRole(Construct):
    """Exposes ``role``; with Pod Identity also ``association`` (unless ``associate`` is false)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        identity: IdentityMode,
        namespace: str,
        service_account: str,
        oidc_provider: iam.IOidcProvider | None = None,
        associate: bool = True,
        description: str,
        extra_principals: Sequence[iam.IPrincipal] = (),
    ) -> None:
        super().__init__(scope, id_)
        self.namespace = namespace
        self.service_account = service_account
        self.association: eks.CfnPodIdentityAssociation | None = None
        if identity == "podIdentity":
            tags = pod_identity_session_tags(cluster, namespace, service_account)
            principal: iam.IPrincipal = iam.SessionTagsPrincipal(
                iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)
            ).with_conditions({"StringEquals": tags})
        else:
            if oidc_provider is None:
                raise ValueError("IRSA needs the cluster's OIDC provider")
            issuer = oidc_provider.open_id_connect_provider_issuer
            conditions = cdk.CfnJson(
                self,
                "TrustConditions",
                value={
                    f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                    f"{issuer}:aud": "sts.amazonaws.com",
                },
            )
            principal = iam.OpenIdConnectPrincipal(oidc_provider, conditions={"StringEquals": conditions})
        if extra_principals:
            principal = iam.CompositePrincipal(principal, *extra_principals)
        self.role = iam.Role(self, "Role", assumed_by=principal, description=description)
        if identity == "podIdentity" and associate:
            self.association = eks.CfnPodIdentityAssociation(
                self,
                "Association",
                cluster_name=cluster.cluster_name,
                namespace=namespace,
                service_account=service_account,
                role_arn=self.role.role_arn,
            )
