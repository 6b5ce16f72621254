"""``igw perf gateway``'s decision rows time the code the gateway under test runs: with
``--gateway-tree`` / ``--gateway-python`` in a child process on that tree and interpreter (before,
the harness's own code, pure Python while the gateway ran a compiled tree), and a tree or interpreter
that cannot run them ends the command with the reason, not a traceback."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from igw.cli.main import main
from igw.compiled import inspect_tree
from igw.perf.gateway import _decision_timings, _gateway_code

SOURCE_TREE = Path(__file__).resolve().parents[2] / "gateway_src"


def _args(tree: Path | None = None, python: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(gateway_tree=tree, gateway_python=python)


def test_without_a_tree_the_rows_are_timed_here() -> None:
    where, timings = _decision_timings(_args())
    assert where == ""
    assert [t.name for t in timings] == [
        "scheduler decision, 16 endpoints",
        "scheduler decision, 1000 endpoints",
    ]


def test_with_a_tree_the_rows_are_timed_on_it_and_say_so() -> None:
    where, timings = _decision_timings(_args(SOURCE_TREE))
    assert where == f", in a child process on the gateway's code: {inspect_tree().describe()}"
    assert [t.name for t in timings] == [
        "scheduler decision, 16 endpoints",
        "scheduler decision, 1000 endpoints",
    ]
    assert all(t.p50_us > 0 and t.baseline_mean_us > 0 for t in timings)
    assert _gateway_code(_args(SOURCE_TREE)) == f"{inspect_tree().describe()} ({SOURCE_TREE})"


def test_an_interpreter_that_cannot_run_them_ends_the_command_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["perf", "gateway", "--skip-load", "--gateway-python", "/bin/false"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("igw perf gateway: the decision rows on the gateway's code (/bin/false"), err
    assert "Traceback" not in err
