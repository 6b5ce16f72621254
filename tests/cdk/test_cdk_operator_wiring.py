"""The CDK app and the add-on together: the gateway that comes up serves exactly the applied objects.

The inference stack installs the add-on (chart default: operator mode) and applies the deployment
config's InferenceGatewayConfig. Rendering the chart with the synthesized add-on values and running
the operator on the synthesized manifest (fake API server) must yield a gateway whose served
configuration is that object - both schedulers and ``spec.auth`` included - and no chart-rendered
gateway serving anything else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from igw.addon import chart, pins
from igw.config.model import GatewayConfig
from igw.operator.dataplane import CONFIG_KEY
from tests.fakes.kube_api import running_fake_kube
from tests.operator.harness import find, running_operator, wait_for


def _manifests(template: dict[str, Any]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for resource in template["Resources"].values():
        if resource["Type"] != "Custom::AWSCDK-EKS-KubernetesResource":
            continue
        manifest = resource["Properties"]["Manifest"]
        assert isinstance(manifest, str), "the InferenceGatewayConfig manifest must be plain JSON (no tokens)"
        documents += json.loads(manifest)
    return documents


def _addon_values(template: dict[str, Any]) -> dict[str, Any]:
    (addon,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Addon"]
    raw = addon["Properties"].get("ConfigurationValues") or "{}"
    assert isinstance(raw, str)
    values: dict[str, Any] = json.loads(raw)
    return values


def test_the_applied_objects_are_exactly_what_the_gateways_serve(synthesized: Any, tmp_path: Path) -> None:
    template = synthesized.templates["inference"]
    manifests = _manifests(template)
    assert [m["kind"] for m in manifests] == ["InferenceGatewayConfig"]

    rendered = chart.render(_addon_values(template), release=pins.CHART_NAME, namespace=pins.ADDON_NAMESPACE)
    deployments = [o for o in rendered if o["kind"] == "Deployment"]
    assert [d["spec"]["template"]["spec"]["containers"][0]["args"][0] for d in deployments] == ["operator"]
    assert not [o for o in rendered if o["kind"] == "ConfigMap"], "the chart must serve no config of its own"
    (crd,) = [o for o in rendered if o["kind"] == "CustomResourceDefinition"]

    with running_fake_kube() as kube:
        kube.add(crd)
        for manifest in manifests:
            kube.add(manifest)
        with running_operator(kube.write_kubeconfig(tmp_path / "kubeconfig")):
            for manifest in manifests:
                meta = manifest["metadata"]
                config_map = wait_for(
                    lambda meta=meta: find(
                        kube, "ConfigMap", meta["namespace"], f"{meta['name']}-gateway-config"
                    ),
                    what=f"the data plane of {meta['name']}",
                )
                served = yaml.safe_load(config_map["data"][CONFIG_KEY])
                assert served["spec"] == manifest["spec"]
                config = GatewayConfig.from_document(served)
                assert config.auth is not None
                assert (
                    config.auth.jwt_provider.issuer == manifest["spec"]["auth"]["jwt"]["provider"]["issuer"]
                )
                assert [s.name for s in config.schedulers] == [
                    s["name"] for s in manifest["spec"]["schedulers"]
                ]
