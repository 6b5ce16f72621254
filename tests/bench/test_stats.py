from __future__ import annotations

import math
import random

import numpy as np
import pytest

from igw.bench.stats import (
    RequestSample,
    bootstrap_interval,
    gap_pct,
    goodput_fraction,
    percentile,
    prefix_hit_rate,
    reduction_pct,
    summarize,
    t_critical_975,
    t_interval,
)


def sample(ep: str, ttft: float | None, *, ok: bool = True, out: int = 10, cached: int = 0) -> RequestSample:
    return RequestSample(
        endpoint=ep, ok=ok, arrival_s=0.0, ttft_s=ttft, e2e_s=None if ttft is None else ttft + 1.0,
        itl_s=0.02, prompt_tokens=100, output_tokens=out, cached_tokens=cached,
    )  # fmt: skip


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy_linear(q: float) -> None:
    values = [random.Random(5).uniform(0, 10) for _ in range(37)]
    values = [v * (i % 7 + 1) for i, v in enumerate(values)]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_small_cases() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    with pytest.raises(ValueError, match="percentile q"):
        percentile([1.0], 101)


def test_goodput_counts_failures_as_misses() -> None:
    samples = [sample("a", 0.1), sample("a", 0.5), sample("b", 2.0), sample("b", None, ok=False)]
    assert goodput_fraction(samples, ttft_slo_s=0.5) == 0.5
    assert goodput_fraction([], ttft_slo_s=1.0) is None


def test_prefix_hit_rate_is_token_weighted() -> None:
    assert prefix_hit_rate([sample("a", 0.1, cached=50), sample("a", 0.1, cached=0)]) == 0.25
    assert prefix_hit_rate([sample("a", None, ok=False)]) is None


def test_summarize_reports_every_field() -> None:
    samples = [sample("a", 0.1 * i) for i in range(1, 11)] + [sample("b", None, ok=False)]
    s = summarize(samples, endpoints=["a", "b", "c"], ttft_slo_s=0.5, duration_s=10.0)
    assert (s.requests, s.errors) == (11, 1)
    # the failed request sorts last as an infinite latency: the median moves up one order statistic
    assert s.ttft_p50_s == pytest.approx(0.6)
    assert s.ttft_p95_s == math.inf  # rank 9.5 interpolates towards the failure
    assert s.ttft_p99_s == math.inf
    assert s.e2e_p99_s == math.inf
    assert s.itl_p50_s == pytest.approx(0.02)
    assert s.output_tok_per_s == 10.0
    assert s.goodput == pytest.approx(5 / 11)
    assert s.load_share == {"a": pytest.approx(10 / 11), "b": pytest.approx(1 / 11), "c": 0.0}
    with pytest.raises(ValueError, match="duration_s"):
        summarize(samples, endpoints=["a"], ttft_slo_s=0.5, duration_s=0.0)


def test_t_interval_known_values() -> None:
    est = t_interval([1.0, 2.0, 3.0])
    # mean 2, sd 1, t(0.975, 2) = 4.303 -> half width 4.303 / sqrt(3)
    assert est.mean == 2.0
    assert est.hi - est.mean == pytest.approx(4.303 / 3**0.5)
    assert est.lo == pytest.approx(2.0 - 4.303 / 3**0.5)
    single = t_interval([5.0])
    assert (single.lo, single.hi, single.n) == (5.0, 5.0, 1)
    with pytest.raises(ValueError, match="at least one"):
        t_interval([])


@pytest.mark.parametrize(
    ("n", "t975"),
    [(31, 2.042), (32, 2.03951), (40, 2.02269), (61, 2.00030), (121, 1.97993), (200, 1.97196)],
)
def test_t_interval_uses_the_t_quantile_for_every_sample_size(n: int, t975: float) -> None:
    """From 32 seeds on the half-width used z = 1.96 (while t(0.975, 39) = 2.0227): intervals for
    32-120 seeds were up to 4 % too narrow. Reference values: the exact Student-t quantiles."""
    values = [float(i % 5) for i in range(n)]
    mean = sum(values) / n
    sem = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    est = t_interval(values)
    assert (est.hi - est.mean) / sem == pytest.approx(t975, abs=1e-4)
    assert t_critical_975(n - 1) == pytest.approx(t975, abs=1e-4)


def test_t_critical_value_falls_smoothly_past_the_table() -> None:
    """No jump where the table ends (df 30 -> 31) nor at df 120 (it dropped from 2.042 to 1.960)."""
    dfs = [30, 30.5, 31, 45, 60, 119, 120, 121, 1000, 10**6]
    crits = [t_critical_975(df) for df in dfs]
    assert crits == sorted(crits, reverse=True)
    assert t_critical_975(30) - t_critical_975(31) < 0.003
    assert t_critical_975(119) - t_critical_975(120) < 0.001
    assert crits[-1] == pytest.approx(1.959964, abs=1e-5)


