"""Gateway pods serve their object live: ``igw serve`` exactly as the operator's Deployment runs it.

The gateway process follows the operator-rendered ConfigMap through the API (``--config-map``) and
the LoRA ConfigMaps labelled ``inference.networking.k8s.io/bbr-managed``; a spec change reaches
``/v1/models`` within seconds, a refused spec never does, and no request fails meanwhile.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import (
    OperatorThread,
    find,
    igwc,
    kubelet_env,
    update_spec,
    wait_condition,
    wait_for,
)

_CONFIG_MAP_FIELD = "metadata.name=chat-gateway-config"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Gateway:
    def __init__(self, args: list[str], port: int, log: Path, env: dict[str, str]) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.failures: list[str] = []
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "igw.cli.main", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
            )

    def models(self) -> set[str] | None:
        """Model ids from /v1/models; ``None`` while the gateway is not up yet (not a failure)."""
        try:
            with urllib.request.urlopen(f"{self.url}/v1/models", timeout=5) as response:
                body: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            self.failures.append(f"HTTP {exc.code}")
            return set()
        except (urllib.error.URLError, ConnectionError):
            if self.process.poll() is not None:
                raise AssertionError(f"igw serve exited with {self.process.returncode}") from None
            return None
        return {str(m["id"]) for m in body["data"]}


def _replica(
    deployment: dict[str, Any], replica: int, kubeconfig: Path, tmp_path: Path, workers: str | None = None
) -> Gateway:
    """``igw serve`` with the Deployment's arguments and environment, as replica ``replica``'s pod."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = kubelet_env(container, pod_name=f"chat-gateway-{replica}", namespace="inference")
    args = list(container["args"])
    args[args.index("--config") + 1] = str(tmp_path / f"replica-{replica}" / "config.yaml")
    port = _free_port()
    args[args.index("--port") + 1] = str(port)
    args[args.index("--management-port") + 1] = str(_free_port())  # each replica its own, as each pod
    if workers is not None:
        args[args.index("--workers") + 1] = workers
    args += ["--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--drain-seconds", "0"]
    return Gateway(args, port, tmp_path / f"gateway-{replica}.log", env)


def _stop(started: list[Gateway]) -> None:
    for served in started:
        served.process.terminate()
    for served in started:
        try:
            served.process.wait(20)
        except subprocess.TimeoutExpired:
            served.process.kill()
            served.process.wait(5)


@pytest.fixture
def gateways(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> Iterator[list[Gateway]]:
    """Two replicas of the operator's Deployment, each ``igw serve`` with the Deployment's arguments."""
    cluster.add(igwc("chat", model="llama"))
    deployment = wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    started = [_replica(deployment, replica, kubeconfig, tmp_path) for replica in range(2)]
    try:
        yield started
    finally:
        _stop(started)


def _all_serve(gateways: list[Gateway], model: str) -> bool:
    return all(model in (g.models() or set()) for g in gateways)


def test_spec_and_adapter_changes_are_served_within_seconds(
    cluster: FakeKubeApiServer, gateways: list[Gateway]
) -> None:
    for gateway in gateways:
        assert wait_for(gateway.models, timeout=60, what="a replica up") == {"llama"}

    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "llama-adapters",
                "namespace": "inference",
                "labels": {"inference.networking.k8s.io/bbr-managed": "true"},
            },
            "data": {"baseModel": "llama", "adapters": "- sql-lora\n"},
        }
    )
    wait_for(lambda: _all_serve(gateways, "sql-lora"), what="the adapter in /v1/models of every replica")

    def rename(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = "llama-3.1"

    update_spec(cluster, "inference", "chat", rename)
    wait_for(lambda: _all_serve(gateways, "llama-3.1"), what="the renamed model in every replica")
    assert not any("llama" in (g.models() or set()) for g in gateways)

    def break_it(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = "refused-model"
        # valid for the CRD (a real API server stores it); only the operator's own check refuses it
        spec["podDefaults"] = {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}

    update_spec(cluster, "inference", "chat", break_it)
    wait_condition(cluster, "chat", "Accepted", "False")
    for _ in range(10):
        assert not any("refused-model" in (g.models() or set()) for g in gateways)
    assert [g.failures for g in gateways] == [[], []]


def _open_watches(cluster: FakeKubeApiServer) -> dict[str, int]:
    """How many watches of each kind the gateway holds open now (the operator watches none of them)."""
    counts = dict.fromkeys(("config map", "pods", "bbr config maps"), 0)
    for path, query in cluster.open_watches():
        if path.endswith("/configmaps") and query.get("fieldSelector") == _CONFIG_MAP_FIELD:
            counts["config map"] += 1
        elif path.endswith("/pods") and query.get("labelSelector") == "app=llama":
            counts["pods"] += 1
        elif path.endswith("/configmaps") and "bbr-managed" in query.get("labelSelector", ""):
            counts["bbr config maps"] += 1
    return counts


def test_a_worker_group_watches_the_api_once_and_every_worker_serves_the_change(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> None:
    """``--workers 2``: the parent reads the ConfigMap once and worker 0 alone watches the API - the
    ConfigMap, the pods, the bbr-managed ConfigMaps: one watch of each per pod, not one per worker -
    and both workers serve what it finds (worker 1 through the scrape channel)."""
    cluster.add(igwc("chat", model="llama"))
    deployment = wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    gateway = _replica(deployment, 0, kubeconfig, tmp_path, workers="2")
    log = tmp_path / "gateway-0.log"
    try:
        wait_for(lambda: log.read_text().count("serving 1 scheduler(s)") == 2, timeout=60, what="two workers")
        # a new connection each time: the kernel's SO_REUSEPORT hash spreads them over both workers
        wait_for(lambda: all(gateway.models() == {"llama"} for _ in range(10)), what="both workers serve")

        def rename(spec: dict[str, Any]) -> None:
            spec["schedulers"][0]["modelName"] = "llama-3.1"

        update_spec(cluster, "inference", "chat", rename)
        wait_for(lambda: gateway.models() == {"llama-3.1"}, what="the change in a worker")
        # Worker 0 tells the other when it applied the file: within moments, not at the other's own
        # check (every 10 reload intervals, 10 s here, for a follower).
        wait_for(
            lambda: all(gateway.models() == {"llama-3.1"} for _ in range(20)),
            timeout=5,
            what="the change in both workers",
        )
        assert gateway.failures == []
        # Sampled for a second: a watch the API server ends (timeoutSeconds) is re-opened by the same
        # worker, so a sample may read 0, but two open at once means two workers watch.
        samples = []
        for _ in range(20):
            samples.append(_open_watches(cluster))
            time.sleep(0.05)
        for kind in ("config map", "pods", "bbr config maps"):
            assert max(sample[kind] for sample in samples) == 1, (kind, samples)
    finally:
        _stop([gateway])
    path = "/api/v1/namespaces/inference/configmaps"
    reads = [p for method, p, _ in cluster.requests if method == "GET" and p == f"{path}/chat-gateway-config"]
    assert reads, "the parent reads the ConfigMap before it starts the workers"
    logged = log.read_text()
    assert logged.count("changed; wrote") == 1, logged
    assert "endpoint discovery: worker 0's (Kubernetes API, namespace inference)" in logged
