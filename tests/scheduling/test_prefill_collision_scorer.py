"""``prefill-collision-scorer``: own recent dispatches still being prefilled, worked off at the
endpoint's measured prompt rate; score = best finish / own finish of this request's prefill."""

from __future__ import annotations

import dataclasses
import random

import pytest

from igw.config.model import Weights
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, effective_weights, profile_from_weights
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.prefill_collision_scorer import TYPE, PrefillCollisionScorer, factory
from igw.scheduling.scheduler import Profile, Scheduler
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
    [
        ({"alpha": 2}, "p.alpha: must be <= 1.0, got 2"),
        ({"decay": 1}, "p: unknown field 'decay'"),
        ({"poolOneKind": "yes"}, "p.poolOneKind: must be true or false, got 'yes'"),
        ({"countAhead": 1}, "p.countAhead: must be true or false, got 1"),
    ],
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


# Routing round 8 (docs/benchmark.md): on one kind of hardware every candidate takes one rate.


@pytest.mark.parametrize(
    ("pool", "published", "pending_on_a", "expected", "why"),
    [
        (True, "same", False, [1.0, 1.0], "one kind: both idle pods finish alike, whatever was measured"),
        (True, None, False, [1.0, 0.5], "no verdict from the backlog scorer: each its own rate"),
        (True, "other", False, [1.0, 0.5], "a verdict on another candidate list is not this pick's"),
        (False, "same", False, [1.0, 0.5], "poolOneKind false: each its own rate, as before round 8"),
        # a's dispatch (1,000 tokens at t = 0), 2 ms later. Own rates: a 10 ms own + 8 ms left = 18 ms
        # against b's 20 ms, so the pod still prefilling won; one rate (0.75 x RATE, 13.3 ms each):
        # a 13.3 + 11.3 ms against b 13.3 ms.
        (True, "same", True, [(1000 / 75_000) / (2000 / 75_000 - 0.002), 1.0], "one kind: b"),
        (False, "same", True, [1.0, 0.018 / 0.020], "own rates: the pod still prefilling wins"),
    ],
)
def test_on_one_kind_of_hardware_every_candidate_takes_the_mean_rate(
    pool: bool, published: str | None, pending_on_a: bool, expected: list[float], why: str
) -> None:
    """Identical pods measure different ``prompt_tokens / ttft_s`` by chance (long prompts amortise
    TTFT's fixed part); read as speeds, they drew requests to the luckiest pod."""
    s = factory("c", {"poolOneKind": pool}, "p")
    s.on_complete(
        RequestOutcome(request_id="w", endpoint="a", ok=True, ttft_s=1000 / RATE, prompt_tokens=1000),
        now=0.0,
    )
    s.on_complete(
        RequestOutcome(request_id="w", endpoint="b", ok=True, ttft_s=2000 / RATE, prompt_tokens=1000),
        now=0.0,
    )
    if pending_on_a:
        s.on_picked(ctx(request(), now=0.0), ep("a"))
    endpoints = [ep("a"), ep("b")]
    c = ctx(request(), now=0.002)
    if published is not None:
        c.state[STATE_ONE_KIND] = endpoints if published == "same" else list(endpoints)
    assert s.score(c, endpoints) == pytest.approx(expected), why


def test_it_reads_the_one_kind_verdict_so_it_runs_after_the_backlog_scorer() -> None:
    assert (
        STATE_ONE_KIND in PrefillCollisionScorer().consumes
    )  # an instance's: a native class has no class value
    names = [ws.scorer.name for ws in profile_from_weights(DEFAULT_WEIGHTS).scorers]
    assert names.index("backlog-ttft-scorer") < names.index(TYPE)


