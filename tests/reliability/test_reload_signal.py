"""SIGHUP to ``igw serve``: "check the configuration file now", never an end.

It had no handler, so its default action ended the process at once: a single gateway cut every
stream bare (exit -1), and the parent of ``--workers`` died the same way while its workers drained."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest
import yaml

from igw.sim.live import run_fleet
from tests.gateway.support import data_events
from tests.reliability.harness import (
    MODEL,
    catches,
    fleet_spec,
    gateway_doc,
    process_gone,
    worker_pid,
    write_config,
)

# An interval no test waits out: a reload seen within seconds came from the SIGHUP.
SLOW_RELOADS = {"configReloadInterval": "30m"}


async def _stream(url: str, max_tokens: int) -> list[bytes]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            url + "/v1/completions",
            json={"model": MODEL, "prompt": "tell a story", "max_tokens": max_tokens, "stream": True},
        ) as resp,
    ):
        assert resp.status == 200
        return data_events(await resp.read())


def _start(
    tmp_path: Path, keys: list[str], *args: str, grace: str = "5", own_session: bool = False
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``igw serve ARGS`` on a free port (a stream grace of ``grace`` seconds; in a session of its
    own with ``own_session``), its log in a file."""
    config, eps = write_config(tmp_path, gateway_doc(routing=SLOW_RELOADS), keys)
    log = tmp_path / "gw.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config),
                "--endpoints", str(eps), "--host", "127.0.0.1", "--port", "0",
                "--drain-seconds", "0.2", "--stream-grace-seconds", grace, *args,
            ],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=own_session,
        )  # fmt: skip
    return proc, config, log


def _text(path: Path) -> str:
    return path.read_text()


