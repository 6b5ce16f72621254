"""What a benchmark run produces, before it is rendered: per policy, per seed, plus plot series.

Kept separate from the runners so that the DES runner, the live runner and the demo all hand the
report writer the same shape, and from the report so that JSON export needs no plotting library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from igw.bench.stats import (
    Estimate,
    RequestSample,
    RunSummary,
    gap_pct,
    reduction_pct,
    t_interval,
)

QueueSeries = Mapping[str, Sequence[tuple[float, int]]]
"""Per endpoint: (time in seconds from the run start, waiting + running requests) samples."""

LATENCY_FIELDS: tuple[str, ...] = (
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "e2e_p99_s",
)
"""Lower-is-better fields: reductions vs round-robin and gaps to the oracle are computed for these."""
RATE_FIELDS: tuple[str, ...] = ("output_tok_per_s", "goodput", "prefix_hit_rate")
"""Higher-is-better fields."""


@dataclass(slots=True)
class PolicyRun:
    """One policy on one scenario: a summary per seed and the first seed's raw series for plots."""

    policy: str
    description: str
    seeds: list[int] = field(default_factory=list)
    summaries: list[RunSummary] = field(default_factory=list)
    samples: list[RequestSample] = field(default_factory=list)
    """Samples of the first seed only (TTFT CDF plot)."""
    queue_series: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    """Queue depth per pod, first seed only (queue plot)."""
    unavailable: str | None = None
    """Why this policy has no numbers (a peer router that could not be installed or started)."""

    def estimate(self, name: str) -> Estimate | None:
        """Mean and 95 % t-interval of one summary field across seeds (``None`` if never measured)."""
        values = [v for s in self.summaries if (v := getattr(s, name)) is not None]
        return t_interval(values) if values else None

    def mean_load_share(self) -> dict[str, float]:
        keys = sorted({k for s in self.summaries for k in s.load_share})
        n = len(self.summaries) or 1
        return {k: sum(s.load_share.get(k, 0.0) for s in self.summaries) / n for k in keys}


@dataclass(slots=True)
class ScenarioRun:
    """Everything measured for one scenario, with the parameters that make it reproducible."""

    scenario: str
    mode: str
    """``des`` or ``live``."""
    parameters: dict[str, Any]
    """Fleet, workload, load level, seeds, capacity, SLO, command line: stated in every output."""
    policies: dict[str, PolicyRun] = field(default_factory=dict)
    baseline: str = "round-robin"
    oracle: str | None = "oracle"

    def _mean(self, policy: str, name: str) -> float | None:
        run = self.policies.get(policy)
        est = run.estimate(name) if run is not None and run.unavailable is None else None
        return None if est is None else est.mean

    def reduction_vs_baseline(self, policy: str, name: str) -> float | None:
        """% lower than round-robin for latency fields; for rate fields, % higher (sign flipped)."""
        value, base = self._mean(policy, name), self._mean(self.baseline, name)
        red = reduction_pct(value, baseline=base)
        if red is None:
            return None
        # 0.0 - x, not -x: the baseline against itself (and any equal rate) is +0.0, not a "-0.0 %" drop
        return red if name in LATENCY_FIELDS else 0.0 - red

    def gap_to_oracle(self, policy: str, name: str) -> float | None:
        """% worse than the oracle (latency: above it; rates: below it)."""
        if self.oracle is None:
            return None
        value, best = self._mean(policy, name), self._mean(self.oracle, name)
        gap = gap_pct(value, oracle=best)
        if gap is None:
            return None
        return gap if name in LATENCY_FIELDS else 0.0 - gap

    def to_json(self) -> dict[str, Any]:
        """All numbers and parameters (no raw samples), ready for ``orjson.dumps``."""
        fields = (*LATENCY_FIELDS, *RATE_FIELDS)
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "mode": self.mode,
            "parameters": self.parameters,
            "baseline": self.baseline,
            "oracle": self.oracle,
            "policies": {},
        }
        for name, run in self.policies.items():
            entry: dict[str, Any] = {
                "description": run.description,
                "unavailable": run.unavailable,
                "seeds": run.seeds,
                "per_seed": [asdict(s) for s in run.summaries],
                "mean_load_share": run.mean_load_share(),
                "estimates": {},
                "reduction_vs_baseline_pct": {},
                "gap_to_oracle_pct": {},
            }
            for f in fields:
                est = run.estimate(f)
                entry["estimates"][f] = None if est is None else asdict(est)
                entry["reduction_vs_baseline_pct"][f] = self.reduction_vs_baseline(name, f)
                entry["gap_to_oracle_pct"][f] = self.gap_to_oracle(name, f)
            out["policies"][name] = entry
        return out


def failed_requests(runs: Sequence[ScenarioRun]) -> dict[str, int]:
    """Failed requests per ``scenario/policy`` over all seeds, only where there were any."""
    out: dict[str, int] = {}
    for run in runs:
        for name, pol in run.policies.items():
            n = sum(s.errors for s in pol.summaries)
            if n:
                out[f"{run.scenario}/{name}"] = n
    return out
