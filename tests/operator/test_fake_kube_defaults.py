"""What the fake API server fills in on a write, as kube-apiserver does, seen through the real
``kubectl``: Service cluster IPs and node ports, workload and pod defaults, generated names, and the
status of the Pods :func:`tests.fakes.kube_api.make_pod` builds."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.kube_api import FakeKubeApiServer, make_pod, running_fake_kube
from tests.fakes.kube_services import SERVICE_CIDR
from tests.fakes.kube_store import GENERATED_NAME_ALPHABET
from tests.operator.kubectl_cli import needs_kubectl, run_kubectl

pytestmark = needs_kubectl


@pytest.fixture
def kube() -> Iterator[FakeKubeApiServer]:
    with running_fake_kube() as server:
        yield server


def kubectl(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kubectl(kube.write_kubeconfig(tmp_path / "kubeconfig"), *args)


def _service(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": "x"}, "ports": [{"name": "http", "port": 80}], **spec},
    }


def _apply(kube: FakeKubeApiServer, tmp_path: Path, *docs: dict[str, Any], verb: str = "apply") -> str:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    done = kubectl(kube, tmp_path, verb, "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    return done.stdout


def _rows(kube: FakeKubeApiServer, tmp_path: Path, *args: str) -> dict[str, list[str]]:
    done = kubectl(kube, tmp_path, "get", *args, "--no-headers")
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}


def test_services_get_a_cluster_ip_and_node_ports(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """``kubectl get svc`` shows an allocated CLUSTER-IP from the service CIDR and ``80:3xxxx/TCP``
    for NodePort and LoadBalancer Services (one node port each, no two alike); a headless Service
    keeps ``None`` and an ExternalName one gets no IP. The fake showed ``<none>`` and ``80/TCP``."""
    _apply(
        kube,
        tmp_path,
        _service("plain"),
        _service("np", type="NodePort"),
        _service("lb", type="LoadBalancer"),
        _service("headless", clusterIP="None"),
        {**_service("ext"), "spec": {"type": "ExternalName", "externalName": "example.com"}},
    )
    rows = _rows(kube, tmp_path, "svc")
    ips = [rows[name][1] for name in ("plain", "np", "lb")]
    assert all(ipaddress.ip_address(ip) in SERVICE_CIDR for ip in ips), rows
    assert len(set(ips)) == 3
    assert rows["headless"][1] == "None"
    assert rows["ext"][1] == "<none>"
    assert rows["plain"][3] == "80/TCP"
    node_ports = [int(rows[name][3].split(":")[1].split("/")[0]) for name in ("np", "lb")]
    assert all(30000 <= port <= 32767 for port in node_ports), rows
    assert node_ports[0] != node_ports[1]
    stored = json.loads(kubectl(kube, tmp_path, "get", "svc", "plain", "-o", "json").stdout)["spec"]
    assert stored["clusterIPs"] == [stored["clusterIP"]]
    assert (stored["type"], stored["sessionAffinity"], stored["ports"][0]["targetPort"]) == (
        "ClusterIP",
        "None",
        80,
    )


def test_a_taken_cluster_ip_or_node_port_is_refused_and_a_free_one_kept(
    kube: FakeKubeApiServer, tmp_path: Path
) -> None:
    """A requested clusterIP or nodePort is kept when free; one another Service holds is refused 422
    with the allocators' messages; deleting the holder frees it; a replace that leaves them out keeps
    the allocated ones (``patchAllocatedValues``)."""
    wanted = {"clusterIP": "10.96.100.10", "type": "NodePort"}
    first = _service("first", **wanted)
    first["spec"]["ports"][0]["nodePort"] = 30080
    _apply(kube, tmp_path, first, verb="create")
    assert _rows(kube, tmp_path, "svc", "first")["first"][1:4] == ["10.96.100.10", "<none>", "80:30080/TCP"]

    manifest = tmp_path / "second.yaml"
    manifest.write_text(yaml.safe_dump(_service("second", clusterIP="10.96.100.10")))
    refused = kubectl(kube, tmp_path, "create", "-f", str(manifest))
    assert refused.returncode != 0
    assert (
        'Service "second" is invalid: spec.clusterIPs: Invalid value: ["10.96.100.10"]: '
        "failed to allocate IP 10.96.100.10: provided IP is already allocated"
    ) in refused.stderr
    second = _service("second", type="NodePort")
    second["spec"]["ports"][0]["nodePort"] = 30080
    manifest.write_text(yaml.safe_dump(second))
    refused = kubectl(kube, tmp_path, "create", "-f", str(manifest))
    assert (
        'Service "second" is invalid: spec.ports[0].nodePort: Invalid value: 30080: '
        "provided port is already allocated"
    ) in refused.stderr
    manifest.write_text(yaml.safe_dump(_service("second", clusterIP="192.168.0.1")))
    refused = kubectl(kube, tmp_path, "create", "-f", str(manifest))
    assert "The range of valid IPs is 10.96.0.0/12" in refused.stderr

    replaced = _service("first", type="NodePort")  # no clusterIP, no nodePort
    _apply(kube, tmp_path, replaced, verb="replace")
    assert _rows(kube, tmp_path, "svc", "first")["first"][1:4] == ["10.96.100.10", "<none>", "80:30080/TCP"]

    assert kubectl(kube, tmp_path, "delete", "svc", "first").returncode == 0
    second["spec"]["clusterIP"] = "10.96.100.10"
    _apply(kube, tmp_path, second, verb="create")
    assert _rows(kube, tmp_path, "svc", "second")["second"][1:4] == ["10.96.100.10", "<none>", "80:30080/TCP"]


def test_made_pods_show_ready_containers(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """``make_pod``'s Pods carry container statuses agreeing with their Ready condition: ``kubectl get
    pods`` shows READY ``1/1`` (``0/1`` for one not ready), and ``podIPs`` has the pod IP. The fake's
    showed ``0/1`` while Ready was True."""
    kube.add(make_pod(name="up", pod_ip="10.0.0.7"))
    kube.add(make_pod(name="down", ready=False))
    rows = _rows(kube, tmp_path, "pods", "-o", "wide")
    assert rows["up"][:3] == ["1/1", "Running", "0"]
    assert rows["up"][4] == "10.0.0.7"
    assert rows["down"][0] == "0/1"
    status = json.loads(kubectl(kube, tmp_path, "get", "pod", "up", "-o", "json").stdout)["status"]
    assert status["podIPs"] == [{"ip": "10.0.0.7"}]
    (container,) = status["containerStatuses"]
    assert (container["ready"], container["started"], container["restartCount"]) == (True, True, 0)


def test_generated_names_use_the_api_servers_alphabet(kube: FakeKubeApiServer, tmp_path: Path) -> None:
    """``generateName`` gets 5 characters from apimachinery's alphabet (no vowels, no 0/1/3); the
    fake's hex suffixes (``gen-c6002``) are names no cluster makes."""
    for _ in range(40):
        out = _apply(
            kube,
            tmp_path,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}},
            verb="create",
        )
        suffix = out.split()[0].removeprefix("configmap/gen-")
        assert len(suffix) == 5, out
        assert set(suffix) <= set(GENERATED_NAME_ALPHABET), out


