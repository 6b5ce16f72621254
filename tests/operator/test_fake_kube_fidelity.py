"""The fake API server behaves as a real one where ``kubectl`` and the operator can tell: no-op
writes, deletion propagation and the garbage collector, CRD-served kinds, OpenAPI schemas, tables."""

from __future__ import annotations

import base64
import copy
import json
import logging
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.config.crd import CRD_PATH
from tests.fakes.kube_api import FakeKubeApiServer, make_pod, running_fake_kube
from tests.fakes.kube_crds import ingress_class_params_crd
from tests.fakes.kube_printers import human_duration
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


def test_an_add_on_s_kinds_are_served_only_once_its_crds_are_installed(kube: FakeKubeApiServer) -> None:
    """cert-manager's kinds and the Load Balancer Controller's IngressClassParams are CRDs: a cluster
    without the add-on answers 404 for them and lists neither group in discovery. The fake served
    Certificates and IngressClassParams as built-in kinds, so the operator's "install cert-manager"
    path and the audit's "IngressClassParams not installed" path were never met by a 404 here."""
    certificates = "/apis/cert-manager.io/v1/namespaces/inference/certificates"
    issuers = "/apis/cert-manager.io/v1/clusterissuers"
    params = "/apis/elbv2.k8s.aws/v1beta1/ingressclassparams"

    def groups() -> set[str]:
        return {group["name"] for group in _request(kube, "GET", "/apis")["groups"]}

    assert [_status_of(kube, path) for path in (certificates, issuers, params)] == [404, 404, 404]
    assert not {"cert-manager.io", "elbv2.k8s.aws"} & groups()
    kube.install_cert_manager()
    kube.install_load_balancer_controller()
    assert [_status_of(kube, path) for path in (certificates, issuers, params)] == [200, 200, 200]
    assert {"cert-manager.io", "elbv2.k8s.aws"} <= groups()
    kube.add(
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": "chat", "namespace": "inference"},
            "spec": {"secretName": "chat-tls", "issuerRef": {"kind": "ClusterIssuer", "name": "ca"}},
        }
    )
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    _request(kube, "DELETE", f"{crds}/certificates.cert-manager.io")  # cert-manager uninstalled
    assert _status_of(kube, certificates) == 404
    assert not any(o["kind"] == "Certificate" for o in kube.store.iter_all())


