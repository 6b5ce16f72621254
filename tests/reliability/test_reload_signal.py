"""SIGHUP to ``igw serve``: "check the configuration file now", never an end.

It had no handler, so its default action ended the process at once: a single gateway cut every
stream bare (exit -1), and the parent of ``--workers`` died the same way while its workers drained."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import yaml

from igw.sim.live import run_fleet
from tests.gateway.support import data_events
from tests.reliability.harness import MODEL, fleet_spec, gateway_doc, process_gone, write_config

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


def _start(tmp_path: Path, keys: list[str], *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``igw serve ARGS`` on a free port, its log in a file."""
    config, eps = write_config(tmp_path, gateway_doc(routing=SLOW_RELOADS), keys)
    log = tmp_path / "gw.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "igw.cli.main", "serve", "--config", str(config),
                "--endpoints", str(eps), "--host", "127.0.0.1", "--port", "0",
                "--drain-seconds", "0.2", "--stream-grace-seconds", "5", *args,
            ],
            stdout=out, stderr=subprocess.STDOUT,
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


async def _until(
    cond: Callable[[], bool], within: float, what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert proc.poll() is None, f"exited {proc.returncode} before {what}: {_text(log)[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: {_text(log)[-3000:]}"
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
