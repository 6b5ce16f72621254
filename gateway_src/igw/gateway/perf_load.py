"""Process-level load for ``igw perf gateway``: start the backend and the gateway as separate
processes, drive them with a closed-loop aiohttp client, and account the gateway's CPU time.

The same client drives the direct path (client -> backend) and the gateway path (client -> gateway
-> backend) in alternating rounds, so the difference is the gateway's added latency under the same
machine load. CPU per request is the gateway process's user+system time (``/proc/<pid>/stat``)
divided by the requests it served in the phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from igw.bench.stats import percentile

PROMPT = "You are a helpful assistant. " * 20


@dataclass(frozen=True, slots=True)
class LoadResult:
    latencies_ms: list[float]
    wall_s: float

    def p(self, q: float) -> float:
        return percentile(self.latencies_ms, q) or 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def backend_process(*, chunks: int, interval: float) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    cmd = [
        sys.executable,
        "-m",
        "igw.gateway.perf_backend",
        "--chunks",
        str(chunks),
        "--chunk-interval",
        str(interval),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"backend did not start: {line!r}")
        yield f"127.0.0.1:{line.split()[1]}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def gateway_process(workdir: Path, *, backend: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    config = {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "perf", "namespace": "default"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [
                {"name": "perf", "modelName": "fake-model", "modelSelector": {"matchLabels": {"app": "x"}}}
            ],
        },
    }
    (workdir / "igwc.yaml").write_text(yaml.safe_dump(config))
    (workdir / "endpoints.yaml").write_text(yaml.safe_dump({"schedulers": {"perf": [backend]}}))
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "igw.cli.main",
        "serve",
        "--config",
        str(workdir / "igwc.yaml"),
        "--endpoints",
        str(workdir / "endpoints.yaml"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]  # fmt: skip  (default log level: the JSON access log is written, to /dev/null, as deployed)
    log = (workdir / "gateway.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


async def wait_ready(base: str, *, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(f"http://{base}/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"gateway at {base} did not become ready within {within_s}s")


async def closed_loop(base: str, *, concurrency: int, requests: int, stream: bool = False) -> LoadResult:
    """``concurrency`` workers each send requests back to back until ``requests`` are done."""
    latencies: list[float] = []
    counter = iter(range(requests))
    connector = aiohttp.TCPConnector(limit=concurrency)
    url = f"http://{base}/v1/completions"
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for i in counter:
                body = {
                    "model": "fake-model",
                    "max_tokens": 4,
                    "prompt": f"{PROMPT}question {i}",
                    "stream": stream,
                }
                t0 = time.perf_counter()
                async with session.post(url, json=body) as resp:
                    if stream:
                        await resp.content.readany()  # first event = time to first token
                        latencies.append((time.perf_counter() - t0) * 1000)
                        await resp.read()
                    else:
                        await resp.read()
                        latencies.append((time.perf_counter() - t0) * 1000)
                    if resp.status != 200:
                        raise RuntimeError(f"{base}: HTTP {resp.status}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return LoadResult(latencies_ms=latencies, wall_s=time.perf_counter() - t0)
