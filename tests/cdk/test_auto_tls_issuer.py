"""The deployment's own InferenceGatewayConfig with ``spec.tls: {}`` and no ``inference.endpoint`` asks
the operator for an auto-issued certificate, from the issuer the chart values name.

Before session s40 the app deployed such a config with the chart's defaults: ``operator.tlsIssuer``
``ClusterIssuer/igw-selfsigned`` and ``operator.selfSignedClusterIssuer: false``, so the operator
asked cert-manager for a certificate from an issuer nothing created, ``cdk deploy`` succeeded and
the gateway never got a TLS listener (the same with ``operator.autoTls: false``, which the operator
answers with AutoTlsDisabled). Both are refused at synthesis now, naming the setting; with
``selfSignedClusterIssuer: true`` the synthesized chart renders the issuer the operator is told to
use, after the platform stack's cert-manager.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cdk import config
from igw.addon import chart
from tests.cdk.support import example_document, inference_kubernetes_inputs, synthesize

OPERATOR = "inference.addon.configurationValues.operator"


def _without_endpoint(operator: dict[str, Any] | None = None) -> dict[str, Any]:
    document = copy.deepcopy(example_document())
    document["inference"].pop("endpoint")
    if operator is not None:
        document["inference"]["addon"]["configurationValues"]["operator"].update(operator)
    return document


@pytest.mark.parametrize(
    ("operator", "expected"),
    [
        ({}, f"{OPERATOR}.selfSignedClusterIssuer: inference.gatewayConfig.spec.tls asks for an auto-issued"),
        ({"selfSignedClusterIssuer": False}, f"{OPERATOR}.selfSignedClusterIssuer:"),
        ({"autoTls": False}, f"{OPERATOR}.autoTls: false, but inference.gatewayConfig.spec.tls asks"),
    ],
)
def test_an_auto_issued_certificate_no_issuer_can_sign_is_refused_naming_the_setting(
    operator: dict[str, Any], expected: str
) -> None:
    with pytest.raises(config.DeploymentConfigError) as caught:
        config.parse(_without_endpoint(operator), source="deploy.yaml")
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["inference"]["addon"]["configurationValues"]["operator"].update(
            selfSignedClusterIssuer=True
        ),
        lambda d: d["inference"]["addon"]["configurationValues"]["operator"].update(
            tlsIssuer="ClusterIssuer/corp-ca"
        ),
        lambda d: d["inference"]["gatewayConfig"]["spec"].pop("tls"),  # no TLS asked for
        lambda d: d["inference"]["gatewayConfig"]["spec"].update(
            tls={"acmArn": "arn:aws:acm:us-west-2:111111111111:certificate/abc"}
        ),
        lambda d: d["inference"]["addon"].update(configurationValues={"mode": "gateway"}),
    ],
)
def test_a_certificate_something_can_issue_is_accepted(change: Any) -> None:
    document = _without_endpoint()
    change(document)
    config.parse(document)


def test_the_default_example_with_its_endpoint_needs_no_issuer() -> None:
    config.parse(example_document())


def test_with_the_self_signed_issuer_the_chart_renders_the_issuer_the_operator_uses(tmp_path: Path) -> None:
    synthesized = synthesize(_without_endpoint({"selfSignedClusterIssuer": True}), tmp_path / "cdk.out")
    _, helm = inference_kubernetes_inputs(synthesized.templates["inference"])
    rendered = chart.render(helm["Values"], release=helm["Release"], namespace=helm["Namespace"])
    (operator,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    kind, name = args[args.index("--tls-issuer") + 1].split("/")
    assert [o["metadata"]["name"] for o in rendered if o["kind"] == kind] == [name]
    # cert-manager (its CRDs and webhook) is an add-on of the platform stack, deployed before this one.
    platform = synthesized.templates["platform"]["Resources"].values()
    addons = {r["Properties"]["AddonName"] for r in platform if r["Type"] == "AWS::EKS::Addon"}
    assert "cert-manager" in addons
    manifest = json.loads((synthesized.outdir / "manifest.json").read_text())
    assert "IgwPlatform" in manifest["artifacts"]["IgwInference"]["dependencies"]