def test_a_caller_rbac_refuses_gets_403_for_a_kind_that_is_not_served_too(kube: FakeKubeApiServer) -> None:
    """The API server authorizes a request on its URL before any handler looks the resource up, so
    a caller whose RBAC grants nothing of ``cert-manager.io`` gets 403 on a cluster without
    cert-manager as well (the RBAC authorizer's message, the resource qualified by its group), and
    only a caller it allows learns the kind is not there (404). The fake routed first and answered
    404, so a test of a component under a chart's RBAC never saw the refusal a cluster gives."""
    certificates = "/apis/cert-manager.io/v1/namespaces/inference/certificates"
    kube.enforce_rbac(
        [
            {
                "kind": "ClusterRole",
                "metadata": {"name": "reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            }
        ]
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{kube.url}{certificates}", timeout=10)
    assert refused.value.code == 403
    message = json.loads(refused.value.read())["message"]
    assert message == (
        'certificates.cert-manager.io is forbidden: User "system:serviceaccount:igw:test" cannot list '
        'resource "certificates" in API group "cert-manager.io" in the namespace "inference"'
    )
    assert _status_of(kube, "/api/v1/namespaces/inference/configmaps") == 200
    kube.allow_all()
    assert _status_of(kube, certificates) == 404


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


def _ago(seconds: int) -> str:
    """A timestamp ``seconds`` ago; the tests pick ages whose text holds for tens of seconds."""
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@needs_kubectl
def test_kubectl_get_events_prints_the_api_server_s_event_columns(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """The API server prints an Event as LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (no NAME: it is
    the last ``-o wide`` column, after SUBOBJECT, SOURCE, FIRST SEEN and COUNT), the times as
    ``duration.HumanDuration`` writes them (``4h30m``, not ``4h``). The fake printed NAME and AGE, so
    what ``kubectl get events`` shows of the operator's events was never seen."""
    involved = {"apiVersion": "v1", "kind": "InferenceGatewayConfig", "name": "chat", "namespace": "default"}
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "chat.a", "namespace": "default"},
            "involvedObject": involved,
            "reason": "ReadyReady",
            "message": "Ready=True: 2 gateway replica(s) serving 1 scheduler(s)\n",
            "type": "Normal",
            "count": 3,
            "firstTimestamp": _ago(3 * 86400 + 5 * 3600 + 20),
            "lastTimestamp": _ago(4 * 3600 + 30 * 60 + 20),
            "source": {"component": "igw-operator", "host": "vm-1"},
        }
    )
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "chat.b", "namespace": "default"},
            "involvedObject": {**involved, "fieldPath": "spec.schedulers[0]"},
            "reason": "Scaled",
            "message": "scaled",
            "type": "Warning",
            "eventTime": _ago(20 * 60 + 20).replace("Z", ".250000Z"),
            "series": {"count": 7, "lastObservedTime": _ago(3 * 3600 + 20).replace("Z", ".000000Z")},
            "reportingComponent": "igw-operator",
            "reportingInstance": "vm-2",
        }
    )
    lines = [line.split() for line in kubectl(kube, tmp_path, "get", "events").stdout.splitlines()]
    assert lines[0] == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1][:5] == ["4h30m", "Normal", "ReadyReady", "inferencegatewayconfig/chat", "Ready=True:"]
    assert lines[1][-1] == "scheduler(s)"  # the message's last newline trimmed, as printEvent does
    assert lines[2] == ["3h", "Warning", "Scaled", "inferencegatewayconfig/chat", "scaled"]
    wide = kubectl(kube, tmp_path, "get", "events", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == [
        *("LAST", "SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE"),
        *("FIRST", "SEEN", "COUNT", "NAME"),
    ]
    assert wide[1].split()[-3:] == ["3d5h", "3", "chat.a"]
    assert "igw-operator, vm-1" in wide[1]
    assert wide[2].split()[-4:] == ["scaled", "20m", "7", "chat.b"]
    assert "spec.schedulers[0]" in wide[2]
    assert "igw-operator, vm-2" in wide[2]


@needs_kubectl
def test_kubectl_get_a_category_lists_its_kinds(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """Discovery gives the workloads, Services and autoscalers the ``all`` category and a CRD the
    ``names.categories`` it declares (``inference`` for the InferenceGatewayConfig), so ``kubectl
    get all`` and ``kubectl get inference`` list them; the fake listed no categories, and kubectl
    refused both (``the server doesn't have a resource type "all"``)."""
    install_crd(kube)
    kube.add(make_pod(name="llama-0", namespace="inference", labels={"app": "llama"}))
    kube.add({**_config_map("cm"), "metadata": {"name": "cm", "namespace": "inference"}})
    kube.add(igwc("chat"))
    everything = kubectl(kube, tmp_path, "get", "all", "-n", "inference", "-o", "name")
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout.split() == ["pod/llama-0"]
    inference = kubectl(kube, tmp_path, "get", "inference", "-A", "-o", "name")
    assert inference.returncode == 0, inference.stderr
    assert inference.stdout.split() == ["inferencegatewayconfig.inference.sagemaker.aws.amazon.com/chat"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (4 * 3600 + 30 * 60, "4h30m"),
        (8 * 3600 + 59 * 60, "8h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (8 * 86400 + 5 * 3600, "8d"),
        (2 * 365 * 86400 + 30 * 86400, "2y30d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_are_printed_as_the_api_server_prints_them(seconds: int, text: str) -> None:
    """apimachinery's ``duration.HumanDuration``: a second unit while the first is small."""
    assert human_duration(seconds) == text


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


def _refusal(
    kube: FakeKubeApiServer, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, str]:
    """The code and Status message of a request the server refuses."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{kube.url}{path}", data=data, method=method)
    request.add_header("Content-Type", content_type)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    return refused.value.code, str(json.loads(refused.value.read())["message"])


def test_an_update_must_carry_the_name_and_namespace_on_its_url(kube: FakeKubeApiServer) -> None:
    """A PUT of another object's body, one naming another namespace, and a patch renaming the object
    are refused 400 by the API server's update and patch handlers. The fake stored each under the
    URL's name, so a client writing the wrong object's body passed here."""
    kube.add(_config_map("a"))
    path = "/api/v1/namespaces/default/configmaps/a"
    assert _refusal(kube, "PUT", path, _config_map("b")) == (
        400,
        "the name of the object (b) does not match the name on the URL (a)",
    )
    assert _refusal(kube, "PUT", path, _config_map("a", namespace="other")) == (
        400,
        "the namespace of the provided object does not match the namespace sent on the request",
    )
    rename = {"metadata": {"name": "renamed"}}
    assert _refusal(kube, "PATCH", path, rename, "application/merge-patch+json") == (
        400,
        "the name of the object (renamed) does not match the name on the URL (a)",
    )
    assert _request(kube, "GET", path)["metadata"]["resourceVersion"] == "1"  # nothing written
    assert _request(kube, "PUT", path, {**_config_map("a"), "data": {"a": "2"}})["data"] == {"a": "2"}


def test_patch_options_are_validated_as_the_api_server_validates_them(kube: FakeKubeApiServer) -> None:
    """An apply patch without ``fieldManager`` and a merge patch with ``force`` are refused 422
    (``ValidatePatchOptions``); the fake applied both."""
    kube.add(_config_map("a"))
    path = "/api/v1/namespaces/default/configmaps/a"
    invalid = 'PatchOptions.meta.k8s.io "" is invalid: '
    apply = yaml.safe_dump(_config_map("a"))
    request = urllib.request.Request(f"{kube.url}{path}", data=apply.encode(), method="PATCH")
    request.add_header("Content-Type", "application/apply-patch+yaml")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 422
    message = json.loads(refused.value.read())["message"]
    assert message == f"{invalid}fieldManager: Required value: is required for apply patch"
    assert _refusal(
        kube, "PATCH", f"{path}?force=true", {"data": {"a": "2"}}, "application/merge-patch+json"
    ) == (
        422,
        f"{invalid}force: Forbidden: may not be specified for non-apply patch",
    )


@pytest.mark.parametrize(
    "query",
    ["limit=ten", "watch=true&timeoutSeconds=1.5", "watch=true&resourceVersion=latest"],
)
def test_a_malformed_integer_option_is_refused_400_not_a_crash(kube: FakeKubeApiServer, query: str) -> None:
    """A list's ``limit`` and a watch's ``timeoutSeconds`` and ``resourceVersion`` are integers: the
    API server refuses one that is not with 400. The fake raised ``ValueError``: a 500, and for a
    watch a 200 stream cut off before its first event, which a client reads as a dropped connection
    and retries forever."""
    code, message = _refusal(kube, "GET", f"/api/v1/namespaces/default/configmaps?{query}")
    assert code == 400
    assert "must be an integer" in message


def test_a_json_patch_below_a_missing_parent_is_refused(kube: FakeKubeApiServer) -> None:
    """RFC 6902: an operation's target must have a parent. ``add`` of ``/metadata/annotations/team``
    to an object with no annotations is the classic ``kubectl patch --type=json`` mistake the API
    server refuses (422, "doc is missing path"); the fake made the missing ``annotations`` and
    applied it, so a client sending it passed here."""
    kube.add(_config_map("a"))
    path = "/api/v1/namespaces/default/configmaps/a"
    patch = "application/json-patch+json"
    add = [{"op": "add", "path": "/metadata/annotations/team", "value": "x"}]
    assert _refusal(kube, "PATCH", path, add, patch) == (
        422,
        'add operation does not apply: doc is missing path: "/metadata/annotations/team": missing value',
    )
    remove = [{"op": "remove", "path": "/metadata/labels/team"}]
    assert _refusal(kube, "PATCH", path, remove, patch)[0] == 422
    assert "annotations" not in _request(kube, "GET", path)["metadata"]
    parent_first = [{"op": "add", "path": "/metadata/annotations", "value": {}}, *add]
    request = urllib.request.Request(
        f"{kube.url}{path}", data=json.dumps(parent_first).encode(), method="PATCH"
    )
    request.add_header("Content-Type", patch)
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["metadata"]["annotations"] == {"team": "x"}


def _deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
        "status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2},
    }


@needs_kubectl
def test_a_built_in_kind_s_status_is_written_through_its_status_subresource_only(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A Deployment's (a Pod's, a Service's...) ``status`` is a subresource: a create starts without
    the status sent, an update or patch of the object keeps the stored one (``kubectl patch`` of it
    prints ``(no change)``), and only a ``/status`` write - the controller's - changes it; discovery
    lists ``deployments/status``, and a ConfigMap has no ``/status``. The fake wrote the status
    through the object, so a client reporting readiness it had made up passed here."""
    created = _request(kube, "POST", "/apis/apps/v1/namespaces/default/deployments", _deployment("web"))
    assert "readyReplicas" not in (created.get("status") or {})
    patched = kubectl(
        kube, tmp_path, "patch", "deploy", "web", "--type=merge", "-p", '{"status":{"readyReplicas":2}}'
    )
    assert patched.returncode == 0, patched.stderr
    assert "(no change)" in patched.stdout
    path = "/apis/apps/v1/namespaces/default/deployments/web"
    assert "readyReplicas" not in (_request(kube, "GET", path).get("status") or {})
    status = kubectl(
        kube,
        tmp_path,
        "patch",
        "deploy",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"readyReplicas":2}}',
    )
    assert status.returncode == 0, status.stderr
    assert _request(kube, "GET", path)["status"]["readyReplicas"] == 2
    resources = {r["name"] for r in _request(kube, "GET", "/apis/apps/v1")["resources"]}
    assert {"deployments/status", "statefulsets/status"} <= resources
    pod = make_pod(name="p")
    assert _request(kube, "POST", "/api/v1/namespaces/default/pods", pod)["status"] == {"phase": "Pending"}
    kube.add(_config_map("a"))
    assert _status_of(kube, "/api/v1/namespaces/default/configmaps/a/status") == 404


def test_a_crd_version_not_served_answers_404(kube: FakeKubeApiServer) -> None:
    """A CRD version marked ``served: false`` is not served (404), and one an update stops serving is
    served no more; the fake served every version the CRD listed."""
    crd = ingress_class_params_crd()
    old = {**copy.deepcopy(crd["spec"]["versions"][0]), "name": "v1alpha1", "storage": False, "served": False}
    crd["spec"]["versions"].append(old)
    created = kube.add(crd)
    v1alpha1, v1beta1 = (f"/apis/elbv2.k8s.aws/{v}/ingressclassparams" for v in ("v1alpha1", "v1beta1"))
    assert (_status_of(kube, v1alpha1), _status_of(kube, v1beta1)) == (404, 200)
    created["spec"]["versions"][1]["served"] = True
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{created['metadata']['name']}"
    created = _request(kube, "PUT", path, created)
    assert (_status_of(kube, v1alpha1), _status_of(kube, v1beta1)) == (200, 200)
    created["spec"]["versions"][1]["served"] = False
    _request(kube, "PUT", path, created)
    assert (_status_of(kube, v1alpha1), _status_of(kube, v1beta1)) == (404, 200)


def _answer(
    kube: FakeKubeApiServer, method: str, path: str, body: Any, content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    """``(status code, JSON body)`` of a request, an error's included."""
    request = urllib.request.Request(f"{kube.url}{path}", data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def test_a_write_of_another_api_version_or_kind_is_refused(kube: FakeKubeApiServer) -> None:
    """The API server decodes a write with the URL's resource as defaults only: a body naming another
    API version is refused 400, another kind 400 (422 ``kind: Invalid value`` for a custom resource),
    and nothing is stored. The fake rewrote both to the URL's and stored the write (201)."""
    configmaps = "/api/v1/namespaces/default/configmaps"
    code, answer = _answer(kube, "POST", configmaps, {**_config_map("a"), "apiVersion": "v2"})
    assert (code, answer["reason"]) == (400, "BadRequest")
    assert (
        answer["message"] == "the API version in the data (v2) does not match the expected API version (v1)"
    )
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}, "data": {}}
    code, answer = _answer(kube, "POST", configmaps, secret)
    assert (code, answer["reason"]) == (400, "BadRequest")
    assert answer["message"].startswith('Secret in version "v1" cannot be handled as a ConfigMap')
    assert _request(kube, "GET", configmaps)["items"] == []
    kube.add(_config_map("c"))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "c"}}
    assert _answer(kube, "PUT", f"{configmaps}/c", deployment)[0] == 400
    assert _request(kube, "GET", f"{configmaps}/c")["data"] == {"a": "1"}
    apply = {**_config_map("c"), "apiVersion": "v2"}
    code, answer = _answer(
        kube, "PATCH", f"{configmaps}/c?fieldManager=t", apply, "application/apply-patch+yaml"
    )
    assert (code, answer["message"]) == (
        400,
        "Incorrect version specified in apply patch. Specified patch version: v2, expected: v1",
    )
    install_crd(kube)
    igwcs = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/inference/inferencegatewayconfigs"
    code, answer = _answer(kube, "POST", igwcs, {**igwc("chat"), "kind": "Gateway"})
    assert (code, answer["reason"]) == (422, "Invalid")
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "Gateway": must be InferenceGatewayConfig',
            "field": "kind",
        }
    ]
    untyped = {k: v for k, v in _config_map("d").items() if k not in ("apiVersion", "kind")}
    code, answer = _answer(kube, "POST", configmaps, untyped)  # left out: the URL's
    assert (code, answer["apiVersion"], answer["kind"]) == (201, "v1", "ConfigMap")


