"""The fake API server behaves as a real one where ``kubectl`` and the operator can tell: no-op
writes, deletion propagation and the garbage collector, CRD-served kinds, OpenAPI schemas, tables."""

from __future__ import annotations

import json
import logging
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.config.crd import CRD_PATH
from tests.fakes.kube_api import FakeKubeApiServer, running_fake_kube
from tests.operator.harness import (
    ROOT,
    OperatorThread,
    find,
    igwc,
    install_crd,
    owned_by,
    running_operator,
    wait_for,
)
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


def kubectl(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kubectl(kube.write_kubeconfig(tmp_path / "kubeconfig"), *args)


def _watch_types(kube: FakeKubeApiServer, path: str, resource_version: str) -> list[str]:
    query = urllib.parse.urlencode(
        {"watch": "true", "resourceVersion": resource_version, "timeoutSeconds": "1"}
    )
    with urllib.request.urlopen(f"{kube.url}{path}?{query}", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return [json.loads(line)["type"] for line in lines if line]


def _request(kube: FakeKubeApiServer, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{kube.url}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _config_map(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", **meta},
        "data": {"a": "1"},
    }


@needs_kubectl
def test_a_write_that_changes_nothing_stores_nothing(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """The API server compares a write with what it stores and, when equal, writes nothing: the same
    resourceVersion, no watch event, and ``kubectl patch`` says ``(no change)``. The fake bumped the
    version and sent MODIFIED for every write, so a controller looping on its own no-op writes (or
    waiting for an event one never sends) could not be caught."""
    stored = kube.add(_config_map("c"))
    version = stored["metadata"]["resourceVersion"]
    patched = kubectl(kube, tmp_path, "patch", "cm", "c", "--type=merge", "-p", '{"data":{"a":"1"}}')
    assert patched.returncode == 0, patched.stderr
    assert "configmap/c patched (no change)" in patched.stdout
    path = "/api/v1/namespaces/default/configmaps/c"
    replaced = _request(kube, "PUT", path, _request(kube, "GET", path))
    assert replaced["metadata"]["resourceVersion"] == version
    assert kube.store.resource_version == int(version)
    assert _watch_types(kube, "/api/v1/namespaces/default/configmaps", version) == []
    # A real change still is one.
    changed = kubectl(kube, tmp_path, "patch", "cm", "c", "--type=merge", "-p", '{"data":{"a":"2"}}')
    assert changed.stdout == "configmap/c patched\n"
    assert _watch_types(kube, "/api/v1/namespaces/default/configmaps", version) == ["MODIFIED"]


IGWC_PATH = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1"


def _status_of(kube: FakeKubeApiServer, path: str) -> int:
    try:
        with urllib.request.urlopen(f"{kube.url}{path}", timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_custom_kind_is_served_only_while_its_crd_is_installed(kube: FakeKubeApiServer) -> None:
    """A real API server answers 404 for InferenceGatewayConfigs until their CRD is installed, marks
    the CRD ``Established`` (a MODIFIED event after the ADDED one: kopf rescans discovery on it), and
    stops serving the kind, its objects gone, when the CRD is deleted. The fake served the kind with
    no CRD, so no test could see the operator start before its CRD."""
    assert _status_of(kube, f"{IGWC_PATH}/inferencegatewayconfigs") == 404
    assert _status_of(kube, IGWC_PATH) == 404
    before = kube.add(_config_map("first"))["metadata"]["resourceVersion"]  # "0" would list all
    install_crd(kube)
    assert _status_of(kube, f"{IGWC_PATH}/inferencegatewayconfigs") == 200
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert _watch_types(kube, crds, before) == ["ADDED", "MODIFIED"]
    crd = _request(kube, "GET", f"{crds}/inferencegatewayconfigs.inference.sagemaker.aws.amazon.com")
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["shortNames"] == ["igwc"]
    kube.add(igwc("chat"))
    _request(kube, "DELETE", f"{crds}/{crd['metadata']['name']}")
    assert _status_of(kube, f"{IGWC_PATH}/namespaces/inference/inferencegatewayconfigs/chat") == 404
    assert not any(o["kind"] == "InferenceGatewayConfig" for o in kube.store.iter_all())


def test_an_operator_started_before_its_crd_serves_the_first_config_at_once(
    kube: FakeKubeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``igw operator`` started before the InferenceGatewayConfig CRD is installed says so, and
    serves the first config as soon as the CRD and the config come. It remembered the kind as not
    served for 30 s: the first pass failed with a traceback (kopf retries 60 s later) and the gateway
    came only with a resync 30 s on; the fake, serving the kind with no CRD, hid all of it."""
    caplog.set_level(logging.WARNING)
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    with running_operator(config):
        wait_for(
            lambda: any("inferencegatewayconfigs" in r.getMessage() for r in caplog.records) or None,
            timeout=10,
            what="a warning naming the missing kind",
        )
        install_crd(kube)
        kube.add(igwc("chat"))
        wait_for(
            lambda: find(kube, "Deployment", "inference", "chat-gateway"), timeout=10, what="its gateway"
        )
    failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert failed == []


@needs_kubectl
def test_kubectl_get_prints_a_built_in_kind_s_columns(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """The API server's table printers give a Deployment READY/UP-TO-DATE/AVAILABLE (and CONTAINERS,
    IMAGES, SELECTOR with ``-o wide``), an HPA its reference, targets and bounds. The fake printed
    NAME and AGE only, so what ``kubectl get deploy`` tells a user of a gateway was never seen."""
    template = {
        "metadata": {"labels": {"app": "gw"}},
        "spec": {"containers": [{"name": "igw", "image": "igw:1"}]},
    }
    kube.add(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "chat-gateway", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "gw"}}, "template": template},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
        }
    )
    kube.add(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "chat-gateway", "namespace": "default"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat-gateway"},
                "minReplicas": 2,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 70},
                        },
                    }
                ],
            },
        }
    )
    lines = [line.split() for line in kubectl(kube, tmp_path, "get", "deploy").stdout.splitlines()]
    assert lines[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert lines[1][:4] == ["chat-gateway", "2/3", "3", "2"]
    wide = [
        line.split() for line in kubectl(kube, tmp_path, "get", "deploy", "-o", "wide").stdout.splitlines()
    ]
    assert wide[0][-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1][-3:] == ["igw", "igw:1", "app=gw"]
    hpa = kubectl(kube, tmp_path, "get", "hpa").stdout.splitlines()
    assert hpa[0].split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert "Deployment/chat-gateway   cpu: <unknown>/70%   2         5         0" in hpa[1]


@needs_kubectl
def test_kubectl_explain_reads_the_crd_s_published_schema(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """apiextensions-apiserver publishes each CRD version's schema in ``/openapi/v3`` (TypeMeta's
    documented ``apiVersion``/``kind``, ``metadata`` as ObjectMeta); ``kubectl explain igwc`` reads
    the descriptions there. The fake listed paths with no schema: ``GVK ... not found in OpenAPI
    schema``."""
    install_crd(kube)
    explained = kubectl(kube, tmp_path, "explain", "igwc.spec.tls")
    assert explained.returncode == 0, explained.stderr
    assert "KIND:       InferenceGatewayConfig" in explained.stdout
    assert "auto-issues a certificate" in " ".join(explained.stdout.split())
    top = kubectl(kube, tmp_path, "explain", "igwc").stdout
    assert "metadata\t<ObjectMeta>" in top
    assert "APIVersion defines the versioned schema" in top
    assert "Name must be unique" in kubectl(kube, tmp_path, "explain", "igwc.metadata.name").stdout


@needs_kubectl
@pytest.mark.parametrize("field", ["spec", "spec.schedulers", "status.schedulers"])
def test_kubectl_explain_describes_every_field_it_lists(
    kube: FakeKubeApiServer, tmp_path: Path, field: str
) -> None:
    """``kubectl explain igwc.spec.schedulers`` printed ``<no description>`` for most fields (and
    ``<empty>`` for ``spec``): the schema left them undescribed. Each field explain lists now shows
    the description the CRD carries for it (tests/config/test_crd_descriptions.py holds every
    field of every CRD to that)."""
    install_crd(kube)
    explained = kubectl(kube, tmp_path, "explain", f"igwc.{field}")
    assert explained.returncode == 0, explained.stderr
    assert "<no description>" not in explained.stdout
    assert "<empty>" not in explained.stdout
    node = yaml.safe_load((ROOT / CRD_PATH).read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in field.split("."):
        node = node["properties"][part]
        node = node.get("items", node)
    shown = " ".join(explained.stdout.split())
    for name, sub in node["properties"].items():
        assert " ".join(sub["description"].split()) in shown, (field, name)


def _owned_config_map(name: str, owner: dict[str, Any], **meta: Any) -> dict[str, Any]:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    body = _config_map(name, ownerReferences=[ref], **meta)
    body["metadata"]["namespace"] = owner["metadata"]["namespace"]
    return body


@needs_kubectl
def test_a_foreground_delete_keeps_the_owner_until_its_blocking_dependents_are_gone(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``kubectl delete --cascade=foreground``: the API server marks the owner (``deletionTimestamp``,
    the ``foregroundDeletion`` finalizer) and the garbage collector deletes its dependents, removing
    the finalizer once no ``blockOwnerDeletion`` dependent is left. The fake deleted the owner at once,
    so no test could see a config that stays Terminating behind a dependent held by a finalizer."""
    install_crd(kube)
    owner = kube.add(igwc("chat"))
    kube.add(_owned_config_map("held", owner, finalizers=["example.com/hold"]))
    kube.add(_owned_config_map("free", owner))
    deleted = kubectl(
        kube, tmp_path, "delete", "igwc", "chat", "-n", "inference", "--cascade=foreground", "--wait=false"
    )
    assert deleted.returncode == 0, deleted.stderr
    waiting = find(kube, "InferenceGatewayConfig", "inference", "chat")
    assert waiting is not None
    assert waiting["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert waiting["metadata"]["deletionTimestamp"]
    assert find(kube, "ConfigMap", "inference", "free") is None
    held = find(kube, "ConfigMap", "inference", "held")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    held["metadata"]["finalizers"] = []
    _request(kube, "PUT", "/api/v1/namespaces/inference/configmaps/held", held)
    assert find(kube, "ConfigMap", "inference", "held") is None
    assert find(kube, "InferenceGatewayConfig", "inference", "chat") is None


def test_the_garbage_collector_takes_what_a_gone_owner_s_uid_still_names(kube: FakeKubeApiServer) -> None:
    """A dependent written with an owner reference whose uid is gone (the owner deleted, or deleted
    and made again under its name) is collected; one that also has a live owner only loses the
    dangling reference. The fake left such objects behind for good."""
    install_crd(kube)
    first = kube.add(igwc("chat"))
    api = f"{IGWC_PATH}/namespaces/inference/inferencegatewayconfigs/chat"
    _request(kube, "DELETE", api)
    again = kube.add(igwc("chat"))
    kube.add(_owned_config_map("stale", first))
    assert find(kube, "ConfigMap", "inference", "stale") is None
    shared = _owned_config_map("shared", first)
    live = _owned_config_map("x", again)["metadata"]["ownerReferences"][0] | {"controller": False}
    shared["metadata"]["ownerReferences"].append(live)
    kube.add(shared)
    kept = find(kube, "ConfigMap", "inference", "shared")
    assert kept is not None
    assert [ref["uid"] for ref in kept["metadata"]["ownerReferences"]] == [again["metadata"]["uid"]]


@needs_kubectl
def test_a_foreground_delete_of_a_config_the_operator_serves_takes_its_data_plane(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    """The operator, seeing its config marked for foreground deletion, writes nothing back (a write
    would re-create a dependent the collector just deleted and hold the config); ``kubectl delete
    --cascade=foreground`` returns with the config and its whole data plane gone."""
    uid = cluster.add(igwc("chat"))["metadata"]["uid"]
    wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="the gateway")
    deleted = kubectl(
        cluster,
        tmp_path,
        "delete",
        "igwc",
        "chat",
        "-n",
        "inference",
        "--cascade=foreground",
        "--timeout=30s",
    )
    assert deleted.returncode == 0, deleted.stderr
    assert find(cluster, "InferenceGatewayConfig", "inference", "chat") is None
    assert owned_by(cluster, uid) == []
