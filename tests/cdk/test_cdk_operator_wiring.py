"""The CDK app and the add-on together: the gateway that comes up serves exactly the applied objects.

By default the inference stack installs our chart in operator mode (HelmChart custom resource) and
applies the deployment config's InferenceGatewayConfig. Rendering the chart with the synthesized Helm
values (deploy-time references resolved) and running the operator those values configure on the
synthesized manifest (fake API server) must yield a gateway whose served configuration is that
object - both schedulers and ``spec.auth`` included -, running the image the app builds, behind an
internal NLB with the endpoint's certificate on a TLS 1.3 listener; and no chart-rendered gateway
serving anything else.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import yaml

from igw.addon import chart
from igw.config.build import build_gateway_config
from igw.config.validate import validate_document
from igw.operator.dataplane import CONFIG_KEY, TLS_POLICY, DataPlaneSettings, base_name
from tests.cdk.support import CERTIFICATE_ARN, Synthesized, inference_kubernetes_inputs
from tests.fakes.kube_api import running_fake_kube
from tests.operator.harness import find, running_operator, wait_for

LB = "service.beta.kubernetes.io/aws-load-balancer"


def _asset_image(synthesized: Synthesized) -> tuple[str, str]:
    """(repository name, tag) of the gateway image asset ``cdk deploy`` builds and pushes."""
    assets = json.loads((synthesized.outdir / "IgwInference.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    ((repository, tag),) = {(d["repositoryName"], d["imageTag"]) for d in image["destinations"].values()}
    return repository, tag


def test_the_applied_objects_are_exactly_what_the_gateways_serve(
    synthesized: Synthesized, tmp_path: Path
) -> None:
    manifests, helm = inference_kubernetes_inputs(synthesized.templates["inference"])
    assert [m["kind"] for m in manifests] == ["InferenceGatewayConfig"]
    assert helm["Values"]["mode"] == "operator"

    rendered = chart.render(helm["Values"], release=helm["Release"], namespace=helm["Namespace"])
    deployments = [o for o in rendered if o["kind"] == "Deployment"]
    assert [d["spec"]["template"]["spec"]["containers"][0]["args"][0] for d in deployments] == ["operator"]
    (operator,) = deployments[0]["spec"]["template"]["spec"]["containers"]
    repository, tag = _asset_image(synthesized)
    gateway_image = operator["args"][operator["args"].index("--gateway-image") + 1]
    assert operator["image"] == gateway_image
    assert gateway_image.endswith(f"/{repository}:{tag}"), "operator and gateways run the built asset"
    assert not [o for o in rendered if o["kind"] == "ConfigMap"], "the chart must serve no config of its own"
    assert not [o for o in rendered if o["kind"] == "Service"], "the chart must run no gateway of its own"
    crds = [o for o in rendered if o["kind"] == "CustomResourceDefinition"]
    assert sorted(c["spec"]["names"]["kind"] for c in crds) == [
        "InferenceGatewayConfig",
        "InferenceModelRewrite",
        "InferenceObjective",
    ]
    assert [r["kind"] for r in rendered if r["kind"] in ("ClusterRole", "ClusterRoleBinding")]

    with running_fake_kube() as kube:
        for crd in crds:
            kube.add(crd)
        for manifest in manifests:
            kube.add(manifest)
        settings = DataPlaneSettings(image=gateway_image)
        with running_operator(kube.write_kubeconfig(tmp_path / "kubeconfig"), data_plane=settings):
            for manifest in manifests:
                meta = manifest["metadata"]
                name = base_name(meta["name"])
                config_map = wait_for(
                    partial(find, kube, "ConfigMap", meta["namespace"], f"{name}-config"),
                    what=f"the data plane of {meta['name']}",
                )
                served = yaml.safe_load(config_map["data"][CONFIG_KEY])
                # as the API server stored it: the manifest with the CRD's defaults filled in
                stored = find(kube, "InferenceGatewayConfig", meta["namespace"], meta["name"]) or {}
                assert served["spec"] == stored["spec"]
                assert set(manifest["spec"]) <= set(stored["spec"])
                assert validate_document(served) == []
                config = build_gateway_config(served)
                assert config.auth is not None
                assert (
                    config.auth.jwt_provider.issuer == manifest["spec"]["auth"]["jwt"]["provider"]["issuer"]
                )
                assert [s.name for s in config.schedulers] == [
                    s["name"] for s in manifest["spec"]["schedulers"]
                ]
                deployment = wait_for(
                    partial(find, kube, "Deployment", meta["namespace"], name),
                    what=f"the gateway Deployment of {meta['name']}",
                )
                (container,) = deployment["spec"]["template"]["spec"]["containers"]
                assert container["image"] == gateway_image
                service = wait_for(
                    partial(find, kube, "Service", meta["namespace"], name),
                    what=f"the gateway Service of {meta['name']}",
                )
                annotations = service["metadata"]["annotations"]
                assert annotations[f"{LB}-scheme"] == "internal"
                assert annotations[f"{LB}-ssl-cert"] == CERTIFICATE_ARN
                assert annotations[f"{LB}-ssl-negotiation-policy"] == TLS_POLICY
