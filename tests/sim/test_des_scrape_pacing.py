"""The DES paces scrapes as the gateway does: idle pods less often, never older than the bound, and
scraped again at the first tick after a dispatch (what ``igw perf scrape-des`` compares)."""

from __future__ import annotations

import random

import pytest

from igw.gateway.scrape_pacing import idle_gap_limit
from igw.sim.des import simulate
from igw.sim.request import SimRequest
from igw.sim.spec import PodSpec
from igw.sim.workloads import SHAREGPT_INPUT, SHAREGPT_OUTPUT, poisson_arrivals, synthetic, take
from tests.sim.support import RoundRobin

INTERVAL = 0.05
STALE = 1.0
PODS = [PodSpec(preset="llama-3.1-8b/h100", name=f"h{i}") for i in range(4)]


def _sparse(n: int, *, rate: float, seed: int = 3) -> list[SimRequest]:
    """Requests far enough apart that pods sit idle between them."""
    rng = random.Random(seed)
    arrivals = poisson_arrivals(rate=rate, rng=rng)
    return take(
        synthetic(
            count=n,
            arrivals=arrivals,
            prompt_lengths=SHAREGPT_INPUT,
            output_lengths=SHAREGPT_OUTPUT,
            model="m",
            rng=rng,
        ),
        n,
    )


def _run(limit: float | None, requests: list[SimRequest]) -> tuple[RoundRobin, int]:
    policy = RoundRobin()
    result = simulate(
        pods=PODS,
        requests=requests,
        policy=policy,
        seed=1,
        scrape_interval_s=INTERVAL,
        idle_scrape_limit_s=limit,
    )
    assert all(r.ok for r in result.records)
    return policy, result.scrapes


def test_paced_scrapes_are_fewer_and_never_older_than_the_bound() -> None:
    requests = _sparse(120, rate=0.4)
    limit = idle_gap_limit(INTERVAL, STALE)
    fixed, fixed_scrapes = _run(None, requests)
    paced, paced_scrapes = _run(limit, requests)
    assert paced_scrapes < fixed_scrapes / 3  # mostly idle pods: far fewer scrapes
    ages = [now - v.scraped_at for now, views in paced.seen for v in views if v.scraped_at is not None]
    assert len(ages) == 4 * len(requests)  # every pod had been scraped at every decision
    assert max(ages) <= limit + INTERVAL  # a scrape at most one idle gap (plus one tick) ago
    assert max(ages) < STALE  # so never stale
    assert max(ages) > 4 * INTERVAL  # (it did slow down)
    fixed_ages = [now - v.scraped_at for now, views in fixed.seen for v in views if v.scraped_at is not None]
    assert max(fixed_ages) <= INTERVAL + 1e-9


def test_a_dispatched_pod_is_scraped_at_the_next_tick() -> None:
    requests = _sparse(120, rate=0.4)
    paced, _ = _run(idle_gap_limit(INTERVAL, STALE), requests)
    last_dispatch: dict[str, float] = {}
    checked = 0
    for i, (now, views) in enumerate(paced.seen):
        for v in views:
            sent = last_dispatch.get(v.key)
            if sent is not None and now >= sent + INTERVAL:
                assert v.scraped_at is not None
                assert v.scraped_at >= sent  # the first tick after the dispatch was taken
                checked += 1
        last_dispatch[views[i % len(views)].key] = now  # RoundRobin's pick
    assert checked > 100


@pytest.mark.parametrize("rate", [0.4, 30.0])
def test_the_metrics_seen_match_every_interval_scraping_when_nothing_else_changes_the_pod(
    rate: float,
) -> None:
    """An idle pod's metrics do not move, so what each decision sees differs only in scrape age."""
    requests = _sparse(150, rate=rate)
    fixed, _ = _run(None, requests)
    paced, _ = _run(idle_gap_limit(INTERVAL, STALE), requests)
    assert [[v.metrics for v in views] for _, views in fixed.seen] == [
        [v.metrics for v in views] for _, views in paced.seen
    ]
