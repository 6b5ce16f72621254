"""The ``InferenceGatewayConfig`` applied to the cluster after the chart or add-on (which installs its CRD).

In the chart's operator mode this object *is* the gateway's configuration: the operator reconciles it
into its data plane, so with an endpoint the ACM certificate is written into ``spec.tls.acmArn`` here
(the operator's Service then gets the TLS 1.3 listener with it). Validated at synth with the project's
validator (schema + admission rules), the same code the operator, the gateway and ``igw validate`` run,
so the cluster never sees a config the gateway would reject; a certificate ARN that is a deploy-time
token is validated as a placeholder ARN.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from cdk.config import GatewayConfigManifest
from cdk.constructs.gateway_endpoint import PLACEHOLDER_CERTIFICATE


class InvalidGatewayConfigError(ValueError):
    """The InferenceGatewayConfig manifest fails validation (each problem names its field)."""


class GatewayConfig(Construct):
    """Exposes ``manifest`` (a ``KubernetesManifest``)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        cluster: eks.ICluster,
        config: GatewayConfigManifest,
        acm_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id_)
        # deferred: the validator (CEL, JSON Schema) loads only when a stack is built
        from igw.config.validate import validate_document

        checked_arn = (
            PLACEHOLDER_CERTIFICATE if acm_arn is not None and cdk.Token.is_unresolved(acm_arn) else acm_arn
        )
        problems = validate_document(config.document(acm_arn=checked_arn))
        if problems:
            raise InvalidGatewayConfigError("\n".join(f"InferenceGatewayConfig {p}" for p in problems))
        self.manifest = eks.KubernetesManifest(
            self, "Manifest", cluster=cluster, manifest=[config.document(acm_arn=acm_arn)], overwrite=True
        )
