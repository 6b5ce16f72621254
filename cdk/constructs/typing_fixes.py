"""Work-arounds for gaps in aws-cdk-lib's generated type stubs."""

from __future__ import annotations

from typing import cast

from aws_cdk import aws_eks_v2 as eks


def as_icluster(cluster: eks.Cluster) -> eks.ICluster:
    """``eks.Cluster`` is an ``ICluster`` at run time; its stub lacks ``kubectl_provider_options``."""
    return cast(eks.ICluster, cluster)
