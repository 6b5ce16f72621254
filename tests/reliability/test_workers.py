"""``igw serve --workers 2`` as real processes on loopback: one port, both workers serve, one scrape
per pod per interval for the whole host, host-wide ``/metrics``, clean SIGTERM, a dying worker, a
parent killed outright."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.worker_count import CPU_REQUEST_ENV
from igw.gateway.workers import SOCKET_PATH_MAX, WORKER_ENV, WorkerRole, socket_directory_parent, supervise
from igw.perf.serve_process import serve_process
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import wait_all_fresh
from tests.reliability.harness import (
    MODEL,
    gateway_doc,
    igw_serve,
    process_gone,
    wait_until,
    worker_group,
    write_config,
)
from tests.security.helpers import start_redis

INTERVAL_S = 0.05


async def _worker_of_new_connection(url: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as fresh, fresh.get(url + "/readyz") as resp:
        worker: dict[str, int] = (await resp.json())["worker"]
        return worker


async def _both_workers_serve(url: str) -> dict[int, int]:
    """Open new connections to ``url`` (the kernel hashes each to a worker) until both workers of
    the group of 2 have answered, within 60 s (the second may still be starting on a loaded
    machine); each worker's pid by its index."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:
        worker = await _worker_of_new_connection(url)
        assert worker["count"] == 2
        seen[worker["index"]] = worker["pid"]
    assert sorted(seen) == [0, 1]
    return seen


async def _statuses_of_40_requests(http: aiohttp.ClientSession, url: str) -> dict[int, int]:
    """How many of 40 completions sent through ``http`` (a new connection each: both workers get
    many, P(one gets < 3) ~ 1e-9) got each status."""
    statuses: dict[int, int] = {}
    for _ in range(40):
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 1}
        async with http.post(url + "/v1/completions", json=body) as resp:
            await resp.read()
            statuses[resp.status] = statuses.get(resp.status, 0) + 1
    return statuses


async def test_two_workers_share_the_port_and_one_scrape_per_interval(tmp_path: Path) -> None:
    routing = {"scrapeInterval": f"{round(INTERVAL_S * 1000)}ms", "staleThreshold": "1s"}
    async with (
        running(FakeModelServer("p0"), FakeModelServer("p1")) as pods,
        igw_serve(tmp_path, gateway_doc(routing=routing), [p.key for p in pods], "--workers", "2") as gw,
    ):
        seen = await _both_workers_serve(gw.url)
        assert len(set(seen.values())) == 2
        assert gw.proc.pid not in seen.values()

        # both workers route inference requests too (a new connection each: the kernel picks the worker)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            for _ in range(20):
                resp = await http.post(
                    gw.url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2}
                )
                assert resp.status == 200
                await resp.read()

        start = [p.scrapes for p in pods]
        t0 = time.monotonic()
        await asyncio.sleep(2.0)
        elapsed = time.monotonic() - t0
        for pod, before in zip(pods, start, strict=True):
            per_interval = (pod.scrapes - before) / (elapsed / INTERVAL_S)
            # one scraper for the host: at most one scrape per interval (two workers would double it)
            assert pod.scrapes > before
            assert per_interval <= 1.1, per_interval

        async with aiohttp.ClientSession() as fresh, fresh.get(gw.url + "/metrics") as resp:
            text = await resp.text()
        workers = {
            s.labels["worker"]
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "igw_requests_total"
        }
        assert workers == {"0", "1"}
        scrapes = {
            s.labels["worker"]: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "igw_endpoint_scrapes_total" and s.labels.get("result") == "ok"
        }
        assert scrapes.get("0", 0) > 0
        assert scrapes.get("1", 0.0) == 0.0

        t_stop = time.monotonic()
        code = await gw.stop()
        assert code == 0, gw.output[-4000:]
        assert time.monotonic() - t_stop < 60
    assert "stopping: not ready" in gw.output
    assert gw.output.count("igw gateway stopped") == 2
    for index in (0, 1):  # each worker's lines name it (the group shares one stderr)
        assert f"INFO igw.gateway [worker {index}]: igw gateway stopped" in gw.output
    # each worker states its memory plan (the prefix index unbounded without a container memory limit)
    assert gw.output.count("memory plan per process: no memory limit; ") == 2
    assert "endpoint discovery: worker 0's (static endpoints file" in gw.output


