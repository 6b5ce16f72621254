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
from pathlib import Path


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
