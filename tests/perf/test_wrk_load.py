"""``igw perf workers --load wrk``: the script's summary is parsed strictly (any error count fails the
phase), a missing wrk is a clear exit 2, and - where wrk is installed - a real run against the raw
backend counts the requests the backend answered."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from igw.cli.main import main
from igw.perf.gateway_load import PROMPT, backend_process
from igw.perf.wrk_load import INSTALL_HINT, WrkError, parse_summary, run_wrk, script

LINE = "IGW-WRK requests={} duration_us=2000000 connect={} read=0 write=0 status={} timeout=0"


def test_the_summary_gives_requests_and_seconds() -> None:
    noise = "Running 2s test @ http://127.0.0.1:1/v1/completions\n  1 threads and 4 connections\n"
    assert parse_summary(noise + LINE.format(900, 0, 0) + "\n") == (900, 2.0)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (LINE.format(900, 0, 3), "status 3"),
        (LINE.format(900, 2, 1), "connect 2, status 1"),
        (LINE.format(0, 0, 0), "no request"),
        ("unable to connect to 127.0.0.1:1 Connection refused\n", "no summary line"),
    ],
)
def test_errors_and_a_missing_summary_fail_the_phase(output: str, message: str) -> None:
    with pytest.raises(WrkError, match=message):
        parse_summary(output)


def test_the_script_sends_the_raw_generators_body_and_refuses_a_prompt_that_needs_escaping() -> None:
    lua = script("hi there. ")
    assert """'{"model":"fake-model","max_tokens":4,"prompt":"hi there. question '""" in lua
    assert """prefix .. n .. '"}'""" in lua
    with pytest.raises(ValueError, match="escaping"):
        script("it's")


def test_without_wrk_the_command_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no wrk on it
    assert main(["perf", "workers", "--load", "wrk", "--rounds", "1"]) == 2
    assert INSTALL_HINT in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_a_real_wrk_phase_reports_its_requests_time_and_cpu(tmp_path: Path) -> None:
    lua = tmp_path / "completions.lua"
    lua.write_text(script(PROMPT))
    with backend_process(chunks=4, interval=0.0, raw=True) as (base, backend):
        assert backend.stdout is not None
        with backend.stdout:  # its PORT line is read; nothing else comes
            ran = asyncio.run(run_wrk(base, concurrency=4, seconds=1, script_path=lua))
    assert ran.requests > 100
    assert 0.9 < ran.wall_s < 1.5
    assert ran.cpu_s > 0


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (apt-get install wrk)")
def test_the_workers_benchmark_runs_its_phases_with_wrk(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["perf", "workers", "--load", "wrk", "--seconds", "1", "--rounds", "1", "--concurrency", "4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "1 s per phase" in out
    assert "wrk load generator" in out
    phases = re.findall(r"^\s+([12])\s+(\d+)\s+(\d+) µs\s+[\d.]+\s+([\d.]+)", out, re.M)
    assert [p[0] for p in phases] == ["1", "2"]
    # requests/s, the gateway's CPU per request and wrk's share of a core are all measured
    assert all(int(rps) > 0 and int(us) > 0 and float(client) > 0 for _n, rps, us, client in phases)
    assert re.search(r"throughput 2 vs 1 worker\(s\) \(median over rounds\): \d+ / \d+ req/s", out)
