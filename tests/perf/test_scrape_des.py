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


@pytest.mark.parametrize("benchmark", ["scrape-des", "workers-des"])
def test_a_duration_scale_too_long_to_hold_is_reported_not_a_traceback(
    benchmark: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw perf scrape-des --duration-scale 1e9`` (and ``workers-des``) ended in the workload's
    ``ValueError`` traceback, exit 1: the perf command reports tooling errors only. And each scenario
    was checked only when its turn came, so the first ran in full before the second was refused: every
    scenario is checked now, before any runs. The capacity measurement (seconds) is replaced by a fixed
    rate per scenario, and a run by a stub that fails the test."""
    import types

    from igw.bench import capacity
    from igw.sim import des

    rates = {"demo-mixed-8b": 1.0, "mixed-fleet-8b": 1_000.0}
    monkeypatch.setattr(
        capacity,
        "fleet_capacity",
        lambda scenario, **_k: types.SimpleNamespace(requests_per_s=rates[scenario.name]),
    )

    def no_run(*_a: object, **_k: object) -> object:
        raise AssertionError("a scenario ran before the duration scale was checked")

    monkeypatch.setattr(des, "simulate", no_run)
    argv = ["perf", benchmark, "--scenarios", "demo-mixed-8b,mixed-fleet-8b", "--duration-scale", "900"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"igw perf {benchmark}: mixed-fleet-8b: " in err
    assert "requests per seed, more than the 1,000,000 a run holds; lower --duration-scale" in err
