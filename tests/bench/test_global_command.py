"""``igw bench global`` as a user runs it: progress on stderr, a clean stop, failed counts per policy."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from igw.bench.global_run import GlobalRunOptions, Sample, Timeline, summarize, summary_lines
from igw.cli.main import main
from tests.bench.procs import alive, proc_files


def _processes_naming(text: str) -> list[int]:
    """PIDs of live processes whose command line mentions ``text`` (the run's folder)."""
    return [pid for pid, cmdline in proc_files("cmdline") if text.encode() in cmdline]


def test_each_policys_line_shows_its_failed_requests(tmp_path: Path) -> None:
    """The policy line's P99 is over served requests; it did not say that 2 of 4 requests failed."""
    ok = [
        Sample(sent_at=t, replica=0, stream=False, status=200, cluster="east-a", latency_s=0.2, tokens=10)
        for t in (0.5, 1.5)
    ]
    failed = [Sample(sent_at=t, replica=1, stream=False, status=503, latency_s=0.01) for t in (2.5, 3.5)]
    timeline = Timeline(events=[(1.0, "kill east-a"), (2.0, "east-a back"), (3.0, "kill region east")])
    results = summarize(
        ok,
        timeline,
        {"latency-first": ok + failed, "cost-first-within-slo": ok},
        {"east-a": 0.5},
        GlobalRunOptions(out=tmp_path),
    )
    lines = summary_lines(results)
    latency_first = next(ln for ln in lines if ln.startswith("latency-first:"))
    cost_first = next(ln for ln in lines if ln.startswith("cost-first-within-slo:"))
    assert "P99 latency 0.200 s (served requests; failed 2 of 4)" in latency_first
    assert "failed 0 of 2" in cost_first
    assert not math.isnan(results["policies"]["latency-first"]["latency_p99_s"])


def test_demo_global_refuses_an_out_whose_global_folder_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw demo --global --out X`` writes under X/global; a file there ended the command in a
    NotADirectoryError traceback (``--out``'s check covers X only)."""
    (tmp_path / "global").write_text("not a folder")
    assert main(["demo", "--global", "--quick", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"igw demo --global: cannot create {tmp_path / 'global' / 'work'}: Not a directory" in err
    assert "Traceback" not in err


def _run_until(tmp_path: Path, phase: str) -> subprocess.Popen[str]:
    """Start ``igw bench global --quick``; return it once ``phase`` was printed on its stderr."""
    argv = [sys.executable, "-m", "igw.cli.main", "bench", "global", "--quick"]
    argv += ["--out", str(tmp_path / "out")]
    with (tmp_path / "stdout").open("w") as out, (tmp_path / "stderr").open("w") as err:
        run = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
    deadline = time.monotonic() + 120
    while phase not in (tmp_path / "stderr").read_text():
        assert run.poll() is None, (tmp_path / "stderr").read_text()
        assert time.monotonic() < deadline, f"no {phase!r} in 120 s"
        time.sleep(0.1)
    return run


@pytest.mark.parametrize(
    ("sig", "phase"),
    [
        (signal.SIGINT, "] starting redis-server"),  # Ctrl-C during start-up
        (signal.SIGTERM, "] failover script: "),  # `timeout`, every process up and the load running
    ],
)
def test_a_stop_signal_ends_the_run_in_one_line_with_every_process_stopped(
    tmp_path: Path, sig: signal.Signals, phase: str
) -> None:
    """SIGTERM ended the run with no word (exit 143, ``timeout`` said nothing either), unlike ``igw
    bench``/``igw demo``: now one line, exit 130, and no process of the run left."""
    run = _run_until(tmp_path, phase)
    try:
        time.sleep(0.5)
        children = _processes_naming(str(tmp_path / "out"))
        run.send_signal(sig)
        assert run.wait(timeout=60) == 130
        err = (tmp_path / "stderr").read_text()
        stopped = "igw bench global: interrupted; every process it started has been stopped"
        assert err.splitlines()[-1] == stopped
        assert "Traceback" not in err
        assert "CancelledError" not in err
        assert (tmp_path / "stdout").read_text() == ""
        assert [p for p in children if alive(p)] == []
        assert _processes_naming(str(tmp_path / "out")) == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
