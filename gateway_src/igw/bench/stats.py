"""Metric computations for one run and across seeds: percentiles, goodput, confidence intervals.

Everything here is a pure function over plain numbers so that it can be tested on small
deterministic inputs and reused by the DES runner, the live runner and the demo alike.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

# Two-sided 95 % Student-t critical values t_{0.975, df} for df = 1..30 (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


@dataclass(frozen=True, slots=True)
class RequestSample:
    """One finished (or failed) request as every runner reports it, in seconds and tokens."""

    endpoint: str
    ok: bool
    arrival_s: float
    ttft_s: float | None
    e2e_s: float | None
    itl_s: float | None
    """Mean inter-token latency of this request (seconds per output token after the first)."""
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    timed_out: bool = False
    """Cancelled by the client's deadline (then also not ``ok``); ``ttft_s`` is then the time waited when
    no token had arrived. Like every failure it enters the latency percentiles as :data:`FAILED`."""


FAILED: float = math.inf
"""The latency a failed request contributes to every latency percentile: it never got an answer, so
it sorts after every success (a run with failures can never report a better tail than without)."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default), or ``None`` for an empty input. Infinite values (failures) sort last; a
    percentile that reaches into them is infinite."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    frac = rank - low
    if frac == 0.0 or ordered[low] == ordered[high]:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * frac


def latency_or_failed(sample: RequestSample, value: float | None) -> float:
    """``value`` for a successful request; :data:`FAILED` for a failed (or timed-out) one."""
    if not sample.ok or value is None:
        return FAILED
    return value


def goodput_fraction(
    samples: Sequence[RequestSample], *, ttft_slo_s: float, tpot_slo_s: float | None = None
) -> float | None:
    """SLO goodput: the share of *all* requests (failed ones included) that succeeded with TTFT <= its
    SLO and, when ``tpot_slo_s`` is given, a mean time per output token (ITL) <= that SLO too.

    A request with a single output token has no inter-token time and meets any TPOT SLO."""
    if not samples:
        return None

    def good(s: RequestSample) -> bool:
        if not s.ok or s.ttft_s is None or s.ttft_s > ttft_slo_s:
            return False
        return tpot_slo_s is None or s.itl_s is None or s.itl_s <= tpot_slo_s

    return sum(1 for s in samples if good(s)) / len(samples)


def prefix_hit_rate(samples: Sequence[RequestSample]) -> float | None:
    """Prompt tokens served from the prefix cache over all prompt tokens of successful requests."""
    prompt = sum(s.prompt_tokens for s in samples if s.ok)
    return None if prompt == 0 else sum(s.cached_tokens for s in samples if s.ok) / prompt


