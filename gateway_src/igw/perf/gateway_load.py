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
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import yaml

from igw.bench.peers import BINARIES, PACKAGES, peer_argv, venv_bin
from igw.bench.processes import RouterStartError
from igw.bench.stats import percentile

if TYPE_CHECKING:
    from igw.perf.perf_issuer import PerfIssuer

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


def group_pids(parent: int) -> list[int]:
    """``parent`` and its child processes (``igw serve --workers N``: the supervisor and its workers)."""
    children: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{parent}/task").iterdir():
            children += [int(p) for p in (task / "children").read_text().split()]
    return [parent, *children]


def group_cpu(parent: int) -> float:
    """CPU seconds of ``parent`` and its child processes: a ``--workers N`` gateway's whole group (a
    single process's own threads are in its own figure)."""
    total = 0.0
    for pid in group_pids(parent):
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def backend_process(
    *, chunks: int, interval: float, raw: bool = False, preexec: Callable[[], None] | None = None
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The near-free backend as a process; ``raw``: the minimal one of :mod:`igw.perf.raw_http`;
    ``preexec`` runs in the child before the backend starts (``igw perf workers``: its scheduling
    policy, :mod:`igw.perf.load_policy`)."""
    cmd = [
        sys.executable,
        "-m",
        "igw.cli.perf_backend_process",
        "--chunks",
        str(chunks),
        "--chunk-interval",
        str(interval),
        *(["--raw"] if raw else []),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=preexec)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"backend did not start: {line!r}")
        yield f"127.0.0.1:{line.split()[1]}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


STOP_GRACE_S: Final = 10.0
"""How long :func:`gateway_process` waits for the gateway to stop after SIGTERM before it kills it."""
GATEWAY_LOG_NAME: Final = "gateway.log"
"""The file in :func:`gateway_process`'s ``workdir`` that holds the gateway's stderr."""


@contextlib.contextmanager
def gateway_process(
    workdir: Path,
    *,
    backend: str,
    args: Sequence[str] = (),
    issuer: PerfIssuer | None = None,
    source: Path | None = None,
    python: Path | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``igw serve`` (plus ``args``) in front of ``backend``; files in ``workdir``. With ``issuer``,
    every inference request must carry a JWT of that issuer (``spec.auth``), as in a deployment.
    ``source``: the directory holding the ``igw`` package the gateway runs (its ``PYTHONPATH``),
    so that one benchmark harness can compare gateway trees; default: this process's. ``python``:
    the interpreter the gateway runs under (another virtual environment's, to compare CPython
    versions with the load generator and the backend unchanged); default: this process's."""
    config: dict[str, Any] = {
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
    env = dict(os.environ)
    if issuer is not None:
        config["spec"]["auth"] = issuer.auth_spec()
        env["SSL_CERT_FILE"] = str(issuer.ca_path)  # the gateway fetches the issuer's keys over HTTPS
    if source is not None:
        env["PYTHONPATH"] = str(source)
    (workdir / "igwc.yaml").write_text(yaml.safe_dump(config))
    (workdir / "endpoints.yaml").write_text(yaml.safe_dump({"schedulers": {"perf": [backend]}}))
    port = free_port()
    cmd = [
        str(python) if python is not None else sys.executable,
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
        *args,
    ]  # fmt: skip  (default log level: the JSON access log is written, to /dev/null, as deployed)
    log = (workdir / GATEWAY_LOG_NAME).open("wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:  # a group still draining: killed (its workers follow their parent)
            proc.kill()
            proc.wait()
        log.close()


async def wait_ready(
    base: str,
    *,
    within_s: float = 30.0,
    proc: subprocess.Popen[bytes] | None = None,
    log_path: Path | None = None,
) -> None:
    """Wait for ``/readyz`` to answer 200. With ``proc`` (the gateway started by
    :func:`gateway_process`), fail as soon as it exits, naming its exit status and the tail of
    ``log_path``: a gateway that cannot start (a missing module, a bad flag) is reported at once
    instead of after ``within_s`` of polling a dead port."""
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                tail = _log_tail(log_path) if log_path is not None else "no log"
                raise RuntimeError(
                    f"gateway at {base} exited with {proc.returncode} before it was ready: {tail}"
                )
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(f"http://{base}/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"gateway at {base} did not become ready within {within_s}s")


async def wait_all_workers(base: str, count: int, *, within_s: float) -> None:
    """Until each of ``count`` workers has answered ``/readyz`` on a new connection.

    One worker's answer is not enough: a worker still starting has no listener in the port's
    ``SO_REUSEPORT`` group yet, so every connection opened until then goes to the others, and a
    phase's keep-alive connections would stay there."""
    seen: set[int] = set()
    deadline = time.monotonic() + within_s
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        while len(seen) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"only workers {sorted(seen)} of {count} at {base} answered in {within_s}s"
                )
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://{base}/readyz") as response:
                    if response.status == 200:
                        seen.add(int((await response.json())["worker"]["index"]))
                        continue
            await asyncio.sleep(0.05)


async def closed_loop(
    base: str,
    *,
    concurrency: int,
    requests: int,
    stream: bool = False,
    pause_s: float = 0.0,
    headers: Mapping[str, str] | None = None,
) -> LoadResult:
    """``concurrency`` workers each send requests back to back until ``requests`` are done;
    ``pause_s``: each worker waits that long after each answer (idle gaps between requests);
    ``headers`` go with every request (the bearer token when the gateway checks one)."""
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
                async with session.post(url, json=body, headers=headers) as resp:
                    if stream:
                        await resp.content.readany()  # first event = time to first token
                        latencies.append((time.perf_counter() - t0) * 1000)
                        await resp.read()
                    else:
                        await resp.read()
                        latencies.append((time.perf_counter() - t0) * 1000)
                    if resp.status != 200:
                        raise RuntimeError(f"{base}: HTTP {resp.status}")
                if pause_s:
                    await asyncio.sleep(pause_s)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return LoadResult(latencies_ms=latencies, wall_s=time.perf_counter() - t0)


PEER_POLICY = "round_robin"
"""One worker behind each peer, so routing policy cannot matter; round_robin is the peers' cheapest
(no prefix tree, and vllm-router's cache_aware would add a ``/v1/completions/render`` call per
request that the near-free backend does not serve)."""


def peer_executable(router: str, *, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The peer's executable: ``.peers/venv/bin`` (where ``igw bench --peers`` installs it) first,
    then ``PATH`` (its main console script, then the package-named one); None when neither has it."""
    local = venv_bin(BINARIES[router])
    if local.exists():
        return str(local)
    return which(BINARIES[router]) or which(PACKAGES[router])


def peer_command(router: str, *, executable: str, port: int, metrics_port: int, backend: str) -> list[str]:
    """The benchmark's command line for a peer: one worker (the near-free backend), ``PEER_POLICY``."""
    return peer_argv(
        router=router,
        executable=executable,
        port=port,
        metrics_port=metrics_port,
        worker_urls=[f"http://{backend}"],
        policy=PEER_POLICY,
    )


@contextlib.contextmanager
def peer_process(
    workdir: Path, *, router: str, backend: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start a peer router in front of ``backend`` as its own process (not yet ready: see
    :func:`wait_peer_ready`); raises RouterStartError when it is not installed."""
    executable = peer_executable(router)
    if executable is None:
        raise RouterStartError(
            f"{PACKAGES[router]} not installed (not in {venv_bin('')} nor on PATH;"
            " `igw bench --peers` installs it)"
        )
    port = free_port()
    argv = peer_command(router, executable=executable, port=port, metrics_port=free_port(), backend=backend)
    log_path = workdir / f"{PACKAGES[router]}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _log_tail(path: Path, lines: int = 5) -> str:
    tail = path.read_text(errors="replace").strip().splitlines()[-lines:]
    return " | ".join(tail) or "no output"


async def wait_peer_ready(
    base: str, *, proc: subprocess.Popen[bytes], log_path: Path, within_s: float = 60.0
) -> None:
    """Both peers answer 503 until their worker is registered: wait for one real completion, and
    fail with the exit status and log tail as soon as the process dies."""
    deadline = time.monotonic() + within_s
    body = {"model": "fake-model", "prompt": "ready?", "max_tokens": 1}
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RouterStartError(f"exited with {proc.returncode}: {_log_tail(log_path)}")
            try:
                async with session.post(f"http://{base}/v1/completions", json=body) as resp:
                    await resp.read()
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = type(exc).__name__
            await asyncio.sleep(0.25)
    raise RouterStartError(f"no successful completion within {within_s:.0f}s (last: {last})")