def _lucky_pod_scheduler(seed: int, *, pool: bool) -> Scheduler:
    """The default profile, ``prefill-collision-scorer`` with ``poolOneKind`` as given; pods a and b
    both saw a first token after 20 ms, a for a 4,000-token prompt, b for a 400-token one."""
    default = profile_from_weights(DEFAULT_WEIGHTS)
    scorers = tuple(
        dataclasses.replace(ws, scorer=factory(TYPE, {"poolOneKind": pool}, "p"))
        if ws.scorer.name == TYPE
        else ws
        for ws in default.scorers
    )
    s = Scheduler(
        name="s",
        profile=Profile(filters=default.filters, scorers=scorers, picker=default.picker),
        settings=RoutingSettings(stale_threshold_s=1.0),
        rng=random.Random(seed),
    )
    for key, tokens in (("a", 4000), ("b", 400)):
        s.on_complete(
            RequestOutcome(request_id="w", endpoint=key, ok=True, ttft_s=0.02, prompt_tokens=tokens), now=0.0
        )
    return s


@pytest.mark.parametrize(
    ("gpus", "pool", "picked", "why"),
    [
        (("h100", "h100"), True, {"a", "b"}, "one kind: the luck of a's rate decides nothing"),
        (("h100", "h100"), False, {"a"}, "own rates: every request to the pod that served long prompts"),
        (("h100", "a10g"), True, {"a"}, "labelled as two kinds of GPU: each keeps its own rate"),
    ],
)
def test_identical_idle_pods_share_the_picks_whatever_their_measured_rates(
    gpus: tuple[str, str], pool: bool, picked: set[str], why: str
) -> None:
    seen = set()
    for seed in range(12):
        s = _lucky_pod_scheduler(seed, pool=pool)
        pods = [
            ep(key, scraped_at=0.0, block_size=16, num_gpu_blocks=20_000, labels={"gpu": gpu})
            for key, gpu in zip(("a", "b"), gpus, strict=True)
        ]
        decision = s.pick(request(request_id="r1"), pods, now=0.001)
        seen.add(decision.endpoint)
    assert seen == picked, why


# Routing round 9 (docs/benchmark.md): a rate sample counts the prompt work still ahead at dispatch.


@pytest.mark.parametrize(
    ("count_ahead", "first_on", "second_at", "expected_rate", "why"),
    [
        # a's first dispatch (1,000 tokens at RATE: 10 ms) is 8 ms from done when the second is sent;
        # the second's first token comes 18 ms later: 800 + 1,000 tokens in 18 ms is RATE again.
        (True, "a", 0.002, RATE, "the 800 tokens still ahead were prefilled in that TTFT too"),
        (False, "a", 0.002, 0.8 * RATE + 0.2 * (1000 / 0.018), "countAhead false: 1,000 tokens / 18 ms"),
        (True, "b", 0.002, 0.8 * RATE + 0.2 * (1000 / 0.018), "work ahead on another endpoint is not a's"),
        (True, "a", 0.011, 0.8 * RATE + 0.2 * (1000 / 0.018), "the first dispatch already worked off"),
    ],
)
def test_a_rate_sample_counts_the_prompt_work_still_ahead_at_dispatch(
    count_ahead: bool, first_on: str, second_at: float, expected_rate: float, why: str
) -> None:
    """``prompt_tokens / ttft_s`` of a short prompt queued behind a long one measured the queue, not
    the pod: on random-1-13 one H200 learnt a third of its peers' rate from such samples and drew almost no
    request for the rest of the run while its peers' decodes slowed under the prompts it did not take."""
    s = factory("c", {"countAhead": count_ahead}, "p")
    s.on_complete(
        RequestOutcome(request_id="w", endpoint="a", ok=True, ttft_s=1000 / RATE, prompt_tokens=1000),
        now=0.0,
    )
    s.on_picked(ctx(request(request_id="r1"), now=0.0), ep(first_on))
    s.on_picked(ctx(request(request_id="r2"), now=second_at), ep("a"))
    s.on_complete(
        RequestOutcome(request_id="r2", endpoint="a", ok=True, ttft_s=0.018, prompt_tokens=1000),
        now=second_at + 0.018,
    )
    assert s.rate_of("a") == pytest.approx(expected_rate), why
    assert "r2" not in s.ahead  # forgotten once its outcome arrived


def test_count_ahead_is_off_by_default_and_then_nothing_is_remembered() -> None:
    """Off by default (routing round 9: it won random-1-13's goodput and lost two draws' TTFT tails)."""
    s = factory("c", {}, "p")
    assert s.count_ahead is False
    s.on_picked(ctx(request(request_id="r1"), now=0.0), ep("a"))
    assert not s.ahead


