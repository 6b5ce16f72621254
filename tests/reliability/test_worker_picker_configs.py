"""``igw serve --in-cluster --workers 3`` against the fake Kubernetes API server: the ``configMapRef``
EndpointPickerConfigs are read once for the group (worker 0's read), at start and at a reload, so the
workers cannot run two picker configurations (:mod:`igw.gateway.picker_share`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes
import yaml

from tests.fakes.kube_api import FakeKubeApiServer, serving_fake_kube
from tests.gateway.support import config_doc, scheduler

NS = "inference"
WORKERS = 3
START_WITHIN_S = 120.0


def _picker(weight: int) -> dict[str, Any]:
    profile = [{"pluginRef": "queue-scorer", "weight": weight}, {"pluginRef": "max-score-picker"}]
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": [{"type": "queue-scorer"}, {"type": "max-score-picker"}],
        "schedulingProfiles": [{"name": "default", "plugins": profile}],
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _config_map_reads(kube: FakeKubeApiServer) -> int:
    return sum(1 for method, path, _ in kube.requests if method == "GET" and path.endswith("/configmaps/epp"))


async def _weights(management: str) -> dict[int, float]:
    """Each worker's ``queue-scorer`` weight, from the management port's ``/readyz`` (the kernel
    picks the worker per connection: asked until every worker has answered)."""
    seen: dict[int, float] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        for _ in range(500):
            async with http.get(management + "/readyz") as resp:
                doc = json.loads(await resp.text())
            seen[doc["worker"]["index"]] = doc["schedulers"]["llama"]["scorers"]["queue-scorer"]
            if len(seen) == WORKERS:
                break
    assert len(seen) == WORKERS, seen
    return seen


@contextlib.asynccontextmanager
async def _group(
    tmp_path: Path, kube: FakeKubeApiServer, *, edit_when_worker_0_serves: bool
) -> AsyncIterator[str]:
    """The group's management URL once every worker serves; with ``edit_when_worker_0_serves``, the
    ConfigMap is changed (weight 9) the moment worker 0 serves, before the others have started."""
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    doc = config_doc([scheduler("llama", "m", configMapRef={"name": "epp", "key": "plugins.yaml"})])
    doc["metadata"]["namespace"] = NS
    (tmp_path / "igwc.yaml").write_text(yaml.safe_dump(doc))
    management = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "igwc.yaml"),
        "--in-cluster", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", "0",
        "--workers", str(WORKERS), "--management-port", str(management), "--drain-seconds", "0",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    api = kubernetes.client.CoreV1Api(kube.api_client())
    output: list[str] = []
    try:
        while not any("workers serve" in line for line in output):
            line = (await asyncio.wait_for(proc.stderr.readline(), START_WITHIN_S)).decode()
            assert line, "".join(output)
            output.append(line)
            if edit_when_worker_0_serves and "[worker 0]" in line and "serving 1 scheduler" in line:
                edit = {"data": {"plugins.yaml": yaml.safe_dump(_picker(9))}}
                await asyncio.to_thread(api.patch_namespaced_config_map, "epp", NS, edit)
        yield f"http://127.0.0.1:{management}"
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _with_config_map(kube: FakeKubeApiServer, weight: int) -> None:
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "epp", "namespace": NS},
            "data": {"plugins.yaml": yaml.safe_dump(_picker(weight))},
        }
    )


async def test_a_config_map_edited_while_the_group_starts_does_not_split_the_workers(tmp_path: Path) -> None:
    """The ConfigMap changes after worker 0 read it and before the others start: every worker runs
    worker 0's read, and the API server was asked once. Until session s42 each worker read it itself
    (3 GETs), and workers 1 and 2 ran weight 9 beside worker 0's 4 until the gateway's own
    configuration next changed (nothing else reads picker ConfigMaps again)."""
    async with serving_fake_kube() as kube:
        await _with_config_map(kube, 4)
        async with _group(tmp_path, kube, edit_when_worker_0_serves=True) as management:
            assert await _weights(management) == dict.fromkeys(range(WORKERS), 4.0)
            assert _config_map_reads(kube) == 1


async def test_a_reload_reads_the_config_maps_once_for_the_group(tmp_path: Path) -> None:
    """A reload of the configuration file: worker 0 reads the ConfigMap and the others take its read
    (one GET, not one per worker), so they apply the same picker configuration."""
    async with serving_fake_kube() as kube:
        await _with_config_map(kube, 4)
        async with _group(tmp_path, kube, edit_when_worker_0_serves=False) as management:
            assert _config_map_reads(kube) == 1
            api = kubernetes.client.CoreV1Api(kube.api_client())
            edit = {"data": {"plugins.yaml": yaml.safe_dump(_picker(7))}}
            await asyncio.to_thread(api.patch_namespaced_config_map, "epp", NS, edit)
            config = tmp_path / "igwc.yaml"
            doc = yaml.safe_load(config.read_text())
            doc["metadata"]["labels"] = {"edited": "yes"}  # any change of the file reloads it
            config.write_text(yaml.safe_dump(doc))
            for _ in range(200):
                weights = await _weights(management)
                if set(weights.values()) == {7.0}:
                    break
                await asyncio.sleep(0.1)
            assert weights == dict.fromkeys(range(WORKERS), 7.0)
            assert _config_map_reads(kube) == 2