async def test_a_tenant_gets_its_local_rate_limit_once_per_pod_not_once_per_worker(tmp_path: Path) -> None:
    """``rateLimits`` with the local backend is the limit per pod ("each replica"): with ``--workers 2``
    each worker enforces half of it, so a burst of 4 admits 4 requests whichever worker the kernel
    hands each connection to. Before, every worker kept the whole bucket and the pod admitted 8 (N
    times the limit with N workers: a client only had to open new connections)."""
    doc = gateway_doc()
    doc["spec"]["extensions"]["rateLimits"] = {"default": {"requestsPerSecond": 0.001, "burst": 4}}
    async with (
        running(FakeModelServer("p0")) as pods,
        igw_serve(tmp_path, doc, [p.key for p in pods], "--workers", "2") as gw,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
    ):
        await _both_workers_serve(gw.url)
        statuses = await _statuses_of_40_requests(http, gw.url)
    assert set(statuses) == {200, 429}, statuses
    assert statuses[200] <= 4, statuses  # 8 before: each worker admitted the whole burst


async def test_during_a_redis_outage_the_pod_s_workers_fall_back_to_the_limit_once(tmp_path: Path) -> None:
    """The Redis backend with ``onRedisUnavailable: local``: Redis is stopped once both workers
    serve, and each worker's fallback buckets hold half the burst of 4, so the pod admits at most 4
    whichever worker each new connection reaches. Before session s40 each fallback held the whole
    burst: the pod admitted up to 8 while the ``local`` backend admitted 4."""
    redis = start_redis(tmp_path)
    try:
        doc = gateway_doc()
        doc["spec"]["extensions"]["rateLimits"] = {
            "backend": "redis",
            "redis": {"url": redis.url},
            "onRedisUnavailable": "local",
            "default": {"requestsPerSecond": 0.001, "burst": 4},
        }
        async with (
            running(FakeModelServer("p0")) as pods,
            igw_serve(tmp_path, doc, [p.key for p in pods], "--workers", "2") as gw,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
        ):
            await _both_workers_serve(gw.url)
            redis.stop()
            statuses = await _statuses_of_40_requests(http, gw.url)
            await wait_until(  # stderr has a writer thread of its own (since s42)
                lambda: "rate-limit backend redis unavailable" in gw.output, within=10, what="the warning"
            )
    finally:
        redis.stop()
    assert set(statuses) == {200, 429}, statuses
    assert statuses[200] <= 4, statuses  # 8 before: each worker's fallback admitted the whole burst


