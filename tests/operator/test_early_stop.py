"""A stop signal while ``igw`` starts is recorded and acted on once the command can stop cleanly, never
raised inside an import (``igw.cli.early_stop``): the parser's caller exits with 128 + the signal, and
``igw operator``, which keeps them recorded until its loop handles them, stops before it touches the
cluster. In-process, with the signals sent to this process at the moment in question."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from igw.cli import early_stop
from igw.cli import main as cli_main
from igw.cli import operator as cli_operator
from tests.fakes.kube_api import FakeKubeApiServer


@pytest.fixture(autouse=True)
def _kept_handlers() -> Iterator[None]:
    """The test process's own SIGTERM / SIGINT handlers and signal mask, put back after each test
    (``igw operator`` blocks both signals for the rest of its process once it has stopped)."""
    kept = {signum: signal.getsignal(signum) for signum in early_stop.STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    # As igw finds them started from a terminal: a test runner started in the background by a
    # non-interactive shell inherits SIGINT ignored, which igw (rightly) leaves ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, early_stop.STOP_SIGNALS)
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_igw_parses_exits_with_128_plus_it_after_the_parse(
    monkeypatch: pytest.MonkeyPatch, sig: signal.Signals, code: int
) -> None:
    ran: list[str] = []
    real_parse = cli_main._parse

    def parse_with_a_signal(argv: object) -> object:
        os.kill(os.getpid(), sig)  # lands in the middle of building the parser (its imports)
        parsed = real_parse(argv)  # type: ignore[arg-type]
        ran.append("parse finished")  # nothing was raised inside it
        return parsed

    monkeypatch.setattr(cli_main, "_parse", parse_with_a_signal)
    assert cli_main.main(["validate", "no-such-file.yaml"]) == code
    assert ran == ["parse finished"]
    # The handlers igw found are back.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_after_the_parse_ctrl_c_interrupts_a_command_that_does_not_handle_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run(args: argparse.Namespace) -> int:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000_000):  # the KeyboardInterrupt arrives at the next bytecode
            pass
        raise AssertionError("Ctrl-C did not interrupt the command")

    real_parse = cli_main._parse

    def parse(argv: object) -> object:
        args, _run = real_parse(argv)  # type: ignore[arg-type]
        return args, run

    monkeypatch.setattr(cli_main, "_parse", parse)
    assert cli_main.main(["validate", "x.yaml"]) == cli_main.SIGINT_EXIT


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_operator_acts_on_a_signal_recorded_while_it_started_before_touching_the_cluster(
    cluster: FakeKubeApiServer, kubeconfig: Path, sig: signal.Signals, code: int
) -> None:
    parser = argparse.ArgumentParser()
    cli_operator.add_arguments(parser)
    args = parser.parse_args(["--kubeconfig", str(kubeconfig), "--no-leader-election"])
    seen = len(cluster.requests)
    early_stop.defer()
    os.kill(os.getpid(), sig)  # recorded: as if it came during kopf's imports
    assert early_stop.received() == sig
    assert cli_operator.run(args) == code
    assert cluster.requests[seen:] == []
    assert early_stop.received() is None