def load_share(samples: Sequence[RequestSample], *, endpoints: Sequence[str]) -> dict[str, float]:
    """Fraction of requests sent to each endpoint (every listed endpoint appears, even at 0)."""
    counts = Counter(s.endpoint for s in samples)
    total = len(samples)
    return {e: (counts[e] / total if total else 0.0) for e in sorted(endpoints)}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The per-policy numbers the issue asks for, for one run (one seed)."""

    requests: int
    errors: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    e2e_p99_s: float | None
    output_tok_per_s: float
    goodput: float | None
    prefix_hit_rate: float | None
    load_share: dict[str, float]


def summarize(
    samples: Sequence[RequestSample],
    *,
    endpoints: Sequence[str],
    ttft_slo_s: float,
    duration_s: float,
    tpot_slo_s: float | None = None,
) -> RunSummary:
    """Reduce one run's samples; ``duration_s`` is the span throughput is measured over.

    Every failed request (an error status, a client timeout, a dropped stream) enters the TTFT, ITL and
    E2E percentiles as :data:`FAILED` (infinite latency) and counts against the goodput, so failures can
    only make a policy look worse. Successful single-token requests have no ITL and are left out of it."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    ok = [s for s in samples if s.ok]
    ttft = [latency_or_failed(s, s.ttft_s) for s in samples]
    itl = [latency_or_failed(s, s.itl_s) for s in samples if not s.ok or s.itl_s is not None]
    e2e = [latency_or_failed(s, s.e2e_s) for s in samples]
    return RunSummary(
        requests=len(samples),
        errors=len(samples) - len(ok),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        ttft_p99_s=percentile(ttft, 99),
        itl_p50_s=percentile(itl, 50),
        itl_p99_s=percentile(itl, 99),
        e2e_p99_s=percentile(e2e, 99),
        output_tok_per_s=sum(s.output_tokens for s in ok) / duration_s,
        goodput=goodput_fraction(samples, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s),
        prefix_hit_rate=prefix_hit_rate(samples),
        load_share=load_share(samples, endpoints=endpoints),
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean across seeds with a two-sided confidence interval (``lo == hi == mean`` for n = 1)."""

    mean: float
    lo: float
    hi: float
    n: int


def t_critical_975(df: float) -> float:
    """Two-sided 95 % critical value of Student's t for ``df`` degrees of freedom (may be fractional,
    as Welch's test gives).

    Up to 30 the standard table, ``df`` rounded *down* to a tabulated value (which can only make a test
    stricter); beyond it the Cornish-Fisher expansion of t in powers of 1/df around the normal
    quantile, within 1e-5 of the exact value there (2.0395 at 31, 2.0211 at 40, 1.9799 at 120) and
    falling smoothly to 1.96 - no jump where the table ends, and never the normal quantile for a
    sample that still has a t tail. (Before session s39 df 31-119 got the df-30 value and df >= 120
    jumped to 1.96, while :func:`t_interval` used 1.96 from df 30 on: intervals too narrow.)"""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if df <= len(_T975):
        return _T975[max(int(df), 1) - 1]
    z = _Z975
    z2 = z * z
    g1 = (z2 + 1) * z / 4
    g2 = ((5 * z2 + 16) * z2 + 3) * z / 96
    g3 = (((3 * z2 + 19) * z2 + 17) * z2 - 15) * z / 384
    g4 = ((((79 * z2 + 776) * z2 + 1482) * z2 - 1920) * z2 - 945) * z / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def t_interval(values: Sequence[float], *, confidence: float = 0.95) -> Estimate:
    """Student-t interval for the mean of independent runs (seeds)."""
    if confidence != 0.95:
        raise ValueError("only 95 % intervals are tabulated")
    if not values:
        raise ValueError("t_interval needs at least one value")
    n = len(values)
    if any(math.isinf(v) for v in values):
        worst = max(values)  # a seed whose percentile is a failure: the mean is that failure
        return Estimate(mean=worst, lo=worst, hi=worst, n=n)
    mean = sum(values) / n
    if n == 1:
        return Estimate(mean=mean, lo=mean, hi=mean, n=1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    crit = t_critical_975(n - 1)
    half = crit * sd / math.sqrt(n)
    return Estimate(mean=mean, lo=mean - half, hi=mean + half, n=n)


def bootstrap_interval(
    values: Sequence[float],
    *,
    rng: random.Random,
    statistic: Callable[[Sequence[float]], float] | None = None,
    resamples: int = 2000,
    confidence: float = 0.95,
) -> Estimate:
    """Percentile bootstrap interval of ``statistic`` (default: the mean) with an injected rng."""
    if not values:
        raise ValueError("bootstrap_interval needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    stat = statistic or (lambda xs: sum(xs) / len(xs))
    point = stat(values)
    draws = sorted(stat(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo = percentile(draws, tail)
    hi = percentile(draws, 100.0 - tail)
    assert lo is not None
    assert hi is not None
    return Estimate(mean=point, lo=lo, hi=hi, n=len(values))


def reduction_pct(value: float | None, *, baseline: float | None) -> float | None:
    """How much lower ``value`` is than ``baseline``, in percent (positive = better for latency)."""
    if value is None or baseline is None or baseline == 0:
        return None
    if math.isinf(value) or math.isinf(baseline):
        return _infinite_comparison(value, baseline)
    return 100.0 * (baseline - value) / baseline


def gap_pct(value: float | None, *, oracle: float | None) -> float | None:
    """How far ``value`` is above the oracle's, in percent (0 = as good as the oracle)."""
    if value is None or oracle is None or oracle == 0:
        return None
    if math.isinf(value) or math.isinf(oracle):
        better = _infinite_comparison(value, oracle)
        return None if better is None else -better
    return 100.0 * (value - oracle) / oracle


def _infinite_comparison(value: float, baseline: float) -> float | None:
    """Reduction of ``value`` against ``baseline`` when a failure (infinity) is involved: a finite value
    against a failed baseline is a full reduction (+100 %), a failure against a finite one is
    unboundedly worse (−inf), and two failures are not comparable (``None``)."""
    if math.isinf(value) and math.isinf(baseline):
        return None
    return -math.inf if math.isinf(value) else 100.0


def max_min_fair(demands: Mapping[str, int], capacity: int) -> dict[str, float]:
    """Max-min fair split of ``capacity`` among ``demands`` (water-filling)."""
    fair: dict[str, float] = {}
    left = float(capacity)
    pending = sorted(demands.items(), key=lambda kv: kv[1])
    while pending:
        equal = left / len(pending)
        tenant, demand = pending[0]
        if demand <= equal:
            fair[tenant] = float(demand)
            left -= demand
            pending.pop(0)
            continue
        for tenant, _ in pending:
            fair[tenant] = equal
        break
    return fair