def test_only_kinds_with_a_generation_get_one(kube: FakeKubeApiServer) -> None:
    """``metadata.generation`` is kept by the strategies of kinds with a spec (a Deployment: 1, then
    one more per spec change) and for every custom resource, never for a ConfigMap; the fake gave
    every object one and bumped a ConfigMap's on each data change."""
    configmaps = "/api/v1/namespaces/default/configmaps"
    created = _request(
        kube, "POST", configmaps, {**_config_map("a"), "metadata": {"name": "a", "generation": 7}}
    )
    assert "generation" not in created["metadata"]
    replaced = _request(kube, "PUT", f"{configmaps}/a", {**created, "data": {"a": "2"}})
    assert "generation" not in replaced["metadata"]
    deployments = "/apis/apps/v1/namespaces/default/deployments"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    assert _request(kube, "POST", deployments, deployment)["metadata"]["generation"] == 1
    patch = {"spec": {"replicas": 2}}
    code, patched = _answer(kube, "PATCH", f"{deployments}/web", patch, "application/merge-patch+json")
    assert (code, patched["metadata"]["generation"]) == (200, 2)
    install_crd(kube)
    assert kube.add(igwc("chat"))["metadata"]["generation"] == 1


def test_deleting_a_crd_ends_the_watches_on_its_kind(kube: FakeKubeApiServer) -> None:
    """A CRD's deletion takes its storage away: a watch open on its kind gets the DELETED events of
    its objects and then ends (a client re-lists and gets 404). The fake kept the watch open, silent,
    until its ``timeoutSeconds``."""
    install_crd(kube)
    kube.add(igwc("chat"))
    path = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/inference/inferencegatewayconfigs"
    query = urllib.parse.urlencode({"watch": "true", "timeoutSeconds": "60"})
    lines: list[str] = []

    def read() -> None:
        with urllib.request.urlopen(f"{kube.url}{path}?{query}", timeout=90) as response:
            lines.extend(response.read().decode().splitlines())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: kube.open_watches() or None, what="the watch open")
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
    _request(kube, "DELETE", crd + "inferencegatewayconfigs.inference.sagemaker.aws.amazon.com")
    reader.join(10)
    assert not reader.is_alive(), "the watch stayed open after its CRD was deleted"
    assert [json.loads(line)["type"] for line in lines if line] == ["ADDED", "DELETED"]
    assert kube.open_watches() == []
    assert _status_of(kube, path) == 404


