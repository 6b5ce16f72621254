"""``igw operator`` stops cleanly on SIGTERM, also when a second SIGTERM arrives while it stops.

kopf installs its own SIGTERM/SIGINT handlers when it starts; they resolve a one-shot future, so a
second signal (Kubernetes sends one SIGTERM, but ``kill`` twice, or a supervisor's retry, send more)
raised ``InvalidStateError`` inside the event loop and the log showed its traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.kube_api import FakeKubeApiServer
from tests.operator.harness import find, igwc, wait_for


def test_two_sigterms_stop_the_operator_without_a_traceback(
    cluster: FakeKubeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    log = tmp_path / "operator.log"
    command = [sys.executable, "-m", "igw.cli.main", "operator", "--kubeconfig", str(kubeconfig)]
    command += ["--no-leader-election", "--resync-seconds", "0.5"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        cluster.add(igwc("chat"))
        wait_for(
            lambda: find(cluster, "Deployment", "inference", "chat-gateway"), timeout=60, what="reconciling"
        )
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert "InvalidStateError" not in text, text[-3000:]


def test_sigterm_repeated_until_it_exits_still_ends_with_exit_0(
    cluster: FakeKubeApiServer, kubeconfig: Path
) -> None:
    """A supervisor repeating SIGTERM: the loop removes its handlers when it closes, which restored the
    default action, so a repeat landing in the operator's last moments ended it with -15 (5 of 5 runs
    before ``hold_stop_signals``)."""
    command = [sys.executable, "-m", "igw.cli.main", "operator", "--kubeconfig", str(kubeconfig)]
    command += ["--no-leader-election", "--resync-seconds", "0.5"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster.add(igwc("chat"))
        wait_for(
            lambda: find(cluster, "Deployment", "inference", "chat-gateway"), timeout=60, what="reconciling"
        )
        process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            time.sleep(0.002)
        assert process.wait(5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
