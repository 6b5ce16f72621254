"""Picks between two scrapes: the default scheduler spreads them (own dispatches are accounted for),
and keeps preferring fast endpoints on a mixed fleet. Without the dispatch ledger it herds."""

from __future__ import annotations

import random

import pytest

from igw.scheduling.factory import DEFAULT_WEIGHTS, profile_from_weights
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import RequestOutcome
from tests.scheduling.helpers import ep, req

WITHOUT_BACKLOG = {k: v for k, v in DEFAULT_WEIGHTS.items() if k != "backlog-ttft-scorer"}
"""The defaults before ``backlog-ttft-scorer``, which counts its own dispatches as well."""


def scheduler(*, compensate: bool, weights: dict[str, float] | None = None) -> Scheduler:
    return Scheduler(
        name="s",
        profile=profile_from_weights(DEFAULT_WEIGHTS if weights is None else weights),
        settings=RoutingSettings(stale_threshold_s=1.0),
        rng=random.Random(3),
        compensate_dispatches=compensate,
    )


@pytest.mark.parametrize(
    ("compensate", "weights", "distinct_pods"),
    [
        pytest.param(True, None, 8, id="ledger-spreads-8-picks-over-8-pods"),
        pytest.param(False, None, 8, id="without-ledger-backlog-ttft-still-spreads-them"),
        pytest.param(True, WITHOUT_BACKLOG, 8, id="ledger-alone-spreads-them"),
        pytest.param(False, WITHOUT_BACKLOG, 1, id="neither-all-8-herd-onto-the-emptiest-kv"),
    ],
)
def test_picks_within_one_scrape_interval(
    compensate: bool, weights: dict[str, float] | None, distinct_pods: int
) -> None:
    s = scheduler(compensate=compensate, weights=weights)
    # One snapshot taken at t=0; e0's KV looks emptiest, everything else is identical.
    pods = [ep(f"e{i}", waiting=0, kv=0.30 + 0.01 * i, scraped_at=0.0) for i in range(8)]
    picks = [s.pick(req(f"question {i}", request_id=f"r{i}"), pods, now=0.001 * (i + 1)) for i in range(8)]
    assert len({d.endpoint for d in picks}) == distinct_pods


@pytest.mark.parametrize(
    ("dispatches_per_fast_pod", "expected_pool"),
    [
        pytest.param(0, "fast", id="idle-fleet-fast-pod"),
        pytest.param(2, "fast", id="fast-pods-slightly-busy-still-beat-10x-slower"),
        pytest.param(12, "slow", id="fast-pods-deeply-queued-slow-pod-takes-the-overflow"),
    ],
)
def test_mixed_fleet_is_speed_aware(dispatches_per_fast_pod: int, expected_pool: str) -> None:
    s = scheduler(compensate=True)
    fast = [f"fast{i}" for i in range(2)]
    for key, ttft in [("fast0", 0.03), ("fast1", 0.03), ("slow0", 0.3)]:
        s.on_complete(
            RequestOutcome(request_id="x", endpoint=key, ok=True, ttft_s=ttft, itl_s=0.01, output_tokens=9),
            now=0.0,
        )
    pods = [ep(k, waiting=0, kv=0.2, scraped_at=0.0) for k in [*fast, "slow0"]]
    # Dispatches recorded by earlier picks within this scrape interval (and within the fast TTFT).
    assert s.ledger is not None
    for key in fast:
        for _ in range(dispatches_per_fast_pod):
            s.ledger.record(key, now=0.001)
    d = s.pick(req("q"), pods, now=0.002)
    assert d.endpoint is not None
    assert d.endpoint.startswith(expected_pool)
