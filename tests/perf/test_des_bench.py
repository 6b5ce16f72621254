"""``igw perf des``'s closing line: the served count and TTFT quantiles, read by a person."""

from __future__ import annotations

import re

import pytest

from igw.cli.main import main


def test_the_ttft_quantiles_are_printed_in_milliseconds_with_their_unit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The line read ``served 2000, TTFT p50 0.011900136113251136, p99 0.056687357943893346``: bare
    seconds with 18 digits and no unit (session s50)."""
    assert main(["perf", "des", "--requests", "200", "--pods", "2"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"  served 200, TTFT p50 \d+\.\d{3} ms, p99 \d+\.\d{3} ms \(simulated\)", last), last
