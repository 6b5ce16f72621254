"""The TTFT CDF must not flatter a policy whose requests failed: its curve plateaus below 1."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from igw.bench.plots import plot_ttft_cdf, ttft_cdf_points
from igw.bench.results import PolicyRun, ScenarioRun
from igw.bench.stats import RequestSample


def _sample(*, ok: bool, ttft: float | None) -> RequestSample:
    return RequestSample(endpoint="p", ok=ok, arrival_s=0.0, ttft_s=ttft, e2e_s=ttft, itl_s=None)


def test_cdf_denominator_counts_failed_requests() -> None:
    samples = [
        _sample(ok=True, ttft=0.2),
        _sample(ok=True, ttft=0.1),
        _sample(ok=False, ttft=None),
        _sample(ok=False, ttft=3.0),
    ]
    xs, ys, unanswered = ttft_cdf_points(samples)
    assert xs == [0.1, 0.2]
    assert ys == pytest.approx([0.25, 0.5])
    assert unanswered == 2


def test_cdf_of_all_answered_reaches_one() -> None:
    xs, ys, unanswered = ttft_cdf_points([_sample(ok=True, ttft=t) for t in (0.3, 0.0, 0.1)])
    assert xs == [1e-4, 0.1, 0.3]
    assert ys[-1] == pytest.approx(1.0)
    assert unanswered == 0


def test_a_run_with_no_answered_request_plots_without_a_warning(tmp_path: Path) -> None:
    """``igw demo --drain 2`` (every request unanswered) printed matplotlib's "No artists with labels
    found to put in legend" UserWarning, with a source line, among its report (session s50)."""
    run = ScenarioRun(scenario="s", mode="live", parameters={}, oracle=None)
    for name in ("round-robin", "gateway-default"):
        run.policies[name] = PolicyRun(
            policy=name, description=name, samples=[_sample(ok=False, ttft=2.0)] * 3
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_ttft_cdf(run, tmp_path / "cdf.png").stat().st_size > 0
