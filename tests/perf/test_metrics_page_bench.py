"""``igw perf metrics-page`` runs from the command line and prints both ways for every size."""

from __future__ import annotations

import pytest

from igw.cli.main import main


def test_both_ways_are_measured_for_every_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["perf", "metrics-page", "--endpoints", "8,24", "--pools", "4", "--models", "3", "--scrapes", "1"]
        )
        == 0
    )
    out = capsys.readouterr().out
    for size in ("8 endpoints", "24 endpoints"):
        assert size in out
    assert out.count("on loop   loop stall") == 2
    assert out.count("off loop  loop stall") == 2
