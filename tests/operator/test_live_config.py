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
    update_spec,
    wait_condition,
    wait_for,
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Gateway:
    def __init__(self, args: list[str], port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.failures: list[str] = []
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "igw.cli.main", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ},
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


@pytest.fixture
def gateway(
    cluster: FakeKubeApiServer, kubeconfig: Path, operator: OperatorThread, tmp_path: Path
) -> Iterator[Gateway]:
    cluster.add(igwc("chat", model="llama"))
    deployment = wait_for(lambda: find(cluster, "Deployment", "inference", "chat-gateway"), what="deployment")
    args = list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    args[args.index("--config") + 1] = str(tmp_path / "served" / "config.yaml")
    port = _free_port()
    args[args.index("--port") + 1] = str(port)
    args += ["--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--drain-seconds", "0"]
    served = Gateway(args, port, tmp_path / "gateway.log")
    try:
        yield served
    finally:
        served.process.terminate()
        try:
            served.process.wait(20)
        except subprocess.TimeoutExpired:
            served.process.kill()
            served.process.wait(5)


def test_spec_and_adapter_changes_are_served_within_seconds(
    cluster: FakeKubeApiServer, gateway: Gateway
) -> None:
    assert wait_for(lambda: gateway.models(), timeout=60, what="the gateway up") == {"llama"}

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
    wait_for(lambda: "sql-lora" in (gateway.models() or set()), what="the adapter in /v1/models")

    def rename(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = "llama-3.1"

    update_spec(cluster, "inference", "chat", rename)
    wait_for(lambda: "llama-3.1" in (gateway.models() or set()), what="the renamed model in /v1/models")
    assert "llama" not in (gateway.models() or set())

    def break_it(spec: dict[str, Any]) -> None:
        spec["schedulers"][0]["modelName"] = "refused-model"
        spec["schedulers"][0]["targetPort"] = 0

    update_spec(cluster, "inference", "chat", break_it)
    wait_condition(cluster, "chat", "Accepted", "False")
    for _ in range(10):
        assert "refused-model" not in (gateway.models() or set())
    assert gateway.failures == []
