"""The ``InferenceGatewayConfig`` applied to the cluster after the add-on (which installs its CRD).

Validated at synth with the project's validator (schema + admission rules), the same code the gateway
and ``igw validate`` run, so the cluster never sees a config the gateway would reject.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from cdk.config import GatewayConfigManifest


class InvalidGatewayConfigError(ValueError):
    """The InferenceGatewayConfig manifest fails validation (each problem names its field)."""


class GatewayConfig(Construct):
    """Exposes ``manifest`` (a ``KubernetesManifest``)."""

    def __init__(
        self, scope: Construct, id_: str, *, cluster: eks.ICluster, config: GatewayConfigManifest
    ) -> None:
        super().__init__(scope, id_)
        from igw.config.validate import validate_document

        document = config.document()
        problems = validate_document(document)
        if problems:
            raise InvalidGatewayConfigError("\n".join(f"InferenceGatewayConfig {p}" for p in problems))
        self.manifest = eks.KubernetesManifest(
            self, "Manifest", cluster=cluster, manifest=[document], overwrite=True
        )