async def test_auto_starts_one_worker_per_core_of_the_cpu_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers auto`` with a request of 1.5 cores (the downward API's millicores) starts two
    workers (one on a one-CPU machine), says so and why in its log, and serves on both."""
    monkeypatch.setenv(CPU_REQUEST_ENV, "1500")
    expected = min(2, len(os.sched_getaffinity(0)))
    async with (
        running(FakeModelServer("p0")) as pods,
        igw_serve(tmp_path, gateway_doc(), [p.key for p in pods], "--workers", "auto") as gw,
    ):
        noun = "worker" if expected == 1 else "workers"
        await wait_until(
            lambda: f"--workers auto: {expected} {noun} (" in gw.output, within=10, what="the choice logged"
        )
        assert f"CPU request 1.5 ({CPU_REQUEST_ENV})" in gw.output
        if expected == 2:
            await _both_workers_serve(gw.url)
        assert await gw.stop() == 0


async def test_a_worker_that_dies_stops_the_group_with_exit_3(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("p0")) as pods,
        igw_serve(
            tmp_path,
            gateway_doc(),
            [p.key for p in pods],
            "--workers",
            "2",
            "--drain-seconds",
            "0.2",
            "--stream-grace-seconds",
            "0.5",
        ) as gw,  # fmt: skip
    ):
        worker = await _worker_of_new_connection(gw.url)
        os.kill(worker["pid"], signal.SIGKILL)
        code = await asyncio.wait_for(gw.proc.wait(), timeout=60)
        assert code == 3
        await wait_until(lambda: "stopping all workers" in gw.output, within=5, what="the parent's log")
        assert f"(pid {worker['pid']}) ended (killed by SIGKILL)" in gw.output


async def test_both_workers_send_a_shared_prefix_to_the_pod_that_got_it_first(tmp_path: Path) -> None:
    """The workers share their picks: after one request with a prompt, every later request with that
    prompt - on new connections, so both workers take some - reaches the same pod. Without the
    sharing each worker would place each prompt on its own (half the prompts split, by chance)."""
    routing = {"scrapeInterval": f"{round(INTERVAL_S * 1000)}ms", "staleThreshold": "5s"}
    # The prefix scorer next to the scraped queue and KV scorers only (predictedLatency 0 turns off
    # the latency scorers, which learn from each worker's own requests): the pods' pages are equal.
    weights = {"queue": 2, "kvCache": 2, "prefix": 3, "predictedLatency": 0}
    async with (
        running(FakeModelServer("p0"), FakeModelServer("p1")) as pods,
        igw_serve(
            tmp_path, gateway_doc(routing=routing, weights=weights), [p.key for p in pods], "--workers", "2"
        ) as gw,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
    ):
        # Both workers up and following the leader's channel (a worker that joins later is replayed
        # only the last stale threshold's notes; this test is about the picks made afterwards).
        await wait_until(
            lambda: gw.output.count(" serving 1 scheduler(s) at ") == 2, within=60, what="both workers"
        )
        await wait_all_fresh(http, gw.url)
        await asyncio.sleep(10 * INTERVAL_S)
        for n in range(6):
            text = f"Conversation {n}: you are a helpful assistant for a shipping company. " * 8

            async def send(prompt: str = text) -> None:
                body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
                async with http.post(gw.url + "/v1/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                # A live server's page moves with every request; the fake's does not unless told,
                # and a page that stays the same for staleThreshold after a dispatch is taken as
                # frozen (the pod excluded). Both pods move alike, so the KV scorer stays neutral.
                kv = 0.1 + 0.001 * (sum(len(p.received) for p in pods) % 50)
                for pod in pods:
                    pod.kv = kv

            await send()
            await asyncio.sleep(6 * INTERVAL_S)  # the pick reaches the other worker within an interval
            for _ in range(6):
                await send()
            holders = [p.name for p in pods if any(text.encode() in r.body for r in p.received)]
            assert len(holders) == 1, f"prompt {n} reached {holders}"
        async with http.get(gw.url + "/metrics") as resp:
            text = await resp.text()
        served = {
            s.labels["worker"]
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "igw_requests_total" and s.value > 0
        }
        assert served == {"0", "1"}  # both workers routed some of them
        learned = {
            s.labels["worker"]: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "igw_pick_notes_received_total" and s.labels.get("outcome") == "learned"
        }
        assert set(learned) == {"0", "1"}  # each worker's counters, on the host-wide page
        assert all(v > 0 for v in learned.values()), learned
        assert await gw.stop() == 0, gw.output[-4000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_stop_when_the_parent_is_killed_outright(tmp_path: Path) -> None:
    """``kill -9`` of the parent: its workers get SIGTERM from the kernel, drain and exit. They used to
    keep serving the port unsupervised, beside the group a restart then started on it."""
    with worker_group(tmp_path) as group:
        group.wait_serving()
        with open(f"/proc/{group.pids[0]}/environ", "rb") as environ:
            role = dict(v.split(b"=", 1) for v in environ.read().split(b"\0") if b"=" in v)
        directory = Path(orjson.loads(role[WORKER_ENV.encode()])["dir"])
        assert directory.is_dir()
        group.proc.kill()
        group.proc.wait()
        deadline = time.monotonic() + 30  # the drain (0.2 s) and the grace (0.2 s), on a loaded machine
        while not all(process_gone(pid) for pid in group.pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [pid for pid in group.pids if not process_gone(pid)] == []
        assert not directory.exists()  # the parent could not remove it: the workers did


def test_the_parent_logs_one_line_once_every_worker_serves(tmp_path: Path) -> None:
    """The line naming the workers comes when worker 1 is only starting; a second line says when the
    whole group serves (before session s41 there was none), once every worker reported it serves.
    Each process writes its log from a writer thread of its own (since s42), so a worker's own
    "serving" line may reach the shared stderr just after the parent's: both are read, in any order
    (that the group is not ready before every worker serves is
    ``test_the_pod_is_ready_only_once_every_worker_serves``)."""
    with worker_group(tmp_path) as group:
        assert group.proc.stderr is not None
        serving = group.serving
        group_line = ""
        # The parent killed after a minute ends the log (its workers stop with it): no endless read.
        deadline = threading.Timer(60, group.proc.kill)
        deadline.start()
        try:
            for line in group.proc.stderr:
                if "igw serve: all 2 workers serve on 127.0.0.1:" in line:
                    group_line = line
                serving += "serving 1 scheduler" in line
                if group_line and serving >= 2:
                    break
            else:
                pytest.fail(
                    f"the group's log ended with {serving} serving line(s), group line {group_line!r}"
                )
        finally:
            deadline.cancel()
        assert serving == 2
        assert "(the group started in " in group_line


def test_a_worker_whose_parent_is_already_gone_does_not_start(tmp_path: Path) -> None:
    """The parent died between starting the worker and the worker tying itself to it (killed
    outright while the worker started): the worker names that and exits instead of serving
    unsupervised, and removes the group's directory, which the parent could not. Before session
    s41 only a worker that had served removed it: each such kill left an ``igw-workers-*`` folder in
    the temporary directory."""
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    group = tmp_path / "igw-workers-group"
    group.mkdir()
    role = WorkerRole(index=1, count=2, directory=str(group), parent=os.getpid() + 1_000_000)
    done = subprocess.run(
        [
            sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config), "--endpoints", str(eps),
            "--host", "127.0.0.1", "--port", "0", "--no-reload",
        ],
        env={**os.environ, WORKER_ENV: role.to_env()}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"worker 1: the parent process (pid {role.parent}) has already exited" in done.stderr
    assert "serving" not in done.stderr
    assert not group.exists()


def test_a_group_stopped_by_sigterm_leaves_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent makes the group's socket directory in the temporary directory (``TMPDIR``, here a
    short one under /tmp: a deep one is not used, see the next test); a requested stop removes it
    with the sockets in it."""
    temp = Path(tempfile.mkdtemp(prefix="igwt-", dir="/tmp"))
    try:
        monkeypatch.setenv("TMPDIR", str(temp))
        with worker_group(tmp_path) as group:
            group.wait_serving()
            assert [p.name for p in temp.iterdir() if p.name.startswith("igw-workers-")] != []
            group.proc.send_signal(signal.SIGTERM)
            rest = group.rest_of_log()
            assert group.proc.wait(timeout=60) == 0, rest
        assert list(temp.iterdir()) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_group_under_a_tmpdir_too_deep_for_unix_sockets_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``TMPDIR`` whose path leaves no room for the workers' unix socket paths (107 characters):
    the group puts its sockets under /tmp instead. Found by CI (2026-12-06), whose pytest folders are
    that deep: every worker failed with ``OSError: AF_UNIX path too long`` and the group never
    started."""
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    assert len(str(deep)) + len("/igw-workers-xxxxxxxx/metrics-63.sock") > SOCKET_PATH_MAX
    monkeypatch.setenv("TMPDIR", str(deep))
    with worker_group(tmp_path) as group:
        group.wait_serving()
        group.proc.send_signal(signal.SIGTERM)
        rest = group.rest_of_log()
        assert group.proc.wait(timeout=60) == 0, rest
    assert list(deep.iterdir()) == []


def test_the_socket_folder_is_the_temporary_folder_unless_too_deep() -> None:
    assert socket_directory_parent("/var/tmp") == "/var/tmp"
    assert socket_directory_parent("/x" * 40) == "/tmp"


async def test_a_second_group_on_a_port_a_group_serves_is_refused(tmp_path: Path) -> None:
    """Both groups' listeners set SO_REUSEPORT; the second used to start and take half the connections."""
    async with (
        running(FakeModelServer("p0")) as pods,
        igw_serve(tmp_path, gateway_doc(), [p.key for p in pods], "--workers", "2") as gw,
    ):
        port = gw.url.rsplit(":", 1)[1]
        (tmp_path / "second").mkdir()
        config, eps = write_config(tmp_path / "second", gateway_doc(), [p.key for p in pods])
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config), "--endpoints", str(eps),
            "--host", "127.0.0.1", "--port", port, "--no-reload", "--workers", "2",
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await asyncio.wait_for(second.communicate(), timeout=60)
        finally:
            if second.returncode is None:  # it started: stopped (its workers with it) before failing
                second.terminate()
                await second.wait()
        assert second.returncode == 1  # the machine's state, not a usage error (2 before session s26)
        assert f"igw serve: cannot listen on 127.0.0.1:{port}: Address already in use" in err.decode()
        assert "workers (pids" not in err.decode()


