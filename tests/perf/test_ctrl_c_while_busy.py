"""Ctrl-C ends an ``igw`` command whose event loop is busy in one long callback (a loop that never
awaits): asyncio's own SIGINT handler only cancelled the main task, which a busy task never sees, and
``igw perf soak --pods 10**30`` (building its pod names) ran until SIGKILL (before session s50)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from igw.cli.main import SIGINT_EXIT, STOP_GRACE_S

BUSY_COMMAND = """
import asyncio, sys
from igw.cli import main as cli_main

async def busy():
    try:
        print("busy", flush=True)
        while True:  # never awaits: the loop runs no other callback
            pass
    finally:
        print("cleaned up", flush=True)

real_parse = cli_main._parse
def parse(argv):
    args, _run = real_parse(argv)
    return args, lambda _args: asyncio.run(busy())

cli_main._parse = parse
sys.exit(cli_main.main(["validate", "x.yaml"]))
"""


def test_ctrl_c_ends_a_command_busy_inside_its_event_loop_with_130() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_COMMAND],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        # as from a terminal: a runner started in the background inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "busy\n"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=STOP_GRACE_S + 15)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == SIGINT_EXIT, err[-2000:]
    assert "igw: interrupted" in err
    assert "cleaned up" in out
    assert "Traceback" not in err, err[-2000:]
    assert took < STOP_GRACE_S + 15