def test_before_any_measured_rate_nothing_is_counted_ahead() -> None:
    s = PrefillCollisionScorer(count_ahead=True)
    s.on_picked(ctx(request(request_id="r1"), now=0.0), ep("a"))
    assert s.tokens_ahead("a", now=0.0) == 0.0
    s.on_picked(ctx(request(request_id="r2"), now=0.0), ep("a"))
    s.on_complete(
        RequestOutcome(request_id="r2", endpoint="a", ok=True, ttft_s=0.02, prompt_tokens=1000), now=0.02
    )
    assert s.rate_of("a") == pytest.approx(1000 / 0.02)


def test_picks_given_back_at_every_poll_add_no_prefill_work() -> None:
    """The flow-control pump picks a queued request's pod at every poll and gives the pick back while
    that pod has no place. Until session s41 each poll's pick stayed in the pod's recent dispatches
    (10 entries after 10 polls): the pod scored as prefilling ten prompts it never received."""
    s = measured({"a": RATE, "b": RATE})
    for poll in range(10):
        s.on_picked(ctx(request(request_id="q"), now=0.0001 * poll), ep("a"))
        assert s.on_not_sent("q", "a", sent_to=None)
    assert "a" not in s.recent
    assert s.score(ctx(request(), now=0.002), [ep("a"), ep("b")]) == [1.0, 1.0]


def test_a_pick_steered_elsewhere_is_prefilling_on_the_pod_it_went_to() -> None:
    s = measured({"a": RATE, "b": RATE})
    s.on_picked(ctx(request(request_id="q"), now=0.0), ep("a"))
    assert s.on_not_sent("q", "a", sent_to=ep("b"))
    assert s.score(ctx(request(), now=0.002), [ep("a"), ep("b")]) == pytest.approx([1.0, 10 / 18])
    assert not s.on_not_sent("q", "b", sent_to=None)  # only the latest pick is taken back


def test_only_the_latest_pick_is_taken_back() -> None:
    """A pick other picks followed (a connection that failed later) stays: it is worked off within
    its prefill time, and which entry is its own is no longer known."""
    s = measured({"a": RATE, "b": RATE})
    s.on_picked(ctx(request(request_id="first"), now=0.0), ep("a"))
    s.on_picked(ctx(request(request_id="second"), now=0.0), ep("b"))
    assert not s.on_not_sent("first", "a", sent_to=None)
    assert len(s.recent["a"]) == 1


class _CountedTokens(int):
    """A prompt token count that counts the divisions it is the dividend of."""

    divisions = 0

    def __truediv__(self, other: object) -> float:
        type(self).divisions += 1
        return int(self) / other  # type: ignore[operator]


def test_one_kind_candidates_divide_the_prompt_by_the_shared_rate_once() -> None:
    """Pooled candidates share one rate, so the request's own prefill time is one division, not one
    per candidate (the scorer runs on every pick), and the scores are those of the per-candidate
    path with every rate equal to that mean."""
    keys = [f"p{i}" for i in range(16)]
    pooled, own = (factory("c", {"poolOneKind": flag}, "p") for flag in (True, False))
    for s in (pooled, own):
        for key in keys:  # every pod measures the same rate: the mean is each pod's own rate
            s.on_complete(
                RequestOutcome(request_id="w", endpoint=key, ok=True, ttft_s=0.01, prompt_tokens=1000),
                now=0.0,
            )
        for i, key in enumerate(keys[:5]):
            s.on_picked(ctx(request(300 * (i + 1), f"d{i}"), now=0.001 * i), ep(key))
    endpoints = [ep(k) for k in keys]
    c = ctx(request(), now=0.006)
    c.state[STATE_ONE_KIND] = endpoints
    tokens = _CountedTokens(1000)
    c.request = dataclasses.replace(c.request, prompt_tokens=tokens)
    _CountedTokens.divisions = 0
    scores = pooled.score(c, endpoints)
    assert _CountedTokens.divisions == 1
    expected = own.score(ctx(dataclasses.replace(c.request, prompt_tokens=1000), now=0.006), endpoints)
    assert scores == expected
    assert len(set(scores)) > 1  # the pending work told the candidates apart