def test_a_worker_whose_event_loop_stops_is_killed_and_ends_the_group(tmp_path: Path) -> None:
    """A frozen worker keeps its share of the port's new connections, which hang; the kubelet's probe
    reaches it one connection in N. The parent sees its heartbeats stop: killed, the group ends with
    3 (restarted). Healthy workers beat through the same time (no false alarm first)."""
    with worker_group(tmp_path, "--worker-timeout", "2") as group:
        group.wait_serving()
        time.sleep(4)  # twice the timeout: healthy workers are not taken for stuck
        assert group.proc.poll() is None
        os.kill(group.pids[1], signal.SIGSTOP)
        stopped_at = time.monotonic()
        rest = group.rest_of_log()
        assert group.proc.wait(timeout=60) == 3
        assert time.monotonic() - stopped_at < 30
        assert f"worker 1 (pid {group.pids[1]}) sent no heartbeat for" in rest
        assert "worker 0 (pid" not in rest.split("sent no heartbeat")[0]
        assert process_gone(group.pids[0])
        assert process_gone(group.pids[1])


_REFUSE_IN_WORKER_1 = (
    "import json, os, sys\n"
    "index = json.loads(os.environ['IGW_WORKER'])['index']\n"
    "extra = ['--debug-decisions', '5'] if index == 1 else []\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:], *extra])\n"
)
"""Runs ``igw serve`` with the arguments after it; worker 1 gets an option it refuses without
``$IGW_DEBUG_TOKEN`` (what one worker alone refuses in life: an input changed between two workers'
starts)."""


