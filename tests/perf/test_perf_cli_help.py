"""``igw perf -h``: every benchmark listed, each with its summary on one line."""

from __future__ import annotations

import re

import pytest

from igw.cli.main import main
from igw.cli.perf import BENCHMARKS, SUMMARY_WIDTH


def test_perf_help_lists_every_benchmark_with_a_one_line_summary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The listing gave each benchmark its module's whole description (up to four wrapped lines),
    and the names of 12 characters or more (``metrics-page``, ``workers-notes``) on a line of their
    own, above the text; the description above the list named eight of the thirteen."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exited:
        main(["perf", "-h"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    listing = text.split("\n  NAME\n", 1)[1].split("\n\noptions:", 1)[0].splitlines()
    rows = [re.fullmatch(r"    (\S+) +(\S.*)", line) for line in listing]
    assert all(rows), listing  # no name alone on its line, no wrapped continuation
    listed = {m.group(1): m.group(2) for m in rows if m is not None}
    assert listed == {name: summary for name, _, summary, _ in BENCHMARKS}
    assert all(len(summary) <= SUMMARY_WIDTH for _, _, summary, _ in BENCHMARKS)
    assert all(len(line) <= 80 for line in text.splitlines())