@needs_kubectl
def test_a_create_carrying_a_resource_version_is_refused_as_etcd3_refuses_it(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """The etcd3 store's ``Create`` refuses an object with a resourceVersion
    (``storage.ErrResourceVersionSetOnCreate``), an error no ``Status``, so the API server answers
    500 with no reason and that message; the fake stored it, so a restore of an unstripped export
    (``kubectl get -o yaml``) by a client that sends it as it is (``kubectl create --raw``, the
    ``kubernetes`` client, kopf) passed here and fails on a cluster. ``kubectl create -f`` itself
    clears the field first (``resource.Helper.Create``); a dry run skips the check (the dry-run
    storage); ``"-1"``, which does not parse as a version, gets through (kubernetes#113847)."""
    install_crd(kube)
    exported = igwc("chat")
    exported["metadata"]["resourceVersion"] = "18"
    manifest = tmp_path / "chat.json"
    manifest.write_text(json.dumps(exported))
    collection = f"{IGWC_PATH}/namespaces/inference/inferencegatewayconfigs"
    refused = kubectl(kube, tmp_path, "create", "--raw", collection, "-f", str(manifest))
    assert refused.returncode != 0
    assert "Error from server: resourceVersion should not be set on objects to be created" in refused.stderr
    assert find(kube, "InferenceGatewayConfig", "inference", "chat") is None
    with pytest.raises(urllib.error.HTTPError) as raw:
        _request(kube, "POST", collection, exported)
    status = json.loads(raw.value.read())
    assert (raw.value.code, status["code"], "reason" in status) == (500, 500, False)
    assert status["message"] == "resourceVersion should not be set on objects to be created"
    assert _request(kube, "POST", f"{collection}?dryRun=All", exported)["metadata"]["name"] == "chat"

    created = kubectl(kube, tmp_path, "create", "-f", str(manifest))  # kubectl clears it
    assert created.returncode == 0, created.stderr
    assert find(kube, "InferenceGatewayConfig", "inference", "chat")["metadata"]["resourceVersion"] != "18"  # type: ignore[index]
    unparsed = _config_map("c", resourceVersion="-1")
    made = _request(kube, "POST", "/api/v1/namespaces/default/configmaps", unparsed)
    assert made["metadata"]["name"] == "c"


@needs_kubectl
def test_a_create_over_an_object_being_deleted_says_so(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """genericregistry ``Store.Create`` prefixes the AlreadyExists message with ``object is being
    deleted: `` while the object in the way has a ``deletionTimestamp`` (a finalizer holds it), and
    names the resource group-qualified (``deployments.apps``); the fake said only ``... already
    exists`` for both, so a client re-creating what it just deleted could not tell a finalizer's wait
    from a name clash as it can on a cluster."""
    manifest = tmp_path / "held.json"
    manifest.write_text(json.dumps(_config_map("held", finalizers=["example.com/hold"])))
    assert kubectl(kube, tmp_path, "create", "-f", str(manifest)).returncode == 0
    clash = kubectl(kube, tmp_path, "create", "-f", str(manifest))
    assert 'Error from server (AlreadyExists): error when creating "' in clash.stderr
    assert ': configmaps "held" already exists' in clash.stderr
    assert "being deleted" not in clash.stderr

    assert kubectl(kube, tmp_path, "delete", "configmap", "held", "--wait=false").returncode == 0
    assert find(kube, "ConfigMap", "default", "held")["metadata"]["deletionTimestamp"]  # type: ignore[index]
    refused = kubectl(kube, tmp_path, "create", "-f", str(manifest))
    assert refused.returncode != 0
    assert ': object is being deleted: configmaps "held" already exists' in refused.stderr

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}},
        },
    }
    kube.add(deployment)
    with pytest.raises(urllib.error.HTTPError) as raw:
        _request(kube, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment)
    status = json.loads(raw.value.read())
    assert (status["code"], status["reason"]) == (409, "AlreadyExists")
    assert status["message"] == 'deployments.apps "web" already exists'
    assert status["details"] == {"name": "web", "group": "apps", "kind": "deployments"}


