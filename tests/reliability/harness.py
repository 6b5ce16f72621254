"""Helpers for the reliability suite: a simulated fleet (in this process) in front of which runs
either ``igw serve`` as a real subprocess (everything it prints is captured, for secret scans) or
an in-process gateway (for tests that inspect its state).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.inference import STATE_KEY
from igw.gateway.serving import ServerLimits, serve_app
from igw.gateway.state import GatewayState
from igw.gateway.workers import WORKER_ENV
from igw.perf.serve_process import ServeProcess, serve_process
from igw.sim.spec import FleetSpec
from tests.gateway.fake_model_server import FakeModelServer
from tests.gateway.support import config_doc, scheduler

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answering_coded(body: bytes, coding: str = "gzip") -> Handler:
    """A pod's handler answering every request (its body read first) with ``body``, a JSON answer
    in ``Content-Encoding: coding`` - as a pod that compresses though asked for no coding does."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        headers = {"Content-Type": "application/json", "Content-Encoding": coding}
        return web.Response(body=body, headers=headers)

    return answer


MODEL = "llama"


def gateway_doc(
    *,
    routing: Mapping[str, Any] | None = None,
    bbr: Mapping[str, Any] | None = None,
    **scheduler_extra: Any,
) -> dict[str, Any]:
    """An InferenceGatewayConfig with one scheduler ``llama`` for model ``llama`` (fast scrapes)."""
    return config_doc([scheduler(MODEL, MODEL, **scheduler_extra)], routing=routing, bbr=bbr)


def fleet_spec(*presets: str, time_scale: float = 0.05, **pod_extra: Any) -> FleetSpec:
    """Pods ``p0``, ``p1``... serving ``llama`` on the given simulator presets."""
    pods = [
        {"name": f"p{i}", "preset": preset, "served_model_name": MODEL, **pod_extra}
        for i, preset in enumerate(presets)
    ]
    return FleetSpec.from_mapping({"time_scale": time_scale, "seed": 7, "pods": pods})


def served_by(body: Mapping[str, Any]) -> str:
    """The simulated pod that answered (the simulator puts its name in the response id)."""
    return str(body["id"]).split("-")[1]


async def wait_until(cond: Callable[[], bool], *, within: float, what: str) -> float:
    """Poll ``cond`` every 10 ms; the seconds it took; fails the test after ``within``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > within:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


def write_config(tmp_path: Path, doc: Mapping[str, Any], endpoints: Sequence[str]) -> tuple[Path, Path]:
    config = tmp_path / "igwc.yaml"
    config.write_text(yaml.safe_dump(dict(doc)))
    eps = tmp_path / "endpoints.yaml"
    eps.write_text(yaml.safe_dump({"schedulers": {MODEL: list(endpoints)}}))
    return config, eps


@dataclass
class ServedGateway:
    """A running ``igw serve``; ``lines`` holds everything it printed (stdout and stderr)."""

    process: ServeProcess
    lines: list[str]

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def proc(self) -> asyncio.subprocess.Process:
        return self.process.proc

    @property
    def output(self) -> str:
        return "".join(self.lines)

    async def stop(self) -> int:
        return await self.process.stop()


@contextlib.asynccontextmanager
async def igw_serve(
    tmp_path: Path, doc: Mapping[str, Any], endpoints: Sequence[str], *args: str, reload: bool = False
) -> AsyncIterator[ServedGateway]:
    """``igw serve`` on a free loopback port, ready; SIGTERM (then kill) on exit (``reload``: the
    configuration file ``tmp_path/igwc.yaml`` is watched)."""
    config, eps = write_config(tmp_path, doc, endpoints)
    lines: list[str] = []
    async with serve_process(config, eps, *args, on_line=lines.append, reload=reload) as process:
        yield ServedGateway(process, lines)


@contextlib.asynccontextmanager
async def scripted_upstream(routes: Mapping[str, Handler]) -> AsyncIterator[str]:
    """A loopback model server with the given ``"METHOD /path"`` handlers plus a valid vLLM
    ``/metrics`` page; yields its ``host:port``."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=FakeModelServer("scripted").page(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    for route, handler in routes.items():
        method, path = route.split(" ", 1)
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


@dataclass
class InProcessGateway:
    url: str
    state: GatewayState
    http: aiohttp.ClientSession

    def fresh(self, key: str) -> bool:
        sr = self.state.runtime.schedulers[MODEL]
        st = sr.pool.states.get(key)
        return st is not None and sr.scheduler.is_fresh(st.view(), self.state.clock())

    def endpoint(self, key: str) -> Any:
        return self.state.runtime.schedulers[MODEL].pool.states[key]

    async def complete(self, prompt: str, **extra: Any) -> aiohttp.ClientResponse:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, **extra}
        return await self.http.post(self.url + "/v1/completions", json=body)


