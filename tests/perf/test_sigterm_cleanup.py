"""SIGTERM to a benchmark command stops the processes it started.

With Python's default SIGTERM action ``igw perf ...`` died at once and left its backend, simulated
fleet and ``igw serve`` children running (found after ``timeout 60 igw perf soak``: an orphaned
``igw sim fleet`` still running an hour later). ``igw`` now turns SIGTERM into ``SystemExit`` while a
command runs, so the commands' ``finally`` blocks stop their children.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from igw.cli.main import _stop_on_signal


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    still = set()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        if "Z" not in Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1]:
            still.add(pid)
    return still


def test_sigterm_to_a_benchmark_stops_its_children() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "igw.cli.main", "perf", "workers", "--workers", "1", "--requests", "1000000",
         "--rounds", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        children: set[int] = set()
        while len(children) < 2 and time.monotonic() < deadline:  # the backend and igw serve
            time.sleep(0.2)
            children = descendants(proc.pid)
        assert len(children) >= 2, "the benchmark never started its processes"
        time.sleep(1.0)
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 30
        while alive(children) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = alive(children)
        for pid in left:  # do not leave them running when the test fails
            os.kill(pid, signal.SIGKILL)
        assert not left, "processes the benchmark started outlived it"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CALLBACK_SCRIPT = """
import asyncio, os, signal, uvloop
from igw.cli.main import _stop_on_signal
signal.signal(signal.SIGTERM, _stop_on_signal)

class Client(asyncio.Protocol):
    def __init__(self, done):
        self.done = done
    def data_received(self, data):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # the handler runs here, inside the transport's callback
            pass
    def connection_lost(self, exc):
        if not self.done.done():
            self.done.set_exception(RuntimeError(f"connection lost: {exc!r}"))

async def main():
    async def answer(reader, writer):
        writer.write(b"x")
        await asyncio.sleep(30)
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    await loop.create_connection(lambda: Client(done), "127.0.0.1", port)
    try:
        await asyncio.wait_for(done, 20)
    finally:
        print("cleaned up", flush=True)

uvloop.run(main())
"""


def test_sigterm_inside_a_transport_callback_still_exits_143_after_cleanup() -> None:
    """Python runs the SIGTERM handler wherever the main thread is; inside uvloop's ``data_received``
    a raised ``SystemExit`` was taken for the connection's fatal error (connection closed, the command
    went on and failed: exit 1, the flake of the test above). The handler now lets the loop raise it
    between callbacks, so the command stops with 143 and its ``finally`` blocks run."""
    done = subprocess.run(
        [sys.executable, "-c", CALLBACK_SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "cleaned up" in done.stdout
    assert "Fatal error on transport" not in done.stderr


def test_sigterm_while_asyncio_is_still_being_imported_exits_143(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM during ``import asyncio`` (which ``igw`` does while it builds its parser) found the
    module in ``sys.modules`` without ``get_running_loop`` yet: the handler's ``AttributeError``
    ended the command in a traceback, exit 1 (seen sending SIGTERM to ``igw operator`` 0.5 s after
    its start)."""
    partial = types.ModuleType("asyncio")  # what sys.modules holds while asyncio/__init__ runs
    monkeypatch.setitem(sys.modules, "asyncio", partial)
    with pytest.raises(SystemExit) as stopped:
        _stop_on_signal(signal.SIGTERM, None)
    assert stopped.value.code == 128 + signal.SIGTERM
