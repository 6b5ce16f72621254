"""``igw perf scrape-des``: routing quality with idle pods scraped less often, in the DES.

For each scenario and seed, the same request list is routed by the gateway's real scheduler twice:
with every pod scraped every interval (``fixed``) and with the gateway's idle pacing (``paced``:
:mod:`igw.gateway.scrape_pacing`, idle pods up to ``min(staleThreshold / 2, staleThreshold - 2
intervals)`` apart, every interval again from the first dispatch). Printed per scenario: TTFT p50/p99,
E2E p99 and goodput (mean over seeds) for both, the share of requests sent to the same pod, and the
scrapes taken - what the pacing saves on that workload and whether it changes any decision.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from igw.perf.des_quality import (
    Quality,
    check_duration_scale,
    policy_context,
    run_per_scenario,
    seed_requests,
    summary_of,
)

if TYPE_CHECKING:
    from igw.bench.stats import RunSummary

HELP = "Routing quality with idle pods scraped less often (DES): the same requests, fixed vs paced scrapes."
SCENARIOS: Final = ("mixed-fleet-8b", "burst-70b")
PACES: Final = ("fixed", "paced")


@dataclass(frozen=True, slots=True)
class PacingRow:
    scenario: str
    pace: str
    quality: Quality
    scrapes: int
    """Scrapes taken over all seeds."""
    same_pod: float
    """Share of requests sent to the pod the ``fixed`` run sent them to (1.0 for ``fixed`` itself)."""


def measure(
    scenario_name: str,
    *,
    policy: str,
    seeds: Sequence[int],
    duration_scale: float,
    scrape_interval_s: float,
    stale_threshold_s: float,
) -> list[PacingRow]:
    """Both paces on the scenario's identical requests per seed."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.bench.capacity import fleet_capacity
    from igw.bench.policies.registry import build_policy
    from igw.bench.scenarios import SCENARIOS as ALL_SCENARIOS
    from igw.bench.workload import fleet_pods, model_name
    from igw.gateway.scrape_pacing import idle_gap_limit
    from igw.sim.des import simulate

    scenario = ALL_SCENARIOS[scenario_name]
    capacity = fleet_capacity(scenario)
    pods = fleet_pods(scenario)
    limit = idle_gap_limit(scrape_interval_s, stale_threshold_s)
    summaries: dict[str, list[RunSummary]] = {pace: [] for pace in PACES}
    scrapes = dict.fromkeys(PACES, 0)
    same = dict.fromkeys(PACES, 0)
    total = 0
    for seed in seeds:
        requests = seed_requests(
            scenario, capacity_rps=capacity.requests_per_s, seed=seed, duration_scale=duration_scale
        )
        chosen: dict[str, str | None] = {}
        for pace in PACES:
            result = simulate(
                pods=pods,
                requests=requests,
                policy=build_policy(policy, policy_context(scenario, seed=seed)),
                seed=seed,
                scrape_interval_s=scrape_interval_s,
                base_model=model_name(scenario),
                idle_scrape_limit_s=limit if pace == "paced" else None,
            )
            scrapes[pace] += result.scrapes
            if pace == "fixed":
                chosen = {r.request_id: r.pod for r in result.records}
                total += len(chosen)
            same[pace] += sum(chosen.get(r.request_id) == r.pod for r in result.records)
            summaries[pace].append(summary_of(result, scenario))
    return [
        PacingRow(
            scenario=scenario_name,
            pace=pace,
            quality=Quality.over(runs),
            scrapes=scrapes[pace],
            same_pod=same[pace] / total if total else float("nan"),
        )
        for pace, runs in summaries.items()
    ]


def print_rows(rows: Sequence[PacingRow]) -> None:
    base = {(r.scenario): r for r in rows if r.pace == "fixed"}
    print(
        f"{'scenario':<30} {'pace':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'E2E p99':>9} {'goodput':>8} "
        f"{'p99 vs fixed':>12} {'same pod':>8} {'scrapes':>9} {'vs fixed':>8}"
    )
    for r in rows:
        b, q = base[r.scenario], r.quality
        print(
            f"{r.scenario:<30} {r.pace:>6} {q.ttft_p50_s:>8.3f}s {q.ttft_p99_s:>8.3f}s {q.e2e_p99_s:>8.2f}s "
            f"{q.goodput:>8.3f} {q.ttft_p99_s / b.quality.ttft_p99_s:>11.3f}× {r.same_pod:>8.3f} "
            f"{r.scrapes:>9} {r.scrapes / b.scrapes:>7.3f}×"
        )


def run(args: argparse.Namespace) -> int:
    print(
        f"policy {args.policy}, seeds {','.join(map(str, args.seeds))}, duration scale "
        f"{args.duration_scale:g}, scrape interval {args.scrape_interval * 1000:.0f} ms, stale threshold "
        f"{args.stale_threshold * 1000:.0f} ms; the same requests per seed, fixed vs paced scrapes"
    )
    check_duration_scale(args.scenarios, duration_scale=args.duration_scale)
    run_per_scenario(
        args.scenarios,
        lambda name: measure(
            name,
            policy=args.policy,
            seeds=args.seeds,
            duration_scale=args.duration_scale,
            scrape_interval_s=args.scrape_interval,
            stale_threshold_s=args.stale_threshold,
        ),
        print_rows,
    )
    return 0