def _workload(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": image,
                            "ports": [{"containerPort": 80}],
                            "readinessProbe": {"httpGet": {"port": 80}},
                            "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        }
                    ],
                    "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
                },
            },
        },
    }


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.27", "IfNotPresent"),
        ("r:5000/n@sha256:" + "a" * 64, "IfNotPresent"),
    ],
)
def test_a_server_dry_run_shows_the_defaults_a_cluster_fills(
    kube: FakeKubeApiServer, tmp_path: Path, image: str, policy: str
) -> None:
    """``kubectl apply --dry-run=server -o json`` of a Deployment shows what kube-apiserver fills in:
    the rollout strategy, ``revisionHistoryLimit``, ``progressDeadlineSeconds``, the pod spec's and
    container's defaults, ``imagePullPolicy`` by the tag rule. The fake answered the manifest as
    sent, so a diff or a controller's desired-versus-stored comparison passed here and not there."""
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(_workload(image)))
    done = kubectl(kube, tmp_path, "apply", "--dry-run=server", "-o", "json", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout)["spec"]
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
    }
    assert (spec["revisionHistoryLimit"], spec["progressDeadlineSeconds"], spec["replicas"]) == (10, 600, 1)
    pod = spec["template"]["spec"]
    assert {k: pod[k] for k in ("dnsPolicy", "restartPolicy", "schedulerName", "securityContext")} == {
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
    }
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["volumes"][0]["configMap"]["defaultMode"] == 420
    (container,) = pod["containers"]
    assert container["imagePullPolicy"] == policy
    assert container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["readinessProbe"] == {
        "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert container["env"][0]["valueFrom"]["fieldRef"] == {"apiVersion": "v1", "fieldPath": "status.podIP"}
