"""A deploy-time check that an existing cluster serves IPv4: the first kubectl call of existing-cluster
mode, so an IPv6 cluster fails ``cdk deploy`` at once, naming the reason.

Why: the gateway's internal NLB is IPv4 with IP targets, which cannot register an IPv6 pod (the app
refuses ``existingCluster.ipFamily: ipv6``, docs/infrastructure.md "IPv6"). An existing IPv6 cluster
whose config leaves ``ipFamily`` out cannot be told apart offline, and ``cdk deploy`` went on through
the platform stack (add-ons, the Load Balancer Controller) to the inference stack, whose DNS record
waited 10 minutes for a load balancer host name and failed there, with nothing naming IPv6.

So the cluster-access stack applies a ``Service`` that asks for a single-stack IPv4 cluster IP
(``ipFamilyPolicy: SingleStack``, ``ipFamilies: [IPv4]``), named for what it checks. The API server
refuses such a Service on a cluster whose services have no IPv4 range, which is what an EKS IPv6
cluster is (Kubernetes' dual-stack rules: a single-stack Service of a family the cluster is not
configured for fails; KEP-563 "Creating a New Single-Stack Service"), so the stack fails on that
resource with the API server's message. On an IPv4 cluster it is a selector-less Service holding one
cluster IP, deleted with the stack. (Read from the KEP; no EKS cluster here to deploy it on.)
"""

from __future__ import annotations

from typing import Any, Final

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

NAME: Final = "igw-requires-ipv4"
"""The Service's name: what a failed deploy shows first."""
NAMESPACE: Final = "kube-system"


def manifest() -> dict[str, Any]:
    """The Service the API server accepts only on a cluster with an IPv4 service range."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "igw-cdk"},
            "annotations": {
                "igw.dev/purpose": "The igw CDK app checks that this cluster serves IPv4: the gateway's "
                "internal NLB cannot reach IPv6-only pods (docs/infrastructure.md, IPv6). Selects no pod."
            },
        },
        "spec": {
            "type": "ClusterIP",
            "ipFamilyPolicy": "SingleStack",
            "ipFamilies": ["IPv4"],
            "ports": [{"name": "none", "port": 9, "protocol": "TCP"}],
        },
    }


class Ipv4Check(Construct):
    """Exposes ``manifest`` (the applied object) for callers to order after the kubectl access."""

    def __init__(self, scope: Construct, id_: str, *, cluster: eks.ICluster) -> None:
        super().__init__(scope, id_)
        self.manifest = eks.KubernetesManifest(self, "Manifest", cluster=cluster, manifest=[manifest()])
