"""Routing quality of DES runs as the perf DES benchmarks print it (``workers-des``, ``scrape-des``).

One simulated run becomes a :class:`~igw.bench.stats.RunSummary` against its scenario's SLOs
(:func:`summary_of`); the runs of several seeds become one :class:`Quality` (the mean of each figure).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from igw.bench.policies.registry import PolicyContext
    from igw.bench.scenarios import Scenario
    from igw.bench.stats import RunSummary
    from igw.sim.des_result import SimulationResult
    from igw.sim.request import SimRequest

Row = TypeVar("Row")


def mean_or_nan(values: Sequence[float | None]) -> float:
    """The mean of the values present (NaN when none is)."""
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else float("nan")


def summary_of(result: SimulationResult, scenario: Scenario) -> RunSummary:
    """``result`` summarised against ``scenario``'s TTFT and TPOT SLOs."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the bench code loads only when run
    from igw.bench.des_runner import samples_of
    from igw.bench.stats import summarize

    return summarize(
        samples_of(result),
        endpoints=list(result.pods),
        ttft_slo_s=scenario.ttft_slo_s,
        tpot_slo_s=scenario.tpot_slo_s,
        duration_s=max(result.end_time, 1e-9),
    )


@dataclass(frozen=True, slots=True)
class Quality:
    """TTFT p50/p99, E2E p99 and goodput, each the mean over seeds."""

    ttft_p50_s: float
    ttft_p99_s: float
    e2e_p99_s: float
    goodput: float

    @classmethod
    def over(cls, runs: Sequence[RunSummary]) -> Quality:
        return cls(
            ttft_p50_s=mean_or_nan([r.ttft_p50_s for r in runs]),
            ttft_p99_s=mean_or_nan([r.ttft_p99_s for r in runs]),
            e2e_p99_s=mean_or_nan([r.e2e_p99_s for r in runs]),
            goodput=mean_or_nan([r.goodput for r in runs]),
        )


def seed_requests(
    scenario: Scenario, *, capacity_rps: float, seed: int, duration_scale: float
) -> list[SimRequest]:
    """The scenario's requests for one seed, at ``duration_scale`` of its duration: every variant a
    benchmark compares runs these same requests."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the bench code loads only when run
    from igw.bench.workload import scenario_requests

    return scenario_requests(
        scenario, capacity_rps=capacity_rps, seed=seed, duration_s=scenario.duration_s * duration_scale
    )


def policy_context(scenario: Scenario, *, seed: int, index: int = 0) -> PolicyContext:
    """The routing policy's context for one run: a random source fixed by the seed (and by ``index``
    when one run builds several policies, as the workers benchmark does), the scenario's LoRA flag
    and SLOs."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the bench code loads only when run
    from igw.bench.policies.registry import PolicyContext
    from igw.bench.scenarios import LoraShape

    return PolicyContext(
        rng=random.Random(seed * 7919 + 17 + index * 104_729),
        lora=isinstance(scenario.workload, LoraShape),
        slo=(scenario.ttft_slo_s, scenario.tpot_slo_s),
    )


def check_duration_scale(scenarios: Iterable[str], *, duration_scale: float) -> None:
    """Raise :class:`~igw.bench.workload.TooManyRequests` (an ``IgwToolingError``) when one seed of any
    of ``scenarios`` at ``duration_scale`` would hold more requests than a run holds, before any of them
    runs: checked only as each scenario's requests were built, ``igw perf scrape-des --scenarios
    mixed-fleet-8b,burst-70b`` measured the first scenario in full before the second was refused. The
    capacity measurement is memoised, so each scenario's run reuses it."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the bench code loads only when run
    from igw.bench import capacity
    from igw.bench.scenarios import SCENARIOS
    from igw.bench.workload import planned_requests

    for name in scenarios:
        scenario = SCENARIOS[name]
        cap = capacity.fleet_capacity(scenario)
        planned_requests(
            scenario, capacity_rps=cap.requests_per_s, duration_s=scenario.duration_s * duration_scale
        )


def run_per_scenario(
    scenarios: Iterable[str], measure: Callable[[str], list[Row]], print_rows: Callable[[list[Row]], None]
) -> list[Row]:
    """Measure each scenario in turn, printing its rows as they come, then every row as a summary."""
    rows: list[Row] = []
    for name in scenarios:
        measured = measure(name)
        rows += measured
        print_rows(measured)
    print("summary:")
    print_rows(rows)
    return rows
