"""``igw bench global`` as a user runs it: progress on stderr, a clean stop, failed counts per policy."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from igw.bench import global_run
from igw.bench.global_run import GlobalRunOptions, Sample, Timeline, summarize, summary_lines
from igw.cli.main import main
from igw.config.paths import REPO_ROOT
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


def _results(tmp_path: Path, *, failed: int) -> dict[str, Any]:
    """A finished run's results, ``failed`` of its cost-policy requests failed (503)."""
    ok = [
        Sample(sent_at=t, replica=0, stream=False, status=200, cluster="east-a", latency_s=0.2, tokens=10)
        for t in (0.5, 1.5, 2.5, 3.5)
    ]
    bad = [Sample(sent_at=4.5, replica=1, stream=False, status=503, latency_s=0.01)] * failed
    timeline = Timeline(events=[(1.0, "kill east-a"), (2.0, "east-a back"), (3.0, "kill region east")])
    policies = {"latency-first": ok + bad, "cost-first-within-slo": ok}
    return summarize(ok, timeline, policies, {"east-a": 0.5}, GlobalRunOptions(out=tmp_path))


def _finished_run(monkeypatch: pytest.MonkeyPatch, results: dict[str, Any]) -> None:
    """``igw bench global`` without its processes: the script "ran" and gave ``results``."""

    async def run_global(options: GlobalRunOptions, progress: object) -> dict[str, Any]:
        return results

    monkeypatch.setattr(global_run, "run_global", run_global)


@pytest.mark.parametrize(
    ("failed", "extra", "status", "said"),
    [
        (0, [], 0, None),
        (2, [], 1, "igw bench global: failed requests: latency-first: 2 of 6; exit status 1 "
                   "(pass --allow-failures to accept)"),
        (2, ["--allow-failures"], 0, "igw bench global: failed requests (exit status 0 all the same): "
                                     "latency-first: 2 of 6"),
    ],
)  # fmt: skip
def test_a_global_run_with_failed_requests_exits_1_unless_allowed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failed: int,
    extra: list[str],
    status: int,
    said: str | None,
) -> None:
    """``igw bench global`` exited 0 whatever failed, so a CI job could not gate on it (and
    ``--allow-failures`` was refused as an option it ignores); as ``igw bench``: exit 1 after the
    report, listing the failed counts, unless ``--allow-failures``."""
    _finished_run(monkeypatch, _results(tmp_path, failed=failed))
    out = tmp_path / "out"
    assert main(["bench", "global", "--quick", *extra, "--out", str(out)]) == status
    captured = capsys.readouterr()
    assert (out / "global-report.md").is_file()
    assert f"failed {failed} of {4 + failed}" in captured.out
    if said is None:
        assert "failed requests" not in captured.err
    else:
        assert said in captured.err.splitlines()


@pytest.mark.parametrize(("failed", "status"), [(0, 0), (1, 1)])
def test_demo_global_fails_when_the_global_routers_lose_a_request(
    failed: int,
    status: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``igw demo --global`` printed its failed-requests line and exited 0; every request goes through
    the global routers, the system it shows, so it fails (exit 1) as ``igw demo`` does when a gateway
    fails one, saying why (it takes no ``--allow-failures``, so the line does not offer it)."""
    _finished_run(monkeypatch, _results(tmp_path, failed=failed))
    assert main(["demo", "--global", "--quick", "--out", str(tmp_path / "out")]) == status
    err = capsys.readouterr().err
    assert (tmp_path / "out" / "global" / "global-report.md").is_file()
    if failed:
        assert (
            "igw demo --global: failed requests: latency-first: 1 of 5; exit status 1 (the demo expects the "
            "global routers to serve every request, failovers included)"
        ) in err.splitlines()
    else:
        assert "failed requests" not in err


SIGTERM_WHILE_WRITING = """
import os, signal, sys, time
from pathlib import Path
from igw.bench import global_report, global_run
from igw.cli.main import main
from tests.bench.test_global_command import _results

out = Path(sys.argv[1])

async def run_global(options, progress):
    return _results(out, failed=0)

def write_global_report(results, where, *, command):
    (where / "global-results.json").write_text("{")  # part written when the signal came
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    return where / "global-report.md"

global_run.run_global = run_global
global_report.write_global_report = write_global_report
sys.exit(main(["bench", "global", "--quick", "--out", str(out)]))
"""


def test_sigterm_while_the_report_is_written_says_so_and_exits_130(tmp_path: Path) -> None:
    """The report is written after the run's signal handling ended: a SIGTERM then (``timeout``, a CI
    runner's cancel) killed the interpreter with no word, exit 143 (-15), a half-written report left.
    Now the same one line as during the run, naming the report folder, and exit 130."""
    run = subprocess.run(
        [sys.executable, "-c", SIGTERM_WHILE_WRITING, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "gateway_src"), str(REPO_ROOT)])},
        cwd=REPO_ROOT,
    )
    assert run.returncode == 130, (run.returncode, run.stderr)
    assert run.stderr.splitlines()[-1] == (
        f"igw bench global: interrupted while writing the report (what is in {tmp_path} may be "
        "incomplete); every process it started has been stopped"
    )
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
