"""Constants shared by the CDK tests and their fixtures (importable; conftest.py only registers fixtures)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from igw.addon import pins


@dataclass(frozen=True)
class Synthesized:
    """One deployment config's cloud assembly, as the session fixtures of conftest.py synthesize it."""

    outdir: Path
    templates: dict[str, dict[str, Any]]
    """Stack role (network/cluster/platform/inference) -> template."""
    files: dict[str, Path]
    """Stack role -> its template file in ``outdir``."""


EXAMPLES = Path(__file__).resolve().parents[2] / "cdk" / "examples"
"""The example deployment configs users copy; each is synthesized by a session fixture."""

EXISTING_OIDC = "arn:aws:iam::111111111111:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/EXAMPLE"
"""The OIDC provider ARN the existing-cluster example names."""

CHART_RELEASE = pins.CHART_NAME
"""The Helm release of our chart (the CDK app's ``IgwChart``)."""

CERTIFICATE_ARN = "arn:aws:acm:us-west-2:111111111111:certificate/11111111-2222-3333-4444-555555555555"
"""What a test substitutes for the ACM certificate's ``Ref`` (its ARN exists only at deploy time)."""

PSEUDO_PARAMETERS = {
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::Partition": "aws",
    "AWS::Region": "us-west-2",
    "AWS::AccountId": "111111111111",
}


def resolve(value: Any, refs: Mapping[str, str]) -> Any:
    """``value`` with the intrinsic functions CDK writes into Kubernetes properties (``Fn::Join``,
    ``Ref``) evaluated: pseudo parameters as in the example account, other ``Ref``s from ``refs``.
    Anything else is an error, so a test never reads a half-resolved document."""
    if isinstance(value, list):
        return [resolve(item, refs) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolve(part, refs)) for part in parts)
    if set(value) == {"Ref"}:
        name = value["Ref"]
        if name in PSEUDO_PARAMETERS:
            return PSEUDO_PARAMETERS[name]
        if name in refs:
            return refs[name]
        raise AssertionError(f"unexpected Ref {name!r} in a Kubernetes property")
    if any(key.startswith("Fn::") for key in value):
        raise AssertionError(f"unexpected intrinsic function {sorted(value)} in a Kubernetes property")
    return {key: resolve(item, refs) for key, item in value.items()}


def inference_kubernetes_inputs(
    template: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], Mapping[str, Any]]:
    """The objects the inference stack applies (its ``KubernetesManifest``s) and the properties of our
    chart's ``HelmChart`` resource with ``Values`` decoded, deploy-time references resolved (the
    certificate as :data:`CERTIFICATE_ARN`)."""
    resources = template["Resources"]
    refs = {
        logical: CERTIFICATE_ARN
        for logical, resource in resources.items()
        if resource["Type"] == "AWS::CertificateManager::Certificate"
    }
    manifests: list[dict[str, Any]] = []
    for resource in resources.values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            manifests += json.loads(resolve(resource["Properties"]["Manifest"], refs))
    (chart,) = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"].get("Release") == CHART_RELEASE
    ]
    properties = dict(chart)
    properties["Values"] = json.loads(resolve(chart["Values"], refs))
    return manifests, properties
