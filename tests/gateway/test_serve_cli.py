"""``igw serve`` as a real process: start-up validation, serving, clean SIGTERM shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from igw.cli.main import build_parser, main
from igw.gateway.worker_count import MAX_WORKERS
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, serving_url


def test_invalid_config_exits_2_with_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = config_doc([scheduler("a", "m", weights={"queue": -1}), scheduler("b", "m")])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(bad))
    (tmp_path / "e.yaml").write_text("schedulers: {}\n")
    code = main(["serve", "--config", str(tmp_path / "c.yaml"), "--endpoints", str(tmp_path / "e.yaml")])
    assert code == 2
    err = capsys.readouterr().err
    assert "spec.schedulers[0].weights.queue" in err
    assert "modelName" in err


def test_a_refusal_comes_after_the_log_lines_still_queued(capsys: pytest.CaptureFixture[str]) -> None:
    """A start-up refusal is the last line on stderr: the log lines logged before it and still queued
    in the writer thread (interval 0.2 s; here an hour, so the race is not left to timing) are written
    first. Until session s50 ``igw serve --in-cluster --workers auto`` with no cluster printed the
    error, then worker 0's start-up INFO lines, written at exit."""
    from igw.cli.serve import _refuse
    from igw.gateway.log_buffer import BatchedLineHandler

    handler = BatchedLineHandler(sys.stderr, interval_s=3600)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        logging.getLogger("igw.gateway").warning("start-up line")
        _refuse("cannot load cluster credentials")
    finally:
        root.removeHandler(handler)
        handler.close()
    assert capsys.readouterr().err.splitlines() == [
        "start-up line",
        "igw serve: cannot load cluster credentials",
    ]


def test_returning_leaves_no_log_handler_behind(tmp_path: Path) -> None:
    """``igw serve`` installs its access-log writer on stdout; one left behind after an early exit kept
    writing to pytest's closed capture ("Logging error: I/O operation on closed file")."""
    watched = [logging.getLogger("igw.access"), logging.getLogger("igw.emf")]
    before = [list(logger.handlers) for logger in watched]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler("pool", "m")])))
    (tmp_path / "e.yaml").write_text("schedulers: [\n")  # refused at start: exit 2
    code = main(["serve", "--config", str(tmp_path / "c.yaml"), "--endpoints", str(tmp_path / "e.yaml")])
    assert code == 2
    assert [list(logger.handlers) for logger in watched] == before


async def test_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    async with running(FakeModelServer("pod")) as (pod,):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler("pool", "m")])))
        (tmp_path / "e.yaml").write_text(yaml.safe_dump({"schedulers": {"m": [pod.key]}}))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "c.yaml"),
            "--endpoints", str(tmp_path / "e.yaml"), "--host", "127.0.0.1", "--port", "0",
            "--drain-seconds", "1",
            stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            url = await serving_url(proc.stderr)
            async with aiohttp.ClientSession() as http:
                for _ in range(100):
                    if (await http.get(url + "/readyz")).status == 200:
                        break
                    await asyncio.sleep(0.05)
                resp = await http.post(url + "/v1/completions", json={"model": "m", "prompt": "hi"})
                assert resp.status == 200
                assert (await resp.json())["server"] == "pod"
                proc.send_signal(signal.SIGTERM)
                draining = None
                for _ in range(100):  # during the drain: not ready, but still serving
                    draining = await http.get(url + "/readyz")
                    if draining.status == 503:
                        break
                    await asyncio.sleep(0.02)
                assert draining is not None
                assert (await draining.json())["draining"] is True
                assert (
                    await http.post(url + "/v1/completions", json={"model": "m", "prompt": "hi"})
                ).status == 200
            assert await asyncio.wait_for(proc.wait(), timeout=20) == 0
            assert proc.stdout is not None
            access = (await proc.stdout.read()).decode()
            assert '"status":200' in access  # the JSON access log goes to stdout
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--endpoints", "e.yaml", "--kubeconfig", "c.yaml"], "--kubeconfig needs --in-cluster"),
        (["--in-cluster", "--config-maps", "."], "--config-maps needs --endpoints"),
    ],
)
def test_options_it_would_ignore_or_cannot_use_are_refused_at_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    """``--kubeconfig`` with ``--endpoints`` and ``--config-maps`` with ``--in-cluster`` were ignored
    silently. (``--config-maps`` naming no folder, which failed only once a configMapRef was looked up,
    is refused while parsing: tests/architecture/test_argument_parsing.py.)"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_doc([scheduler("pool", "m")])))
    (tmp_path / "e.yaml").write_text("schedulers: {}\n")
    assert main(["serve", "--config", "c.yaml", "--port", "0", *extra]) == 2
    assert f"igw serve: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["serve", "--config", "c.yaml", "--endpoints", __file__], "--workers"),  # an existing file
        (["operator"], "--gateway-workers"),
    ],
)
def test_a_worker_count_above_the_maximum_is_refused_naming_the_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    """``auto`` stops at MAX_WORKERS (64, the chart's bound too); a number given was taken whatever its
    size, so ``--workers 65`` (or a typo of 1000) started that many processes. The bound is the same."""
    parser = build_parser()
    accepted = parser.parse_args([*argv, flag, str(MAX_WORKERS)])
    assert getattr(accepted, flag.lstrip("-").replace("-", "_")) == MAX_WORKERS
    with pytest.raises(SystemExit) as refused:
        parser.parse_args([*argv, flag, str(MAX_WORKERS + 1)])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a whole number from 1 to {MAX_WORKERS} or 'auto', got '65'" in err
