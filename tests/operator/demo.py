"""The operator demo on loopback: ``python -m tests.operator.demo`` (from a checkout; see docs/operating.md).

Runs, all on 127.0.0.x and all stopped on exit: the fake Kubernetes API server with the CRD, two
simulated vLLM pods (the model servers) registered as Pods, ``igw operator``, then applies
``crds/examples/single-model.yaml`` with the real ``kubectl`` when it is installed. There is no
kubelet, so the demo plays it: it starts ``igw serve`` with exactly the arguments of the Deployment
the operator created and reports the Deployment ready once ``/readyz`` answers. It prints
``kubectl get igwc`` / ``kubectl describe igwc`` and one chat completion answered through that
gateway. The fake API server is test tooling, hence this module lives under tests/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from igw.sim.server import LivePod
from igw.sim.spec import PodSpec
from tests.fakes.kube_api import FakeKubeApiServer, make_pod, running_fake_kube
from tests.operator.harness import (
    ROOT,
    condition,
    find,
    install_crd,
    install_extension_crds,
    kubelet_env,
    mark_deployment_ready,
    running_operator,
)

EXAMPLE = ROOT / "crds" / "examples" / "single-model.yaml"
POD_HOSTS = ("127.0.0.2", "127.0.0.3")
KUBECTL = shutil.which("kubectl")


def _shared_port(*hosts: str) -> int:
    """A port free on every loopback address in ``hosts`` (the pods share one targetPort)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port: int = probe.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on every pod address")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def _poll(probe: Any, *, limit_s: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + limit_s
    while asyncio.get_running_loop().time() < deadline:
        value = await asyncio.to_thread(probe)
        if value:
            return value
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def _http(url: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
    except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
        return None
    return answer


def _start_gateway(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "igw.cli.main", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )


def _kubectl(kubeconfig: Path, *args: str) -> str:
    assert KUBECTL is not None
    result = subprocess.run(
        # the cache beside the kubeconfig: ~/.kube/cache is keyed by host and port (see kubectl_cli)
        [
            KUBECTL,
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(kubeconfig.parent / "kube-cache"),
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def _apply(kube: FakeKubeApiServer, kubeconfig: Path, document: dict[str, Any], workdir: Path) -> None:
    manifest = workdir / "igwc.yaml"
    manifest.write_text(yaml.safe_dump(document, sort_keys=False))
    if KUBECTL:
        print(f"$ kubectl apply -f {manifest.name}\n{_kubectl(kubeconfig, 'apply', '-f', str(manifest))}")
    else:
        kube.add(document)
        print("(kubectl not installed: the object was created through the API)")


async def run(workdir: Path) -> int:
    document = yaml.safe_load(EXAMPLE.read_text())
    namespace, name = document["metadata"]["namespace"], document["metadata"]["name"]
    scheduler = document["spec"]["schedulers"][0]
    port = _shared_port(*POD_HOSTS)
    scheduler["targetPort"] = port
    pods = [
        LivePod(
            spec=PodSpec(preset="llama-3.1-8b/h100", name=f"llama-{i}", port=port),
            seed=i,
            time_scale=1.0,
            host=h,
        )
        for i, h in enumerate(POD_HOSTS)
    ]
    gateway: subprocess.Popen[bytes] | None = None
    with running_fake_kube() as kube:
        install_crd(kube)
        install_extension_crds(kube)  # the operator watches these kinds too: kopf warns without them
        kubeconfig = kube.write_kubeconfig(workdir / "kubeconfig", namespace=namespace)
        for pod in pods:
            await pod.start()
        try:
            for pod in pods:
                kube.add(
                    make_pod(
                        name=pod.spec.name,
                        namespace=namespace,
                        labels=scheduler["modelSelector"]["matchLabels"],
                        pod_ip=pod.host,
                        port=port,
                    )
                )
            print(f"fake API server {kube.url}; simulated vLLM pods at {', '.join(p.key for p in pods)}")
            with running_operator(kubeconfig, resync_s=1.0):
                _apply(kube, kubeconfig, document, workdir)
                deployment = await _poll(
                    lambda: find(kube, "Deployment", namespace, f"{name}-gateway"),
                    limit_s=60,
                    what="the Deployment",
                )
                container = deployment["spec"]["template"]["spec"]["containers"][0]
                env = kubelet_env(container, pod_name=f"{name}-gateway-0", namespace=namespace)
                args = list(container["args"])
                args[args.index("--config") + 1] = str(workdir / "served" / "config.yaml")
                gateway_port = _free_port()
                args[args.index("--port") + 1] = str(gateway_port)
                args[args.index("--management-port") + 1] = str(_free_port())  # /metrics, pod detail
                if "--drain-seconds" in args:  # the rendered pod drains for its load balancer: none here
                    args[args.index("--drain-seconds") + 1] = "0"
                else:
                    args += ["--drain-seconds", "0"]
                args += ["--kubeconfig", str(kubeconfig), "--host", "127.0.0.1"]
                print("kubelet stand-in: igw " + " ".join(args))
                gateway = _start_gateway(args, workdir / "gateway.log", env)
                url = f"http://127.0.0.1:{gateway_port}"
                await _poll(
                    lambda: _http(f"{url}/readyz") is not None, limit_s=60, what="the gateway's /readyz"
                )
                mark_deployment_ready(kube, namespace, f"{name}-gateway")
                await _poll(
                    lambda: (
                        condition(find(kube, "InferenceGatewayConfig", namespace, name), "Ready").get(
                            "status"
                        )
                        == "True"
                    ),
                    limit_s=60,
                    what="Ready=True",
                )
                if KUBECTL:
                    table = _kubectl(kubeconfig, "get", "igwc", "-n", namespace)
                    print(f"$ kubectl get igwc -n {namespace}\n{table}")
                    described = _kubectl(kubeconfig, "describe", "igwc", name, "-n", namespace)
                    print(f"$ kubectl describe igwc {name} -n {namespace}\n{described}")
                else:
                    status = find(kube, "InferenceGatewayConfig", namespace, name)
                    print(yaml.safe_dump((status or {}).get("status"), sort_keys=False))
                question = {
                    "model": scheduler["modelName"],
                    "messages": [{"role": "user", "content": "Say hello from the operator demo."}],
                    "max_tokens": 16,
                }
                answer = await asyncio.to_thread(_http, f"{url}/v1/chat/completions", question)
                if not answer or not answer.get("choices"):
                    print(f"no completion through the gateway: {answer!r}", file=sys.stderr)
                    return 1
                print(f"$ POST {url}/v1/chat/completions (model {scheduler['modelName']})")
                print(
                    json.dumps(
                        {"id": answer.get("id"), "choices": answer["choices"], "usage": answer.get("usage")},
                        indent=2,
                    )
                )
                return 0
        finally:
            if gateway is not None:
                gateway.terminate()
                gateway.wait(20)
            for pod in pods:
                await pod.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workdir", help="keep the kubeconfig, manifest and gateway log here")
    options = parser.parse_args(argv)
    if options.workdir:
        Path(options.workdir).mkdir(parents=True, exist_ok=True)
        return asyncio.run(run(Path(options.workdir)))
    with tempfile.TemporaryDirectory(prefix="igw-operator-demo-") as workdir:
        return asyncio.run(run(Path(workdir)))


if __name__ == "__main__":
    sys.exit(main())
