"""``igw perf soak`` end to end, shortened to seconds: every phase runs and is reported."""

from __future__ import annotations

import re

import pytest

from igw.cli.main import main


def test_short_soak_reports_every_phase_without_lost_requests(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["perf", "soak", "--minutes", "0.1", "--calibrate-seconds", "3", "--settle-seconds", "1"]
    code = main([*argv, "--pods", "1", "--concurrency", "8", "--time-scale", "2"])
    out = capsys.readouterr().out
    rows = {
        m.group(1): m.group(2).split("|")
        for m in re.finditer(r"^\| (calibrate|steady 80%|overload 150%) \|(.*)$", out, re.M)
    }
    assert set(rows) == {"calibrate", "steady 80%", "overload 150%"}
    for name, cells in rows.items():
        sent, ok, rejected, lost = (int(c) for c in cells[1:5])
        assert sent > 0, name
        assert ok + rejected + lost == sent, name
        assert lost == 0, name
    # The verdict follows the numbers: exit 1 exactly when a FAIL line was printed.
    assert code == (1 if "FAIL " in out else 0)
