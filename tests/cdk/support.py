"""Constants and helpers shared by the CDK tests and their fixtures (importable; conftest.py only registers
fixtures)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from igw.addon import pins

if TYPE_CHECKING:
    from cdk.stacks.existing_cluster_stack import ExistingClusterStack


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


CFN_LINT_ACCEPTED: Final = {
    "W3005": "aws-cdk-lib's own constructs write an explicit DependsOn beside a Ref/GetAtt of the same "
    "resource (harmless: CloudFormation orders them the same way)",
    "W3010": "the availability zones are hard-coded on purpose: availabilityZones keeps synthesis offline "
    "(no availability-zones context lookup)",
}
"""cfn-lint rules whose findings the CDK tests accept, with the reason (docs/infrastructure.md)."""


def cfn_lint(*templates: Path) -> list[str]:
    """cfn-lint's findings on ``templates`` (``rule file path: message``) except :data:`CFN_LINT_ACCEPTED`.

    In-process through cfn-lint's API: the tests ran ``python -m cfnlint``, which cfn-lint 1.x cannot
    run (no ``cfnlint.__main__``), read its empty stdout as no findings, and so passed without linting."""
    from cfnlint.api import lint_file

    found: list[str] = []
    for template in templates:
        assert template.is_file(), f"no template {template}"
        for match in lint_file(template):
            if match.rule.id not in CFN_LINT_ACCEPTED:
                found.append(
                    f"{match.rule.id} {template.name} {'/'.join(map(str, match.path))}: {match.message}"
                )
    return found


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


def synthesize(document: dict[str, Any], outdir: Path) -> Synthesized:
    """``document`` (a deployment config) synthesized into ``outdir``: each stack's template and file."""
    # deferred: start-up cost: the CDK app loads jsii only for tests that synthesize
    from cdk import config
    from cdk.app_builder import build_app

    built = build_app(config.parse(document), outdir=outdir)
    assembly = built.app.synth()
    roles = {
        "network": built.network,
        "cluster": built.cluster,
        "platform": built.platform,
        "inference": built.inference,
    }
    templates: dict[str, dict[str, Any]] = {}
    files: dict[str, Path] = {}
    for role, stack in roles.items():
        if stack is None:
            continue
        artifact = assembly.get_stack_artifact(stack.artifact_id)
        templates[role] = artifact.template
        files[role] = outdir / artifact.template_file
    return Synthesized(outdir=outdir, templates=templates, files=files)


def _example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return document


def example_document() -> dict[str, Any]:
    """The default: a new VPC, EKS and HyperPod cluster, our chart with our image, TLS and DNS."""
    return _example("deployment.yaml")


def gateway_mode_document() -> dict[str, Any]:
    """The default config with the chart's explicit ``mode: gateway``: the chart runs one gateway itself."""
    document = example_document()
    document["inference"]["addon"]["configurationValues"] = {
        "mode": "gateway",
        "replicaCount": 3,
        "service": {"scheme": "internal"},
    }
    return document


def variant_document() -> dict[str, Any]:
    """Every non-default choice at once: imported VPC, API_AND_CONFIG_MAP, public+private endpoint, admin
    access entry, IRSA instead of Pod Identity, and AWS's managed add-on instead of our chart."""
    return _example("aws-managed-addon.yaml")


def existing_document() -> dict[str, Any]:
    """Existing-cluster mode: the cluster (and vpc-cni) exist; only add-ons and the gateway are created."""
    return _example("existing-cluster.yaml")


def existing_cluster_stack(document: dict[str, Any]) -> ExistingClusterStack:
    """The existing-cluster stack (``Access``) of the deployment config ``document``, in a new app."""
    # deferred: start-up cost: the CDK app loads jsii only for tests that synthesize
    import aws_cdk as cdk

    from cdk import config
    from cdk.stacks.existing_cluster_stack import ExistingClusterStack

    deployment = config.parse(document)
    assert deployment.existing_cluster is not None
    return ExistingClusterStack(
        cdk.App(),
        "Access",
        config=deployment,
        existing=deployment.existing_cluster,
        env=cdk.Environment(account=deployment.account, region=deployment.region),
    )