@contextlib.asynccontextmanager
async def in_process_gateway(
    tmp_path: Path,
    doc: Mapping[str, Any],
    endpoints: Sequence[str],
    *,
    limits: ServerLimits | None = None,
    wait_fresh: bool = True,
) -> AsyncIterator[InProcessGateway]:
    config_path, eps = write_config(tmp_path, doc, endpoints)
    config = load_gateway_config(config_path)
    app = create_app(
        config,
        discovery=StaticFileDiscovery.for_schedulers(eps, config.schedulers, poll_interval_s=0.05),
        rng=random.Random(42),
    )
    async with (
        serve_app(app, host="127.0.0.1", port=0, limits=limits or ServerLimits(stream_grace_s=1)) as url,
        aiohttp.ClientSession() as http,
    ):
        gw = InProcessGateway(url=url, state=app[STATE_KEY], http=http)
        if wait_fresh:
            for key in endpoints:
                await wait_until(functools.partial(gw.fresh, key), within=10, what=f"{key} scraped")
        yield gw


@dataclass
class FleetChild:
    """An ``igw sim fleet`` child process: its pods' ``host:port`` keys and its pid (to stop it with
    SIGSTOP, as a frozen node or a debugger would)."""

    keys: list[str]
    pid: int


@contextlib.contextmanager
def fleet_child(tmp_path: Path, spec: Mapping[str, Any]) -> Iterator[FleetChild]:
    """``igw sim fleet`` for ``spec`` (a fleet-spec mapping) as a child process; on exit it is
    continued (if stopped) and ended."""
    spec_path = tmp_path / "fleet.yaml"
    spec_path.write_text(yaml.safe_dump(dict(spec)))
    log_path = tmp_path / "fleet.log"
    with log_path.open("wb") as log:
        argv = [sys.executable, "-m", "igw.cli.main", "sim", "fleet", "--spec", str(spec_path), "--json"]
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        described = None
        while described is None:
            assert child.poll() is None, f"igw sim fleet exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"igw sim fleet not up: {log_path.read_text()}"
            described = next(
                (line for line in log_path.read_text().splitlines() if line.startswith("{")), None
            )
            time.sleep(0.05)
        yield FleetChild(keys=[str(pod["key"]) for pod in json.loads(described)["pods"]], pid=child.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGCONT)
            child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def sigterm_until_it_exits(process: subprocess.Popen[Any], *, within_s: float = 60) -> int:
    """Send SIGTERM every 2 ms until ``process`` is gone, as a supervisor repeating the signal would;
    its exit status. A plain ``Popen`` polled here: asyncio's child watcher, cancelled thousands of
    times by such a loop, once lost the exit status."""
    process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + within_s
    while process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        time.sleep(0.002)
    return process.wait(timeout=5)


@dataclass
class WorkerGroup:
    """``igw serve --workers 2`` as a plain ``Popen``: its stderr is read here line by line."""

    proc: subprocess.Popen[str]
    pids: list[int]
    """The workers' pids, as the parent logs them."""
    serving: int = 0
    """Workers whose "serving" line was read before the parent named them (worker 0's: the parent
    starts the others once it serves)."""

    def wait_serving(self) -> None:
        """Read the log until both workers serve."""
        assert self.proc.stderr is not None
        serving = self.serving
        if serving == len(self.pids):
            return
        for line in self.proc.stderr:
            serving += "serving 1 scheduler" in line
            if serving == len(self.pids):
                return
        pytest.fail("the group ended before both workers served")

    def rest_of_log(self) -> str:
        """Everything the group logs from here until it exits."""
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (reaped, or a zombie its new parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def catches(pid: int, signum: int) -> bool | None:
    """Whether ``pid`` has a handler for ``signum`` (its ``SigCgt`` mask); ``None``: it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signum - 1)))


def worker_pid(parent: int, index: int) -> int | None:
    """The pid of worker ``index`` of ``parent`` once it runs ``igw`` (its environment names its role:
    a child between ``fork`` and ``exec`` still has the parent's, and its signal handlers too)."""
    try:
        children = [int(p) for p in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]
    except FileNotFoundError:
        return None
    for child in children:
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        role = next((v.split(b"=", 1)[1] for v in environ if v.startswith(WORKER_ENV.encode() + b"=")), None)
        if role is not None and orjson.loads(role)["index"] == index:
            return child
    return None


@contextlib.contextmanager
def worker_group(tmp_path: Path, *extra: str) -> Iterator[WorkerGroup]:
    """``igw serve --workers 2`` in front of an unreachable pod (fast drain and grace), yielded once the
    parent has named its workers (they are still starting); on exit the parent and any worker left
    are killed, so a failing test leaves no process behind."""
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config), "--endpoints", str(eps),
            "--host", "127.0.0.1", "--port", "0", "--no-reload", "--workers", "2",
            "--drain-seconds", "0.2", "--stream-grace-seconds", "0.2", *extra,
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pids: list[int] = []
    try:
        assert proc.stderr is not None
        started, serving = "", 0
        read: list[str] = []
        for line in proc.stderr:
            read.append(line)
            serving += "serving 1 scheduler" in line
            if "workers (pids" in line:
                started = line
                break
        pids = [int(pid) for pid in started.partition("(pids ")[2].partition(")")[0].split()]
        assert len(pids) == 2, f"the parent named no workers (exit {proc.poll()}): {''.join(read[-20:])!r}"
        yield WorkerGroup(proc, pids, serving)
    finally:
        end_process(proc)
        for pid in pids:
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)


def end_process(proc: subprocess.Popen[Any]) -> None:
    """A test's last word on a child it started: killed if still running, reaped, its stderr closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