def test_a_worker_that_refuses_to_start_after_worker_0_ends_the_group_with_its_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Worker 0 starts and serves, worker 1 (started after it) refuses: the group exits 2, the code
    of a start-up refusal, not 3 (a worker that died, taken for a crash), and worker 0 drains."""
    monkeypatch.delenv("IGW_DEBUG_TOKEN", raising=False)
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    serve = [
        "-m", "igw.cli.main", "serve", "--config", str(config), "--endpoints", str(eps),
        "--host", "127.0.0.1", "--no-reload", "--drain-seconds", "0.2", "--stream-grace-seconds", "0.2",
    ]  # fmt: skip
    caplog.set_level(logging.INFO, logger="igw.gateway.workers")
    code = supervise(
        2,
        host="127.0.0.1",
        port=0,
        worker_command=lambda port, _: [sys.executable, "-c", _REFUSE_IN_WORKER_1, *serve, f"--port={port}"],
        stop_budget_s=0.4,
        stuck_after_s=None,
    )
    assert code == 2, caplog.text
    assert "2 workers (pids" in caplog.text  # worker 1 started after worker 0 served
    assert "worker 1 (pid " in caplog.text
    assert "refused to start (exit code 2): stopping all workers; the group exits 2" in caplog.text
    workers_said = capfd.readouterr().err
    assert "igw serve: --debug-decisions: IGW_DEBUG_TOKEN" in workers_said
    assert "INFO igw.gateway [worker 0]: igw gateway stopped" in workers_said  # drained, not killed


async def test_the_pod_is_ready_only_once_every_worker_serves(tmp_path: Path) -> None:
    """Worker 0 serves seconds before the others (they start once it has): its ``/readyz`` answers
    503 until the parent has seen every worker serve, then 200. Until session s42 it answered 200 from
    its first second, so Kubernetes and the load balancer sent the pod its full share on one worker of
    three (4 s of it on this machine), and ``/metrics`` held that worker's series alone."""
    lines: list[str] = []
    arrived: list[float] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if "igw serve: all 3 workers serve" in line:
            arrived.append(time.monotonic())

    async with (
        running(FakeModelServer("p0")) as (pod,),
        serve_process(
            *write_config(tmp_path, gateway_doc(), [pod.key]), "--workers", "3", on_line=on_line, ready=False
        ) as gw,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
    ):
        answers: list[tuple[float, int]] = []
        deadline = time.monotonic() + 120
        while not arrived:
            assert time.monotonic() < deadline, "".join(lines)
            async with http.get(gw.url + "/readyz") as resp:
                await resp.read()
                answers.append((time.monotonic(), resp.status))
            await asyncio.sleep(0.02)
        # The parent's line reaches this test a moment after the workers may answer 200 (a pipe and
        # a reader task away): only the answers well before it count.
        early = [status for at, status in answers if at < arrived[0] - 0.25]
        assert early, "the group served within 0.25 s of worker 0: nothing to check"
        assert set(early) == {503}
        for _ in range(500):
            async with http.get(gw.url + "/readyz") as resp:
                if resp.status == 200:
                    break
            await asyncio.sleep(0.02)
        assert resp.status == 200