def test_bootstrap_interval_is_reproducible_and_brackets_the_mean() -> None:
    values = [1.0, 2.0, 2.5, 3.0, 10.0]
    a = bootstrap_interval(values, rng=random.Random(42), resamples=500)
    b = bootstrap_interval(values, rng=random.Random(42), resamples=500)
    assert a == b
    assert a.lo <= a.mean <= a.hi
    assert a.mean == pytest.approx(3.7)
    assert a.lo >= 1.0
    assert a.hi <= 10.0
    constant = bootstrap_interval([4.0] * 6, rng=random.Random(1), resamples=100)
    assert (constant.lo, constant.hi) == (4.0, 4.0)


def test_reduction_and_gap_percentages() -> None:
    assert reduction_pct(3.0, baseline=100.0) == pytest.approx(97.0)
    assert reduction_pct(120.0, baseline=100.0) == pytest.approx(-20.0)
    assert reduction_pct(None, baseline=1.0) is None
    assert reduction_pct(1.0, baseline=0.0) is None
    assert gap_pct(115.0, oracle=100.0) == pytest.approx(15.0)
    assert gap_pct(1.0, oracle=None) is None


def test_a_failed_request_worsens_the_reported_percentiles() -> None:
    """The blind spot this guards: dropping failures from the percentiles made a run with failures
    report a better tail than the same run with those requests served slowly."""
    served = [sample("a", 0.01 * i) for i in range(1, 201)]
    slow = [*served, *(sample("b", 5.0) for _ in range(4))]
    failed = [*served, *(sample("b", None, ok=False) for _ in range(4))]
    s_served = summarize(served, endpoints=["a", "b"], ttft_slo_s=1.0, duration_s=10.0)
    s_slow = summarize(slow, endpoints=["a", "b"], ttft_slo_s=1.0, duration_s=10.0)
    s_failed = summarize(failed, endpoints=["a", "b"], ttft_slo_s=1.0, duration_s=10.0)
    assert s_failed.errors == 4
    for field in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "e2e_p99_s", "itl_p99_s"):
        assert getattr(s_failed, field) >= getattr(s_slow, field) >= getattr(s_served, field), field
    assert s_failed.ttft_p99_s == math.inf
    assert s_slow.ttft_p99_s is not None
    assert s_served.ttft_p99_s is not None
    assert s_failed.ttft_p99_s > s_slow.ttft_p99_s > s_served.ttft_p99_s
    assert s_failed.goodput == pytest.approx(100 / 204)  # TTFT 0.01 … 1.00 s meet the 1 s SLO
    assert s_failed.goodput is not None
    assert s_served.goodput is not None
    assert s_failed.goodput < s_served.goodput


def test_timed_out_requests_count_as_failures() -> None:
    ok = [sample("a", 0.1) for _ in range(9)]
    timed_out = RequestSample(endpoint="a", ok=False, arrival_s=0.0, ttft_s=2.0, e2e_s=None, itl_s=None,
                              timed_out=True)  # fmt: skip
    s = summarize([*ok, timed_out], endpoints=["a"], ttft_slo_s=1.0, duration_s=1.0)
    assert s.ttft_p99_s == math.inf
    assert s.goodput == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("ttft", "itl", "expected"),
    [(0.1, 0.05, True), (0.1, 0.2, False), (2.0, 0.05, False), (0.1, None, True)],
)
def test_slo_goodput_needs_both_ttft_and_tpot(ttft: float, itl: float | None, expected: bool) -> None:
    s = RequestSample(endpoint="a", ok=True, arrival_s=0.0, ttft_s=ttft, e2e_s=1.0, itl_s=itl)
    assert goodput_fraction([s], ttft_slo_s=1.0, tpot_slo_s=0.1) == (1.0 if expected else 0.0)
    assert goodput_fraction([s], ttft_slo_s=1.0) == (1.0 if ttft <= 1.0 else 0.0)


def test_percentile_reaches_into_failures() -> None:
    values = [1.0, 2.0, 3.0, math.inf]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == math.inf
    assert percentile(values, 90) == math.inf


def test_estimates_and_comparisons_with_failures() -> None:
    assert t_interval([1.0, math.inf]).mean == math.inf
    assert reduction_pct(1.0, baseline=math.inf) == 100.0
    assert reduction_pct(math.inf, baseline=1.0) == -math.inf
    assert reduction_pct(math.inf, baseline=math.inf) is None
    assert gap_pct(math.inf, oracle=1.0) == math.inf
