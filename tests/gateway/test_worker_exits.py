"""The ``igw serve --workers N`` parent logs each worker's end: index, pid, exit code or signal name,
and what it does next (:func:`igw.gateway.workers.supervise`).

Why: before session s49 the parent logged only the first worker whose death ended the group, with a
bare status (``-9``); the others' ends during the stop it then made - a worker crashing while it
drained included - left no line at the parent. The workers here are small real processes (not
``igw serve``, which takes seconds to start on a shared machine) that speak the parent's start
protocol: they report that they started, and exit on SIGTERM with a code the test chooses.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from igw.gateway.workers import EXIT_WORKER_DIED, describe_exit, supervise

_WORKER = (
    "import json, os, signal, sys, time\n"
    "role = json.loads(os.environ['IGW_WORKER'])\n"
    "index, on_term = role['index'], int(sys.argv[2])\n"
    "signal.signal(signal.SIGTERM, lambda *_: os._exit(on_term if index == 0 else 0))\n"
    "open(os.path.join(sys.argv[1], f'{index}.pid'), 'w').write(str(os.getpid()))\n"
    "os.write(role['started_fd'], b'!')\n"
    "while True:\n"
    "    time.sleep(0.05)\n"
)
"""A worker: writes ``<index>.pid`` into the folder given, reports that it started, serves nothing
until SIGTERM, then exits 0 (worker 0: the code given)."""


def _kill_when_started(folder: Path, index: int, sig: signal.Signals, killed: list[int]) -> None:
    deadline = time.monotonic() + 30
    pid_file = folder / f"{index}.pid"
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text():
            pid = int(pid_file.read_text())
            killed.append(pid)
            os.kill(pid, sig)
            return
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("worker_0_exits", "level", "line"),
    [
        (0, "INFO", "stopped with exit code 0; every worker has ended"),
        (1, "WARNING", "ended during the stop with exit code 1, not a clean stop; every worker has ended"),
    ],
    ids=["drains-cleanly", "crashes-while-draining"],
)
def test_a_worker_killed_by_a_signal_and_the_others_ends_are_each_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, worker_0_exits: int, level: str, line: str
) -> None:
    caplog.set_level(logging.INFO, logger="igw.gateway.workers")
    killed: list[int] = []
    killer = threading.Thread(
        target=_kill_when_started, args=(tmp_path, 1, signal.SIGKILL, killed), daemon=True
    )
    killer.start()
    code = supervise(
        2,
        host="127.0.0.1",
        port=0,
        worker_command=lambda port, _: [sys.executable, "-c", _WORKER, str(tmp_path), str(worker_0_exits)],
        stop_budget_s=5.0,
        stuck_after_s=None,
    )
    killer.join(timeout=5)
    assert code == EXIT_WORKER_DIED, caplog.text
    [victim] = killed
    first = int((tmp_path / "0.pid").read_text())
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "(pid " in r.getMessage()]
    assert said == [
        (
            "ERROR",
            f"worker 1 (pid {victim}) ended (killed by SIGKILL): stopping all workers; the group exits 3 "
            "(no worker is restarted in place: the container restarts whole)",
        ),
        (level, f"worker 0 (pid {first}) {line}"),
    ], caplog.text


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (0, "exit code 0"),
        (2, "exit code 2"),
        (-9, "killed by SIGKILL"),
        (-15, "killed by SIGTERM"),
        (143, "exit code 143 (128 + SIGTERM)"),
        (-200, "killed by 200"),
        (255, "exit code 255"),
    ],
)
def test_an_exit_status_is_named_in_words(code: int, words: str) -> None:
    assert describe_exit(code) == words