async def _serve(tmp_path: Path, keys: list[str], *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """:func:`_start`, returned once it logs its URL (a group: once all its workers serve)."""
    proc, config, log = _start(tmp_path, keys, *args)
    ready = "all 2 workers serve" if "--workers" in args else "serving 1 scheduler"
    deadline = time.monotonic() + 90
    while ready not in _text(log):
        assert proc.poll() is None, _text(log)
        assert time.monotonic() < deadline, _text(log)
        await asyncio.sleep(0.05)
    return proc, config, log


def _url(log: Path) -> str:
    line = next(x for x in log.read_text().splitlines() if "serving 1 scheduler" in x)
    return line.rsplit(" at ", 1)[1].strip()


def _still_waiting(deadline: float, what: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Fails the test, naming ``what`` and the log's end, once ``proc`` exited or ``deadline`` passed."""
    assert proc.poll() is None, f"exited {proc.returncode} before {what}: {_text(log)[-3000:]}"
    assert time.monotonic() < deadline, f"{what}: {_text(log)[-3000:]}"


async def _until(
    cond: Callable[[], bool], within: float, what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + within
    while not cond():
        _still_waiting(deadline, what, proc, log)
        await asyncio.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


async def test_sighup_to_a_group_reloads_both_workers_and_cuts_no_stream(tmp_path: Path) -> None:
    async with run_fleet(fleet_spec("llama-3.1-8b/h100", time_scale=1.0), admin=False) as fleet:
        proc, config, log = await _serve(tmp_path, [fleet.pods[0].key], "--workers", "2")
        try:
            url = _url(log)
            streams = [asyncio.create_task(_stream(url, 300)) for _ in range(4)]
            await asyncio.sleep(0.5)  # streaming
            doc = yaml.safe_load(config.read_text())
            doc["spec"]["extensions"]["routing"]["scrapeInterval"] = "150ms"
            config.write_text(yaml.safe_dump(doc))
            proc.send_signal(signal.SIGHUP)
            applied = "reloaded and applied"
            await _until(lambda: _text(log).count(applied) == 2, 20, "both workers reload", proc, log)
            for events in await asyncio.wait_for(asyncio.gather(*streams), timeout=60):
                assert events[-1] == b"data: [DONE]"
                assert not [e for e in events if b'"error"' in e]
            assert proc.poll() is None  # still serving
            pids = [int(p) for p in _text(log).partition("(pids ")[2].partition(")")[0].split()]
            assert all(not process_gone(pid) for pid in pids)
            assert _stop(proc) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_sighup_without_reload_is_logged_and_cuts_no_stream(tmp_path: Path) -> None:
    async with run_fleet(fleet_spec("llama-3.1-8b/h100", time_scale=1.0), admin=False) as fleet:
        proc, _, log = await _serve(tmp_path, [fleet.pods[0].key], "--no-reload")
        try:
            stream = asyncio.create_task(_stream(_url(log), 300))
            await asyncio.sleep(0.5)
            proc.send_signal(signal.SIGHUP)
            await _until(lambda: "SIGHUP ignored" in _text(log), 20, "the SIGHUP line", proc, log)
            events = await asyncio.wait_for(stream, timeout=60)
            assert events[-1] == b"data: [DONE]"
            assert not [e for e in events if b'"error"' in e]
            assert proc.poll() is None
            assert _stop(proc) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _hang_up_while_starting(proc: subprocess.Popen[bytes], log: Path, index: int, whole_group: bool) -> bool:
    """Send SIGHUP to the group's whole process group (a terminal's hang-up), or to the parent alone,
    while worker ``index`` runs without a SIGHUP handler (it imports: ``SigCgt`` lacks it) and the
    parent has its own;
    ``False`` when that moment was missed (the worker already had its handler, or this test process
    was held off the CPU until it served)."""
    deadline = time.monotonic() + 60
    target = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, _text(log)
        target = target or worker_pid(proc.pid, index)
        if target is not None:
            if f"[worker {index}]: igw gateway test-gw serving" in _text(log):
                return False
            if catches(target, signal.SIGHUP) is False and catches(proc.pid, signal.SIGHUP):
                if whole_group:
                    os.killpg(proc.pid, signal.SIGHUP)
                else:
                    proc.send_signal(signal.SIGHUP)
                return True
        time.sleep(0.002)
    raise AssertionError(f"worker {index} never started: {_text(log)[-3000:]}")


def _wait_for(
    cond: Callable[[], bool], within: float, what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + within
    while not cond():
        _still_waiting(deadline, what, proc, log)
        time.sleep(0.05)


@contextmanager
def _served_alone(place: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """``igw serve ARGS`` (no pod, reloads only on a signal, short drains) in a session of its own,
    so that a hang-up can reach its whole group; it and its log. Its group killed if still running
    at the end."""
    proc, _, log = _start(place, ["127.0.0.1:9"], *args, grace="0.2", own_session=True)
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _stopped_cleanly(proc: subprocess.Popen[bytes], log: Path, pids: Sequence[int] = ()) -> str:
    """SIGTERM to ``proc``; checks it ends with 0, none of ``pids`` (its workers) is left and its log
    holds no traceback. Its log."""
    assert _stop(proc) == 0, _text(log)[-3000:]
    assert all(process_gone(pid) for pid in pids)
    text = _text(log)
    assert "Traceback" not in text
    return text


def _hang_up_try(place: Path, index: int, whole_group: bool) -> bool:
    """One group, hung up while worker ``index`` starts (:func:`_hang_up_while_starting`); checks it
    serves, handles the held signal, and stops with 0. ``False``: the moment was missed."""
    with _served_alone(place, "--workers", "2") as (proc, log):
        landed = _hang_up_while_starting(proc, log, index, whole_group)
        if landed:
            _wait_for(lambda: "all 2 workers serve" in _text(log), 60, "the group serves", proc, log)
            # the worker checks the file once it serves: the held signal was kept, not dropped
            checked = f"[worker {index}]: SIGHUP: checking the configuration file"
            _wait_for(lambda: checked in _text(log), 20, "the held SIGHUP", proc, log)
        pids = [int(p) for p in _text(log).partition("(pids ")[2].partition(")")[0].split()]
        _stopped_cleanly(proc, log, pids)
        return landed


@pytest.mark.parametrize(("index", "whole_group"), [(0, True), (1, True), (0, False)])
def test_a_hang_up_while_a_worker_starts_is_a_reload_check_once_it_serves(
    tmp_path: Path, index: int, whole_group: bool
) -> None:
    """SIGHUP to every process of the group (a closing terminal, ``kill -HUP -PGID``) while worker
    ``index`` still imports: it had no handler yet, so the signal's default action ended it, and the
    group with exit 3. Now the parent starts each worker with SIGHUP blocked, and the worker handles
    the one held back - a configuration check - once it serves. SIGHUP to the parent alone before
    worker 0 served was dropped ("worker 0 is not serving yet"): a file changed after worker 0 read
    it waited for the next reload interval; the parent passes it on now, held the same way.

    A try whose signal missed the start-up (the worker had its handler; this process was held off
    the CPU) proves nothing: up to three groups are started until one lands in it."""
    for attempt in range(3):
        place = tmp_path / f"try-{attempt}"
        place.mkdir()
        if _hang_up_try(place, index, whole_group):
            return
    pytest.fail("in three tries the hang-up never reached the worker while it started")


def _status_masks(pid: int) -> dict[str, int] | None:
    """``pid``'s signal masks (``SigBlk``, ``SigCgt``, ...) from ``/proc``; ``None``: it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return {
        name: int(value, 16)
        for name, _, value in (line.partition(":\t") for line in status.splitlines())
        if name in ("SigPnd", "SigBlk", "SigIgn", "SigCgt")
    }


def _bit(sig: signal.Signals) -> int:
    return 1 << (sig - 1)


def _hang_up_igw_start_try(place: Path, workers: bool) -> bool:
    """``igw serve`` (the ``--workers 2`` parent with ``workers``) sent SIGHUP while igw's own
    start-up runs: its SIGTERM handler is in (:mod:`igw.cli.early_stop`), its SIGHUP handler not yet
    (``SigCgt``). Checks that SIGHUP was blocked then, that it serves, checks the file once, and
    stops with 0. ``False``: the moment was missed (it had its handler already)."""
    with _served_alone(place, *(["--workers", "2"] if workers else [])) as (proc, log):
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, _text(log)
            masks = _status_masks(proc.pid)
            assert proc.poll() is None, f"exited {proc.poll()}: {_text(log)}"
            assert masks is not None, _text(log)
            if masks["SigCgt"] & _bit(signal.SIGHUP):
                return False  # its handler is in: too late for this try
            if masks["SigCgt"] & _bit(signal.SIGTERM):  # igw's main has begun
                proc.send_signal(signal.SIGHUP)
                break
            time.sleep(0.001)
        ready = "all 2 workers serve" if workers else "serving 1 scheduler"
        _wait_for(lambda: ready in _text(log), 60, "it serves", proc, log)
        checked = "SIGHUP: checking the configuration file"
        _wait_for(lambda: checked in _text(log), 20, "the held SIGHUP's check", proc, log)
        text = _stopped_cleanly(proc, log)
        assert text.count(checked) == 1, text[-3000:]
        assert masks["SigBlk"] & _bit(signal.SIGHUP), "SIGHUP was not blocked during igw's start-up"
        return True


@pytest.mark.parametrize("workers", [False, True], ids=["single", "workers-parent"])
def test_a_hang_up_during_igw_serves_own_start_up_is_one_check_once_serving(
    tmp_path: Path, workers: bool
) -> None:
    """SIGHUP to ``igw serve`` in its first fraction of a second, before its reload handler (the
    single process's, the ``--workers`` parent's) was installed, ended it with -1 (the default
    action). igw now blocks SIGHUP from the start of its ``main`` until that handler is in; the one
    held back is a configuration check once it serves. A try whose signal came after the handler
    proves nothing: up to three processes are started until one lands in the start-up."""
    for attempt in range(3):
        place = tmp_path / f"try-{attempt}"
        place.mkdir()
        if _hang_up_igw_start_try(place, workers):
            return
    pytest.fail("in three tries the hang-up never reached igw serve while it started")
