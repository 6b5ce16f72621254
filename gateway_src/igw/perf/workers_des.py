"""``igw perf workers-des``: routing quality with N independent in-flight ledgers (``--workers N``).

For each scenario and seed, the same request list is routed by the gateway's real scheduler run as
1, 2, 4, 8... workers (:class:`~igw.bench.policies.workers.WorkerSplitPolicy`: shared scrapes,
separate schedulers and in-flight counts, requests spread over the workers at random as the
kernel's ``SO_REUSEPORT`` hash does), without and with the mitigations that share, once per scrape
interval, each worker's in-flight counts (``inflight``), also its dispatches for the other
workers' dispatch ledgers (``dispatches``), or the pick notes of the plugins that share them
(``picks``: the prefix index's block hashes, through :mod:`igw.scheduling.pick_notes`, exactly as
``igw serve --workers`` exchanges them). Printed per scenario and N: TTFT p50/p99, E2E p99 and
goodput (mean over seeds), and the TTFT p99 ratio to one worker in the same run.
"""

from __future__ import annotations

import argparse
import random
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
    from igw.scheduling.types import RoutingPolicy

HELP = "Routing quality of --workers N in the DES: N schedulers with their own in-flight counts."
SCENARIOS: Final = ("mixed-fleet-8b", "shared-prefix-8b-high-cache")


@dataclass(frozen=True, slots=True)
class QualityRow:
    scenario: str
    workers: int
    share: str
    ttft_p50_s: float
    ttft_p99_s: float
    e2e_p99_s: float
    goodput: float


def measure(
    scenario_name: str,
    *,
    policy: str,
    workers: Sequence[int],
    seeds: Sequence[int],
    duration_scale: float,
    scrape_interval_s: float,
    shares: Sequence[str] = ("inflight", "dispatches", "picks"),
    note_interval_s: float | None = None,
) -> list[QualityRow]:
    """Every (N, mitigation) variant on the scenario's identical requests per seed; ``picks`` are
    exchanged every ``note_interval_s`` (default: what ``igw serve --workers`` does)."""
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.bench.capacity import fleet_capacity
    from igw.bench.policies.registry import build_policy
    from igw.bench.policies.workers import WorkerSplitPolicy
    from igw.bench.scenarios import SCENARIOS as ALL_SCENARIOS
    from igw.bench.workload import fleet_pods, model_name
    from igw.scheduling.pick_notes import note_interval
    from igw.sim.des import simulate

    notes_every = note_interval(scrape_interval_s) if note_interval_s is None else note_interval_s
    scenario = ALL_SCENARIOS[scenario_name]
    capacity = fleet_capacity(scenario)
    pods = fleet_pods(scenario)
    # "none" is always measured (it is the baseline of every ratio); naming it in ``shares`` is allowed.
    variants = [(n, "none") for n in workers] + [
        (n, share) for share in dict.fromkeys(shares) if share != "none" for n in workers if n > 1
    ]
    summaries: dict[tuple[int, str], list[RunSummary]] = {v: [] for v in variants}
    for seed in seeds:
        requests = seed_requests(
            scenario, capacity_rps=capacity.requests_per_s, seed=seed, duration_scale=duration_scale
        )
        for n, share in variants:

            def build(index: int, seed: int = seed) -> RoutingPolicy:
                return build_policy(policy, policy_context(scenario, seed=seed, index=index))

            split = WorkerSplitPolicy(
                build,
                workers=n,
                rng=random.Random(seed),
                share=share,
                report_interval_s=scrape_interval_s,
                note_interval_s=notes_every,
            )
            result = simulate(
                pods=pods,
                requests=requests,
                policy=split,
                seed=seed,
                scrape_interval_s=scrape_interval_s,
                base_model=model_name(scenario),
            )
            summaries[(n, share)].append(summary_of(result, scenario))
    rows = []
    for (n, share), runs in summaries.items():
        quality = Quality.over(runs)
        rows.append(
            QualityRow(
                scenario=scenario_name,
                workers=n,
                share=share,
                ttft_p50_s=quality.ttft_p50_s,
                ttft_p99_s=quality.ttft_p99_s,
                e2e_p99_s=quality.e2e_p99_s,
                goodput=quality.goodput,
            )
        )
    return rows


def print_rows(rows: Sequence[QualityRow]) -> None:
    base = {r.scenario: r.ttft_p99_s for r in rows if r.workers == 1}
    print(
        f"{'scenario':<30} {'workers':>7} {'shared':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'E2E p99':>9} {'goodput':>8} {'p99 vs 1':>8}"
    )
    for r in rows:
        print(
            f"{r.scenario:<30} {r.workers:>7} {r.share:>10} "
            f"{r.ttft_p50_s:>8.3f}s {r.ttft_p99_s:>8.3f}s {r.e2e_p99_s:>8.2f}s {r.goodput:>8.3f} "
            f"{r.ttft_p99_s / base[r.scenario]:>7.2f}×"
        )


def run(args: argparse.Namespace) -> int:
    # deferred: start-up cost: igw perf builds every benchmark's parser; the measured code loads only when run
    from igw.scheduling.pick_notes import note_interval

    print(
        f"policy {args.policy}, seeds {','.join(map(str, args.seeds))}, duration scale "
        f"{args.duration_scale:g}, scrape interval {args.scrape_interval * 1000:.0f} ms, pick notes every "
        f"{(args.note_interval or note_interval(args.scrape_interval)) * 1000:g} ms; "
        "requests spread over the workers at random (SO_REUSEPORT)"
    )
    check_duration_scale(args.scenarios, duration_scale=args.duration_scale)
    run_per_scenario(
        args.scenarios,
        lambda name: measure(
            name,
            policy=args.policy,
            workers=args.workers,
            seeds=args.seeds,
            duration_scale=args.duration_scale,
            scrape_interval_s=args.scrape_interval,
            shares=args.shares,
            note_interval_s=args.note_interval,
        ),
        print_rows,
    )
    return 0
