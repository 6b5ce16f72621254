"""``prefill-collision-scorer``: own recent dispatches still being prefilled, worked off at the
endpoint's measured prompt rate; score = best finish / own finish of this request's prefill."""

from __future__ import annotations

import random

import pytest

from igw.config.model import Weights
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, effective_weights, profile_from_weights
from igw.scheduling.plugins.prefill_collision_scorer import TYPE, PrefillCollisionScorer, factory
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx, ep

RATE = 100_000.0
"""Prompt tokens per second used by most tests: a 1,000-token prompt takes 10 ms."""


def request(tokens: int = 1000, request_id: str = "r") -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id, model="m", base_model="m", prefix_text="", prompt_tokens=tokens
    )


def measured(rates: dict[str, float]) -> PrefillCollisionScorer:
    s = PrefillCollisionScorer()
    for key, rate in rates.items():
        s.on_complete(
            RequestOutcome(request_id="w", endpoint=key, ok=True, ttft_s=1000 / rate, prompt_tokens=1000),
            now=0.0,
        )
    return s


def test_without_any_measured_rate_every_endpoint_scores_one() -> None:
    s = PrefillCollisionScorer()
    s.on_picked(ctx(request(), now=0.0), ep("a"))
    assert s.score(ctx(request(), now=0.001), [ep("a"), ep("b")]) == [1.0, 1.0]


def test_recent_dispatch_lowers_score_until_worked_off() -> None:
    s = measured({"a": RATE, "b": RATE})
    s.on_picked(ctx(request(), now=0.0), ep("a"))
    # At 2 ms, 8 ms of the 10 ms prefill is left on a: own 10 ms / (10 + 8) ms.
    assert s.score(ctx(request(), now=0.002), [ep("a"), ep("b")]) == pytest.approx([10 / 18, 1.0])
    assert s.score(ctx(request(), now=0.0101), [ep("a"), ep("b")]) == [1.0, 1.0]
    assert "a" not in s.recent  # worked-off dispatches are dropped


def test_dispatches_are_prefilled_together_not_one_after_another() -> None:
    s = measured({"a": RATE})
    s.on_picked(ctx(request(), now=0.0), ep("a"))
    s.on_picked(ctx(request(), now=0.0), ep("a"))
    # Parallel: 5 + 5 ms left at 5 ms (a serial queue would say 15 ms).
    assert s.pending_s(ep("a"), now=0.005) == pytest.approx(0.010)


def test_dispatch_a_scrape_shows_queued_no_longer_counts() -> None:
    """Queued behind waiting requests it is not prefilling (and the queue scorers see it)."""
    s = measured({"a": RATE})
    s.on_picked(ctx(request(), now=0.0), ep("a"))
    s.on_picked(ctx(request(), now=0.003), ep("a"))
    scraped = ep("a", waiting=3, scraped_at=0.001)  # shows the first dispatch, not the second
    assert s.pending_s(scraped, now=0.004) == pytest.approx(0.009)
    assert s.pending_s(ep("a", waiting=0, scraped_at=0.001), now=0.004) == pytest.approx(0.006 + 0.009)


def test_idle_slow_pod_does_not_beat_fast_pod_with_a_little_pending_work() -> None:
    s = measured({"h100": RATE, "a10g": RATE / 10})
    s.on_picked(ctx(request(), now=0.0), ep("h100"))
    h100, a10g = s.score(ctx(request(), now=0.002), [ep("h100"), ep("a10g")])
    assert h100 == 1.0  # finishes at 8 + 10 ms, the A10G only after its own 100 ms
    assert a10g == pytest.approx(0.018 / 0.100)


def test_unmeasured_endpoint_takes_the_mean_rate() -> None:
    s = measured({"a": RATE, "b": RATE / 2})
    assert s.rate_of("new") == pytest.approx(0.75 * RATE)


def test_failed_or_tokenless_outcomes_teach_nothing_and_removal_forgets() -> None:
    s = PrefillCollisionScorer()
    s.on_complete(RequestOutcome(request_id="x", endpoint="a", ok=False, ttft_s=0.01, prompt_tokens=9), now=0)
    s.on_complete(RequestOutcome(request_id="x", endpoint="a", ok=True, ttft_s=0.01, prompt_tokens=0), now=0)
    s.on_complete(RequestOutcome(request_id="x", endpoint="a", ok=True, ttft_s=None, prompt_tokens=9), now=0)
    assert s.rate_of("a") is None
    s = measured({"a": RATE})
    s.on_picked(ctx(request(), now=0.0), ep("a"))
    s.on_endpoints_removed(["a"])
    assert s.rate_of("a") is None
    assert "a" not in s.recent


@pytest.mark.parametrize(
    ("params", "problem"),
    [({"alpha": 2}, "p.alpha: must be <= 1.0, got 2"), ({"decay": 1}, "p: unknown field 'decay'")],
)
def test_factory_rejects_bad_parameters(params: dict[str, object], problem: str) -> None:
    with pytest.raises(SchedulerConfigError) as err:
        factory("n", params, "p")
    assert problem in err.value.problems


def test_default_weights_include_it_and_predicted_latency_zero_switches_it_off() -> None:
    assert DEFAULT_WEIGHTS[TYPE] > 0
    assert effective_weights(None, lora_adapters=False)[TYPE] == DEFAULT_WEIGHTS[TYPE]
    assert TYPE not in effective_weights(Weights(predicted_latency=0), lora_adapters=False)


@pytest.mark.parametrize("seed", range(12))
def test_default_scheduler_avoids_the_pod_still_prefilling_its_last_request(seed: int) -> None:
    """The scrape after a dispatch no longer shows it as waiting (it is being prefilled) and the
    dispatch ledger has dropped it; identical pods would then be a coin toss without this scorer."""
    s = Scheduler(
        name="s",
        profile=profile_from_weights(DEFAULT_WEIGHTS),
        settings=RoutingSettings(stale_threshold_s=1.0),
        rng=random.Random(seed),
    )
    for key in ("a", "b"):
        s.on_complete(
            RequestOutcome(request_id="w", endpoint=key, ok=True, ttft_s=0.01, prompt_tokens=1000), now=0.0
        )
    first = s.pick(request(request_id="r1"), [ep("a", scraped_at=0.0), ep("b", scraped_at=0.0)], now=0.001)
    assert first.endpoint is not None
    fresh = [ep("a", scraped_at=0.002), ep("b", scraped_at=0.002)]  # identical after the dispatch
    second = s.pick(request(request_id="r2"), fresh, now=0.003)
    assert second.endpoint != first.endpoint
