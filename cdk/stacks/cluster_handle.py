"""What the platform and inference stacks need from the stack that owns (or imports) the cluster."""

from __future__ import annotations

from typing import Protocol

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam


class ClusterHandle(Protocol):
    """Met by :class:`~cdk.stacks.cluster_stack.ClusterStack` (a cluster this app creates) and
    :class:`~cdk.stacks.existing_cluster_stack.ExistingClusterStack` (one that already exists)."""

    @property
    def cluster(self) -> eks.ICluster: ...

    @property
    def oidc_provider(self) -> iam.IOidcProvider: ...

    @property
    def vpc(self) -> ec2.IVpc: ...

    @property
    def hyperpod_cluster_arn(self) -> str | None:
        """``None`` when the existing cluster's config names no HyperPod cluster."""
        ...
