"""AWS's own add-on, ``amazon-sagemaker-hyperpod-inference``: its configuration keys and their validation.

When a deployment asks for AWS's managed add-on instead of our chart, its ``configurationValues``
follow AWS's documented schema (``aws_hyperpod_inference.schema.json`` beside this module: the
execution role, the TLS-certificate bucket, the HyperPod cluster, the gateway controller's IRSA role,
the bundled Load Balancer Controller and KEDA), never our chart's. The two value sets share no key
that means the same thing, so each is validated only against its own schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

from igw.addon import configuration
from igw.config.schema_validator import schema_validator
from igw.errors import IgwToolingError

SCHEMA_FILE: Final = Path(__file__).resolve().parent / "aws_hyperpod_inference.schema.json"

EXECUTION_POLICY: Final = "AmazonSageMakerHyperPodInferenceAccess"
"""AWS managed policy of the operator's execution role (``executionRoleArn``)."""

GATEWAY_POLICY: Final = "AmazonSageMakerHyperPodInferenceGatewayAccess"
"""AWS managed policy of the gateway controller's IRSA role (ACM import of auto-issued certificates)."""


class AwsAddonValuesError(IgwToolingError, ValueError):
    """Values for AWS's add-on break its schema; ``problems`` names each field."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            "invalid amazon-sagemaker-hyperpod-inference configuration values:\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


def problems(values: Mapping[str, Any], *, require_generated: bool = True) -> list[str]:
    """Every problem of ``values`` against AWS's schema as ``path: message (rule id)``, quoting values
    redacted and cut (:func:`igw.addon.configuration.excerpt`).

    ``require_generated=False`` skips the ``required`` keys the CDK app fills in itself (role ARNs,
    bucket, cluster ARN), so a user's partial values can be checked before those exist.
    """
    document = schema()
    if not require_generated:
        document = {key: value for key, value in document.items() if key != "required"}
    return configuration.schema_problems(schema_validator(document, formats=False), values)


def values_for(
    user_values: Mapping[str, Any],
    *,
    execution_role_arn: str,
    tls_bucket: str,
    hyperpod_cluster_arn: str,
    gateway_role_arn: str,
    install_load_balancer_controller: bool,
) -> dict[str, Any]:
    """The add-on's values: the user's, plus the generated resources and the gateway turned on.

    ``alb.enabled`` is false when the deployment installs the Load Balancer Controller itself (two
    controllers would fight over the same load balancers).
    """
    values: dict[str, Any] = json.loads(json.dumps(dict(user_values)))
    values["executionRoleArn"] = execution_role_arn
    values["tlsCertificateS3Bucket"] = tls_bucket
    values["hyperpodClusterArn"] = hyperpod_cluster_arn
    gateway = values.setdefault("inferenceGateway", {})
    gateway.setdefault("enabled", True)
    gateway.setdefault("serviceAccount", {})["roleArn"] = gateway_role_arn
    if install_load_balancer_controller:
        values.setdefault("alb", {})["enabled"] = False
    return values
