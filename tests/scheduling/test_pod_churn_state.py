"""Pod churn leaves nothing behind in a scheduler: an endpoint removed from its pool is held by none
of the scheduler's structures, whether it served requests or not.

Until session s40 the change sets of the EWMAs that ``predicted-ttft-scorer`` and
``prefill-collision-scorer`` keep grew with every address a pool ever had: forgetting an endpoint
added it to the set, which only a scored pick empties, and many pools go long without one
(``prefill-collision-scorer`` on one kind of hardware scores with the pool's mean and never reads
it; every pick while all endpoints are stale, or of a pool of one, skips the scorers).
"""

from __future__ import annotations

import random

import pytest

from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.factory import DEFAULT_WEIGHTS, scheduler_from_weights
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.predicted_ttft_scorer import PredictedTtftScorer
from igw.scheduling.plugins.prefill_collision_scorer import PrefillCollisionScorer
from igw.scheduling.types import EndpointView, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx, ep, req
from tests.state_walk import paths_holding

PROMPT = "You are a helpful assistant. Answer briefly. " * 40


def test_forgotten_endpoints_leave_the_change_set() -> None:
    """Whether measured or not: the set names only endpoints the EWMA has a state for, however long
    its owner goes without reading it."""
    ewma = EndpointEwma(alpha=0.2, track_changes=True)
    ewma.observe("a", 1.0)
    ewma.observe("b", 1.0)
    ewma.forget([f"10.0.0.{i}:8000" for i in range(1000)] + ["a"])
    assert ewma.changed == {"b"}


def _outcome(request_id: str, key: str, rate: float) -> RequestOutcome:
    return RequestOutcome(
        request_id=request_id, endpoint=key, ok=True, ttft_s=1000 / rate, prompt_tokens=1000
    )


def _request(request_id: str) -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id, model="m", base_model="m", prefix_text="", prompt_tokens=1000
    )


def test_pooled_scoring_keeps_no_rate_changes_of_departed_endpoints() -> None:
    """On one kind of hardware every candidate takes the pool's mean rate: the per-endpoint column
    goes unread, and its change set no longer collects every endpoint ever measured."""
    s = PrefillCollisionScorer()
    for gen in range(200):
        pods = [ep(f"10.0.{gen}.1:8000"), ep(f"10.0.{gen}.2:8000")]
        for i, pod in enumerate(pods):
            s.on_complete(_outcome(f"{gen}-{i}", pod.key, 100_000.0 + i), now=float(gen))
        c = ctx(_request(f"{gen}"), now=float(gen))
        c.state[STATE_ONE_KIND] = pods
        s.score(c, pods)
        s.on_endpoints_removed([p.key for p in pods])
    assert s.rate.changed is not None
    assert len(s.rate.changed) <= 2


@pytest.mark.parametrize("pooled", [False, True])
def test_an_endpoint_that_left_and_came_back_between_two_picks_is_scored_afresh(pooled: bool) -> None:
    """Its rate was forgotten: the next pick (same candidates as the last) reads it as unmeasured,
    as a scorer that never kept a column between picks does."""
    pods = [ep("a"), ep("b"), ep("c")]
    kept, fresh = PrefillCollisionScorer(), PrefillCollisionScorer()
    for s in (kept, fresh):
        s.on_complete(_outcome("w1", "a", 50_000.0), now=0.0)
        s.on_complete(_outcome("w2", "b", 100_000.0), now=0.0)
        s.on_complete(_outcome("w3", "c", 25_000.0), now=0.0)
    kept.score(ctx(_request("x"), now=0.001), pods)  # the column kept for these candidates
    for s in (kept, fresh):
        s.on_endpoints_removed(["a"])
        s.on_picked(ctx(_request("p"), now=0.001), ep("b"))
    c = ctx(_request("y"), now=0.002)
    if pooled:
        c.state[STATE_ONE_KIND] = pods
    assert kept.score(c, pods) == fresh.score(c, pods)


def test_predicted_ttft_of_an_endpoint_that_left_and_came_back_between_two_picks_is_afresh() -> None:
    pods = [ep("a"), ep("b"), ep("c")]
    kept, fresh = PredictedTtftScorer(), PredictedTtftScorer()
    for s in (kept, fresh):
        for n in range(12):  # settled means (a full window), so the pooling groups them
            for key, ttft in (("a", 0.5), ("b", 0.1), ("c", 0.2)):
                s.on_complete(_outcome(f"{key}{n}", key, 1000 / ttft), now=0.0)
    kept.score(ctx(_request("x"), now=0.001), pods)  # the sorted means kept for these candidates
    for s in (kept, fresh):
        s.on_endpoints_removed(["a"])
    assert kept.score(ctx(_request("y"), now=0.002), pods) == fresh.score(ctx(_request("y"), now=0.002), pods)


@pytest.mark.parametrize("scraped", [True, False], ids=["scored", "scrapes-failing"])
def test_the_default_scheduler_holds_no_departed_endpoint(scraped: bool) -> None:
    """Generations of pods on one kind of hardware (as a Deployment's rollouts replace them), each
    served and then removed, and pods removed without ever serving: once the pods that stay have
    served a few requests (the caches of the last pick's candidates are theirs), none of the
    departed is held anywhere. ``scrapes-failing``: every pick ranks by
    in-flight counts, no scorer runs (nothing read the change sets)."""
    s = scheduler_from_weights(DEFAULT_WEIGHTS, rng=random.Random(1))
    now = 0.0

    def pods(prefix: str) -> list[EndpointView]:
        return [ep(f"{prefix}.{i}:8000", scraped_at=now, failing=not scraped) for i in range(3)]

    def serve(pool: list[EndpointView], rid: str) -> None:
        decision = s.pick(req(PROMPT + rid, request_id=rid), pool, now=now)
        assert decision.endpoint is not None
        s.on_complete(
            RequestOutcome(
                request_id=rid,
                endpoint=decision.endpoint,
                ok=True,
                ttft_s=0.05,
                itl_s=0.01,
                prompt_tokens=len(PROMPT) // 4,
                output_tokens=20,
            ),
            now=now + 0.05,
        )

    departed: list[str] = []
    for gen in range(12):
        pool = pods(f"10.0.{gen}")
        for r in range(12):
            serve(pods(f"10.0.{gen}"), f"{gen}-{r}")
            now += 0.1
        idle = [f"10.1.{gen}.{i}:8000" for i in range(3)]
        s.on_endpoints_removed([p.key for p in pool] + idle)
        departed += [p.key for p in pool] + idle
    for r in range(4):  # the pods that stay, measured and scored (the picks' kept candidate lists)
        serve(pods("10.2.0"), f"last-{r}")
        now += 0.1
    held = {key: paths_holding(s, key) for key in departed}
    assert {key: paths for key, paths in held.items() if paths} == {}
