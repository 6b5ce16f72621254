"""The fake serves ``/openapi/v2`` (:mod:`tests.fakes.kube_openapi_v2`): kubectl 1.27 and 1.28 read
only it, for ``explain`` and before every validating ``apply``/``create``."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import find, install_crd
from tests.operator.kubectl_cli import KUBECTL, needs_kubectl

_SDK_BIN = Path("/usr/lib/google-cloud-sdk/bin")
_OLD_KUBECTLS = [
    pytest.param(
        _SDK_BIN / f"kubectl.{version}",
        id=version,
        marks=pytest.mark.skipif(
            not (_SDK_BIN / f"kubectl.{version}").exists(), reason=f"kubectl {version} is not installed"
        ),
    )
    for version in ("1.27", "1.28")
]


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


def _kubectl(
    binary: Path | str, kube: FakeKubeApiServer, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    return subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "kube-cache"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECTL_EXTERNAL_DIFF": ""},
        check=False,
    )


def _deployment(**container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "app:1", **container}]},
            },
        },
    }


@pytest.mark.parametrize("binary", _OLD_KUBECTLS)
def test_kubectl_1_27_and_1_28_validate_and_explain_against_the_fake(
    binary: Path, kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """kubectl 1.27/1.28 ask only for the protobuf ``/openapi/v2`` (then ``/swagger-2.0.0.pb-v1``);
    the fake answered 404 to both, so ``apply``, ``create`` and ``explain`` failed with ``Error from
    server (NotFound): the server could not find the requested resource``. Served, a write goes
    through, one with an unknown field is refused by the server's strict decoding (kubectl finds
    ``fieldValidation`` among the kind's PATCH parameters), and ``explain`` reads built-in and CRD
    schemas."""
    install_crd(kube)
    manifest = tmp_path / "web.json"
    manifest.write_text(json.dumps(_deployment()))
    applied = _kubectl(binary, kube, tmp_path, "apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "deployment.apps/web created"

    manifest.write_text(json.dumps(_deployment(imagePullPolicyy="Always")))
    refused = _kubectl(binary, kube, tmp_path, "apply", "-f", str(manifest))
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolicyy"' in (
        refused.stderr
    )

    explained = _kubectl(binary, kube, tmp_path, "explain", "deployment.spec.replicas")
    assert explained.returncode == 0, explained.stderr
    assert "FIELD: replicas <integer>" in explained.stdout
    custom = _kubectl(binary, kube, tmp_path, "explain", "inferencegatewayconfigs.spec")
    assert custom.returncode == 0, custom.stderr
    assert "KIND:       InferenceGatewayConfig" in custom.stdout


@needs_kubectl
@pytest.mark.parametrize("binary", [pytest.param(KUBECTL, id="default"), *_OLD_KUBECTLS])
def test_client_side_apply_merges_containers_and_env_by_name(
    binary: Path | str, kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A client-side ``apply`` (which asks for ``/openapi/v2`` with every kubectl version) patches a
    changed container or env var as an item keyed by ``name``, so what another writer added (a
    sidecar, an env var) stays, as on a cluster, and kubectl warns of nothing. kubectl 1.27/1.28
    failed here before the fake served the document."""
    manifest = tmp_path / "web.json"
    manifest.write_text(json.dumps(_deployment(env=[{"name": "A", "value": "1"}])))
    created = _kubectl(binary, kube, tmp_path, "apply", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    sidecar = {"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "proxy:1"},
        {"name": "app", "env": [{"name": "INJECTED", "value": "yes"}]},
    ]}}}}  # fmt: skip
    patched = _kubectl(
        binary, kube, tmp_path, "patch", "deployment", "web", "-n", "default", "-p", json.dumps(sidecar)
    )
    assert patched.returncode == 0, patched.stderr

    manifest.write_text(json.dumps(_deployment(image="app:2", env=[{"name": "A", "value": "2"}])))
    applied = _kubectl(binary, kube, tmp_path, "apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert "warning" not in applied.stderr.lower()
    stored = find(kube, "Deployment", "default", "web")
    assert stored is not None
    containers = {c["name"]: c for c in stored["spec"]["template"]["spec"]["containers"]}
    assert sorted(containers) == ["app", "sidecar"]
    assert containers["app"]["image"] == "app:2"
    assert sorted((e["name"], e["value"]) for e in containers["app"]["env"]) == [
        ("A", "2"),
        ("INJECTED", "yes"),
    ]


def test_the_document_is_served_as_json_to_a_client_that_asks_for_json(kube: FakeKubeApiServer) -> None:
    """``Accept: application/json`` gets the v2 document as JSON, as the API server serves it: the
    v3 documents' paths and schemas, references into ``#/definitions/``."""
    request = urllib.request.Request(f"{kube.url}/openapi/v2", headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        document = json.loads(response.read())
    assert document["swagger"] == "2.0"
    patch = document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "apps",
        "version": "v1",
        "kind": "Deployment",
    }
    assert {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": True} in patch[
        "parameters"
    ]
    replicas = document["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"]
    assert replicas["type"] == "integer"
    template = document["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["template"]
    assert template["$ref"] == "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"


def test_built_in_list_fields_publish_their_patch_strategy(kube: FakeKubeApiServer) -> None:
    """Both documents (v3 and v2, JSON and protobuf) carry the ``x-kubernetes-patch-strategy`` /
    ``x-kubernetes-patch-merge-key`` of the keyed lists modelled (a pod's ``containers`` by
    ``name``, a container's ``env`` by ``name`` and ``ports`` by ``containerPort``, a Service's
    ``ports`` by ``port``), as the API server's do; the fake published none."""
    v3_url = f"{kube.url}/openapi/v3/apis/apps/v1"
    with urllib.request.urlopen(v3_url, timeout=10) as response:
        v3 = json.loads(response.read())["components"]["schemas"]
    request = urllib.request.Request(f"{kube.url}/openapi/v2", headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        v2 = json.loads(response.read())["definitions"]
    for schemas in (v3, v2):
        pod = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]
        assert pod["containers"]["x-kubernetes-patch-strategy"] == "merge"
        assert pod["containers"]["x-kubernetes-patch-merge-key"] == "name"
        assert pod["volumes"]["x-kubernetes-patch-strategy"] == "merge,retainKeys"
        container = schemas["io.k8s.api.core.v1.Container"]["properties"]
        assert container["env"]["x-kubernetes-patch-merge-key"] == "name"
        assert container["ports"]["x-kubernetes-patch-merge-key"] == "containerPort"
        assert "x-kubernetes-patch-strategy" not in container["command"]
    service = v2["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]
    assert (service["x-kubernetes-patch-strategy"], service["x-kubernetes-patch-merge-key"]) == (
        "merge",
        "port",
    )
    protobuf = urllib.request.Request(
        f"{kube.url}/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    with urllib.request.urlopen(protobuf, timeout=10) as response:
        assert b"x-kubernetes-patch-merge-key" in response.read()