@needs_kubectl
def test_not_found_names_the_resource_with_its_group_and_sends_details(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``NewNotFound`` names the resource group-qualified (``deployments.apps "x" not found``) and
    sends ``details`` (name, group, kind), on a read, a write and a delete alike. The fake said
    ``deployments "x" not found`` with no details, so ``kubectl`` printed what no cluster prints and a
    client reading ``details`` found none."""
    missing = kubectl(kube, tmp_path, "get", "deployment", "nope", "-n", "default")
    assert missing.returncode != 0
    assert 'Error from server (NotFound): deployments.apps "nope" not found' in missing.stderr
    gone = kubectl(kube, tmp_path, "delete", "configmap", "nope", "-n", "default")
    assert 'Error from server (NotFound): configmaps "nope" not found' in gone.stderr

    deployment = "/apis/apps/v1/namespaces/default/deployments/nope"
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nope"}}
    for method, path, sent in (
        ("GET", deployment, None),
        ("PUT", deployment, body),
        ("DELETE", deployment, None),
    ):
        with pytest.raises(urllib.error.HTTPError) as raw:
            _request(kube, method, path, sent)
        status = json.loads(raw.value.read())
        assert (method, status["code"], status["reason"]) == (method, 404, "NotFound")
        assert status["message"] == 'deployments.apps "nope" not found'
        assert status["details"] == {"name": "nope", "group": "apps", "kind": "deployments"}
    with pytest.raises(urllib.error.HTTPError) as raw:
        _request(kube, "GET", "/api/v1/namespaces/default/configmaps/nope")
    assert json.loads(raw.value.read())["details"] == {"name": "nope", "kind": "configmaps"}


@needs_kubectl
def test_a_protobuf_body_is_refused_415_as_by_a_server_without_protobuf(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``kubectl create namespace|deployment|configmap`` (typed clients) send
    ``application/vnd.kubernetes.protobuf``; the fake cannot decode it and answers as a server
    without protobuf does: 415 ``UnsupportedMediaType`` naming the types it takes (client-go retries
    in JSON only after a 415 to CBOR), nothing stored. It read the body as text: 500 for a
    Deployment, 400 ``malformed request body`` for a Namespace."""
    unsupported = (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml"
    )
    done = kubectl(kube, tmp_path, "create", "namespace", "ns1")
    assert (done.returncode, done.stderr.strip()) == (
        1,
        f"Error from server (UnsupportedMediaType): {unsupported}",
    )
    done = kubectl(kube, tmp_path, "-n", "default", "create", "deployment", "web", "--image=x")
    assert (done.returncode, done.stderr.strip()) == (1, f"error: failed to create deployment: {unsupported}")
    code, answer = _answer(
        kube, "POST", "/api/v1/namespaces/default/configmaps", _config_map("a"), "application/cbor"
    )
    assert (code, answer["reason"], answer["message"]) == (415, "UnsupportedMediaType", unsupported)
    assert _request(kube, "GET", "/apis/apps/v1/namespaces/default/deployments")["items"] == []
    manifest = tmp_path / "ns.yaml"
    manifest.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    )
    assert kubectl(kube, tmp_path, "create", "-f", str(manifest)).returncode == 0  # JSON: created


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@needs_kubectl
def test_a_secret_s_string_data_is_merged_into_data_and_never_returned(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """``stringData`` is converted into ``data`` (base64, over a key there) on every write and never
    stored nor returned, as the conversion to the internal type does; so an immutable Secret's
    ``stringData`` edit is a ``data`` change, refused. The fake stored ``stringData`` as sent."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "data": {"a": _b64("1"), "keep": _b64("k")},
        "stringData": {"a": "2", "b": "x"},
    }
    manifest = tmp_path / "secret.yaml"
    manifest.write_text(yaml.safe_dump(secret))
    done = kubectl(kube, tmp_path, "create", "-f", str(manifest), "-o", "json")
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert "stringData" not in created
    assert created["data"] == {"a": _b64("2"), "keep": _b64("k"), "b": _b64("x")}
    patch = json.dumps({"stringData": {"c": "y"}})
    done = kubectl(kube, tmp_path, "-n", "default", "patch", "secret", "s", "--type=merge", "-p", patch)
    assert done.returncode == 0, done.stderr
    stored = _request(kube, "GET", "/api/v1/namespaces/default/secrets/s")
    assert "stringData" not in stored
    assert stored["data"]["c"] == _b64("y")
    immutable = {**secret, "metadata": {"name": "i", "namespace": "default"}, "immutable": True}
    manifest.write_text(yaml.safe_dump(immutable))
    assert kubectl(kube, tmp_path, "create", "-f", str(manifest)).returncode == 0
    patch = json.dumps({"stringData": {"a": "3"}})
    done = kubectl(kube, tmp_path, "-n", "default", "patch", "secret", "i", "--type=merge", "-p", patch)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        'The Secret "i" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )


def test_a_custom_resource_without_a_status_subresource_gets_a_generation_per_status_change(
    kube: FakeKubeApiServer,
) -> None:
    """apiextensions' strategy bumps a custom resource's ``metadata.generation`` on any change
    outside ``metadata``: where its CRD declares no ``/status`` subresource, a status change is one
    (where it declares one, the main resource's write keeps the stored status). The fake compared
    all but ``metadata`` and ``status``, so the generation stayed and a controller's
    ``observedGeneration`` logic saw what no cluster shows."""
    kube.install_load_balancer_controller()
    path = "/apis/elbv2.k8s.aws/v1beta1/ingressclassparams"
    params = {"apiVersion": "elbv2.k8s.aws/v1beta1", "kind": "IngressClassParams", "metadata": {"name": "p"}}
    created = _request(kube, "POST", path, {**params, "spec": {"scheme": "internal"}})
    assert created["metadata"]["generation"] == 1
    labelled = _request(
        kube, "PUT", f"{path}/p", {**created, "metadata": {**created["metadata"], "labels": {"a": "b"}}}
    )
    assert labelled["metadata"]["generation"] == 1  # metadata only
    with_status = _request(kube, "PUT", f"{path}/p", {**labelled, "status": {"ready": True}})
    assert (with_status["status"], with_status["metadata"]["generation"]) == ({"ready": True}, 2)
    code, patched = _answer(
        kube, "PATCH", f"{path}/p", {"status": {"ready": False}}, "application/merge-patch+json"
    )
    assert (code, patched["metadata"]["generation"]) == (200, 3)
    install_crd(kube)  # declares /status: a write of the object keeps the stored status
    stored = kube.add(igwc("chat"))
    igwcs = "/apis/inference.sagemaker.aws.amazon.com/v1alpha1/namespaces/inference/inferencegatewayconfigs"
    replaced = _request(kube, "PUT", f"{igwcs}/chat", {**stored, "status": {"phase": "Ready"}})
    assert replaced["metadata"]["generation"] == 1
