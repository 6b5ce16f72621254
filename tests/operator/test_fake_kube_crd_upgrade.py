"""A CRD upgrade and rollback on the fake API server, as on a cluster, driven by the real ``kubectl``.

The chart ships the CRDs as templates (``helm.sh/resource-policy: keep``), so ``helm upgrade``, an
EKS add-on update and ``helm rollback`` replace the InferenceGatewayConfig CRD with the release's own.
Stored objects are not rewritten when that happens: the API server prunes and defaults them under
the CRD served now on every read. So after an upgrade a new field's default shows in objects written
before it existed, and after a rollback a field only the newer CRD declares is dropped from what
clients read, silently, while a manifest that still sets it is refused by ``kubectl apply``
(strict field validation). The "previous release" here is the shipped CRD without
``serverLimits.maxBodyBytesHeld`` (added in session s48).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.addon import chart
from igw.operator.dataplane import config_map
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import ROOT, install_extension_crds
from tests.operator.kubectl_cli import kubectl, needs_kubectl, run_kubectl

pytestmark = needs_kubectl

CRD_NAME = "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com"
CRD_FILE = ROOT / "crds" / "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com.yaml"
EXAMPLES = sorted((ROOT / "crds" / "examples").glob("*.yaml"))


def _current_crd() -> dict[str, Any]:
    """The InferenceGatewayConfig CRD as the add-on's chart renders it: what ``helm upgrade``, an EKS
    add-on update and ``helm rollback`` apply (Helm never upgrades a chart's ``crds/`` folder)."""
    [crd] = [
        o
        for o in chart.render({})
        if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"] == CRD_NAME
    ]
    return dict(crd)


def test_the_chart_renders_the_crd_as_a_kept_template_equal_to_the_shipped_one() -> None:
    crd = _current_crd()
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["spec"] == yaml.safe_load(CRD_FILE.read_text())["spec"]
    assert not (ROOT / "addon" / "chart" / "inference-gateway" / "crds").exists()


def _server_limits(crd: dict[str, Any]) -> dict[str, Any]:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    extensions = root["properties"]["spec"]["properties"]["extensions"]
    node: dict[str, Any] = extensions["properties"]["serverLimits"]
    return node


def _previous_crd() -> dict[str, Any]:
    crd = copy.deepcopy(_current_crd())
    del _server_limits(crd)["properties"]["maxBodyBytesHeld"]
    return crd


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _gateway(**server_limits: Any) -> dict[str, Any]:
    example = ROOT / "crds" / "examples" / "single-model.yaml"
    [doc] = [d for d in yaml.safe_load_all(example.read_text()) if d]
    doc["metadata"]["name"] = "limits-gateway"  # beside the examples' own llama-gateway
    doc["spec"].setdefault("extensions", {})["serverLimits"] = server_limits
    return dict(doc)


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


@pytest.fixture
def kubeconfig(kube: FakeKubeApiServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "kubeconfig", namespace="inference")


def _apply_crd(kubeconfig: Path, tmp_path: Path, crd: dict[str, Any], name: str) -> None:
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", _write(tmp_path, name, crd))


def _server_limits_read(kubeconfig: Path, name: str) -> dict[str, Any]:
    obj = json.loads(kubectl(kubeconfig, "get", "igwc", name, "-o", "json"))
    limits: dict[str, Any] = obj["spec"]["extensions"]["serverLimits"]
    return limits


def _served_config_maps(kubeconfig: Path) -> dict[str, Any]:
    """The ConfigMap data the operator renders for each InferenceGatewayConfig as read now."""
    items = json.loads(kubectl(kubeconfig, "get", "igwc", "-o", "json"))["items"]
    return {o["metadata"]["name"]: config_map(o)["data"] for o in items}


def test_an_upgraded_crd_defaults_the_new_field_in_objects_written_before_it(
    kube: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    _apply_crd(kubeconfig, tmp_path, _previous_crd(), "previous.yaml")
    install_extension_crds(kube)
    gateway = _gateway(headerTimeout="10s")
    kubectl(kubeconfig, "apply", "-f", _write(tmp_path, "gateway.yaml", gateway))
    for example in EXAMPLES:
        kubectl(kubeconfig, "apply", "-f", str(example))
    assert "maxBodyBytesHeld" not in _server_limits_read(kubeconfig, gateway["metadata"]["name"])
    served_before = _served_config_maps(kubeconfig)

    _apply_crd(kubeconfig, tmp_path, _current_crd(), "current.yaml")

    # read back under the new CRD: its default appears, the stored object unchanged
    assert _server_limits_read(kubeconfig, gateway["metadata"]["name"])["maxBodyBytesHeld"] == 0
    # objects written under the previous CRD stay valid: applying them again is admitted
    for example in EXAMPLES:
        again = run_kubectl(kubeconfig, "apply", "-f", str(example))
        assert again.returncode == 0, again.stderr
    # the documented examples set no serverLimits: the operator serves them unchanged (no reload,
    # no restart); the config that has serverLimits gains the new default
    served_after = _served_config_maps(kubeconfig)
    changed = {name for name in served_before if served_before[name] != served_after[name]}
    assert changed == {gateway["metadata"]["name"]}


def test_a_rolled_back_crd_drops_the_new_field_from_reads_and_refuses_it_in_manifests(
    kubeconfig: Path, tmp_path: Path
) -> None:
    _apply_crd(kubeconfig, tmp_path, _current_crd(), "current.yaml")
    gateway = _gateway(maxBodyBytesHeld=64 * 1024 * 1024)
    manifest = _write(tmp_path, "gateway.yaml", gateway)
    kubectl(kubeconfig, "apply", "-f", manifest)
    stored = _server_limits_read(kubeconfig, gateway["metadata"]["name"])
    assert stored["maxBodyBytesHeld"] == 64 * 1024 * 1024

    _apply_crd(kubeconfig, tmp_path, _previous_crd(), "previous.yaml")

    # pruned silently on read: the older operator and kubectl never see it
    limits = _server_limits_read(kubeconfig, gateway["metadata"]["name"])
    assert "maxBodyBytesHeld" not in limits
    assert limits["headerTimeout"] == "10s"  # the fields the older CRD declares keep their defaults
    # applying the manifest that sets it again is refused, naming the field
    again = run_kubectl(kubeconfig, "apply", "-f", manifest)
    assert again.returncode != 0
    assert 'unknown field "spec.extensions.serverLimits.maxBodyBytesHeld"' in again.stderr
