"""The namespaces the inference stack applies objects into, created when missing and kept when the
stack goes.

Why: the deployment config's InferenceGatewayConfig (``inference.gatewayConfig.namespace``) and the
global router token's Secret (``inference.globalHeartbeatToken.namespace``) are applied with
``kubectl``, and on a new cluster no namespace but the built-in ones exists. Before session s38 a
config that named any other (every example under ``crds/examples/`` uses ``inference``) would fail
``cdk deploy`` in the inference stack, since the API server refuses an object in a missing namespace
(``namespaces "inference" not found``), and CloudFormation would roll the stack back; the docs said
only that the namespace "must exist already". (Read from the templates; no AWS account here to
deploy them.)

So each such namespace is applied as a ``Namespace`` object before anything goes into it. Applying
one that exists changes nothing but kubectl's last-applied annotation. Deleting the stack leaves the
namespaces (CloudFormation's ``Retain``), and so does a deploy that names another (no pruning): the
model servers the gateway routes to run in that namespace, with whatever else a team put there, and
a manifest's delete (or prune) runs ``kubectl delete``, which would remove all of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

BUILT_IN: Final = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
"""Namespaces every cluster has: never applied, so never touched."""


class Namespaces(Construct):
    """Exposes ``manifest`` (``None`` when every name is built in) and ``names`` (those it applies)."""

    def __init__(self, scope: Construct, id_: str, *, cluster: eks.ICluster, names: Iterable[str]) -> None:
        super().__init__(scope, id_)
        self.names = sorted(set(names) - BUILT_IN)
        self.manifest: eks.KubernetesManifest | None = None
        if not self.names:
            return
        self.manifest = eks.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in self.names],
            overwrite=True,
            # No pruning: it labels each namespace and, when a later deploy names another, deletes the
            # one it labelled, with everything in it.
            prune=False,
        )
        resource = self.manifest.node.default_child
        assert isinstance(resource, cdk.CfnResource)  # the custom resource KubernetesManifest is built on
        resource.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
