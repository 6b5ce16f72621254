"""The TTFT CDF must not flatter a policy whose requests failed: its curve plateaus below 1."""

from __future__ import annotations

import pytest

from igw.bench.plots import ttft_cdf_points
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
