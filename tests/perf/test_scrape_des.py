"""``igw perf scrape-des`` end to end on a short scenario: both paces on the same requests."""

from __future__ import annotations

import re

import pytest

from igw.cli.main import main


def test_fixed_and_paced_rows_compare_quality_decisions_and_scrapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["perf", "scrape-des", "--scenarios", "demo-mixed-8b", "--duration-scale", "0.05"])
    out = capsys.readouterr().out
    assert code == 0
    summary = out.split("summary:")[1]
    rows = re.findall(
        r"^demo-mixed-8b\s+(fixed|paced)\s+([\d.]+)s\s+([\d.]+)s\s+([\d.]+)s\s+([\d.]+)\s+([\d.]+)×"
        r"\s+([\d.]+)\s+(\d+)\s+([\d.]+)×$",
        summary,
        re.M,
    )
    assert [r[0] for r in rows] == ["fixed", "paced"]
    fixed, paced = rows
    assert float(fixed[5]) == 1.0  # the baseline's own ratios
    assert float(fixed[6]) == 1.0
    assert 0.0 <= float(paced[6]) <= 1.0  # share of requests sent to the same pod
    assert 0 < int(paced[7]) <= int(fixed[7])  # pacing never scrapes more
    assert float(paced[8]) == pytest.approx(int(paced[7]) / int(fixed[7]), abs=0.001)
