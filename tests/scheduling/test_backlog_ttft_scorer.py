"""``backlog-ttft-scorer``: predicted TTFT = intercept + seconds per token x (own backlog + prompt),
fitted per endpoint from completed requests; score = best predicted / own predicted."""

from __future__ import annotations

import dataclasses
import functools
import random

import pytest

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, profile_from_weights, scheduler_from_weights
from igw.scheduling.plugins.backlog_ttft_scorer import (
    MIN_FIT_SAMPLES,
    PRIOR_TOKENS_PER_S_PER_KV_TOKEN,
    SPEED_SAMPLES,
    STATE_ONE_KIND,
    STATE_PREDICTED,
    TYPE,
    BacklogTtftScorer,
    LinearFit,
    Predictions,
    capacities_updated,
    factory,
    kv_capacities,
    slot_price,
)
from igw.scheduling.plugins.predicted_ttft_scorer import STATE_SCORES, PredictedTtftScorer, PublishedScores
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointView, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx, ep

H100 = (0.010, 25e-6)
"""(intercept s, seconds per prompt token) of a fast endpoint in these tests."""
A10G = (0.040, 300e-6)
LATER = 100_000.0
"""A time after every dispatch ``teach`` makes has drained."""


def request(tokens: int = 1000, request_id: str = "r") -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id, model="m", base_model="m", prefix_text="", prompt_tokens=tokens
    )


def teach(s: BacklogTtftScorer, key: str, model: tuple[float, float], *, samples: int = 20) -> None:
    """Dispatch and complete ``samples`` requests of varied length on an idle ``key``."""
    intercept, slope = model
    for i in range(samples):
        tokens = 100 + 97 * (i % 11)
        rid = f"{key}-{i}"
        s.on_picked(ctx(request(tokens, rid), now=1000.0 * (i + 1)), ep(key))
        s.on_complete(
            RequestOutcome(
                request_id=rid, endpoint=key, ok=True, ttft_s=intercept + slope * tokens, prompt_tokens=tokens
            ),
            now=1000.0 * (i + 1) + 1,
        )


def test_linear_fit_recovers_intercept_and_slope() -> None:
    fit = LinearFit()
    for x in range(100, 2000, 50):
        fit.observe(float(x), 0.02 + 1e-4 * x, alpha=0.1)
    intercept, slope = fit.regression(min_samples=MIN_FIT_SAMPLES) or (0.0, 0.0)
    assert intercept == pytest.approx(0.02, rel=1e-6)
    assert slope == pytest.approx(1e-4, rel=1e-6)


@pytest.mark.parametrize(
    ("xs", "why"),
    [
        ([500.0] * 20, "every sample at the same x: no spread to fit a slope on"),
        ([100.0, 200.0], "fewer samples than MIN_FIT_SAMPLES"),
    ],
)
def test_linear_fit_declines_without_evidence(xs: list[float], why: str) -> None:
    fit = LinearFit()
    for x in xs:
        fit.observe(x, 0.01 + 1e-4 * x, alpha=0.1)
    assert fit.regression(min_samples=MIN_FIT_SAMPLES) is None, why


def test_linear_fit_declines_a_negative_slope() -> None:
    fit = LinearFit()
    for x in range(100, 1000, 50):
        fit.observe(float(x), 1.0 - 1e-4 * x, alpha=0.1)
    assert fit.regression(min_samples=MIN_FIT_SAMPLES) is None


def test_before_any_outcome_tokens_ahead_per_kv_token_decide() -> None:
    """An endpoint with a tenth of the KV cache counts as a tenth of the speed."""
    s = BacklogTtftScorer()
    big = ep("big", block_size=16, num_gpu_blocks=20_000)
    small = ep("small", block_size=16, num_gpu_blocks=2_000)
    assert s.score(ctx(request(1000), now=0.0), [big, small]) == pytest.approx([1.0, 0.1])
    s.on_picked(ctx(request(1000), now=0.0), big)  # big now has 1,000 tokens ahead
    assert s.score(ctx(request(1000), now=0.0), [big, small]) == pytest.approx([1.0, 0.2])


def test_before_any_outcome_unscraped_endpoints_take_the_mean_capacity() -> None:
    s = BacklogTtftScorer()
    scraped = ep("a", block_size=16, num_gpu_blocks=1_000)
    assert s.score(ctx(request(), now=0.0), [scraped, ep("b", no_metrics=True)]) == [1.0, 1.0]


def test_prediction_is_intercept_plus_slope_times_backlog_and_prompt() -> None:
    s = BacklogTtftScorer()
    teach(s, "a", H100)
    [p] = s.predicted([ep("a")], tokens=2000, now=LATER)
    assert p == pytest.approx(0.010 + 25e-6 * 2000, rel=1e-3)


@pytest.mark.parametrize(
    ("queued", "why"),
    [
        (200, "below the mean tokens ahead: a dispatch occupies the endpoint for about its own TTFT"),
        (4000, "above it: the engine prefills the queued prompts together and pays the step cost once"),
    ],
)
def test_backlog_drains_at_the_slope_plus_the_intercept_spread_over_the_queue(queued: int, why: str) -> None:
    s = BacklogTtftScorer(pending_floor=0.0)  # the drain alone (the dispatch stays pending)
    teach(s, "a", H100)
    mean_x = s.fits["a"].mean_x
    assert 200 < mean_x < 4000
    t0 = 100_000.0
    s.on_picked(ctx(request(queued, "big"), now=t0), ep("a"))
    per_token = 25e-6 + 0.010 / max(mean_x, queued)
    elapsed = 0.2 * queued * per_token
    left = queued - elapsed / per_token
    assert s.predicted([ep("a")], tokens=1000, now=t0 + elapsed)[0] == pytest.approx(
        0.010 + 25e-6 * (left + 1000), rel=1e-3
    ), why
    drained = t0 + queued * per_token + 1e-6
    assert s.predicted([ep("a")], tokens=1000, now=drained)[0] == pytest.approx(0.010 + 0.025, rel=1e-3)


def test_identical_endpoints_share_one_model() -> None:
    """Slopes within poolRatio of each other are pooled: chance differences are not speeds."""
    s = BacklogTtftScorer()
    teach(s, "a", (0.010, 20e-6))
    teach(s, "b", (0.010, 28e-6))
    teach(s, "slow", A10G)
    a, b, slow = s.predicted([ep("a"), ep("b"), ep("slow")], tokens=1000, now=LATER)
    assert a == pytest.approx(b)
    assert a == pytest.approx(0.010 + 24e-6 * 1000, rel=1e-3)
    assert slow == pytest.approx(0.040 + 300e-6 * 1000, rel=1e-3)
    separate = BacklogTtftScorer(pool_ratio=1.2)
    teach(separate, "a", (0.010, 20e-6))
    teach(separate, "b", (0.010, 28e-6))
    a, b = separate.predicted([ep("a"), ep("b")], tokens=1000, now=LATER)
    assert b > a


@pytest.mark.parametrize(
    ("h100_backlog", "prompt", "winner"),
    [
        (0, 100, "h100"),
        (0, 4000, "h100"),
        (2_000, 100, "h100"),  # 62.5 ms behind 50 ms of backlog vs 70 ms alone on the A10G
        (4_000, 100, "a10g"),  # 112.5 ms vs 70 ms
        (4_000, 4000, "h100"),  # a long prompt is cheaper queued on the H100 (0.21 s) than alone (1.24 s)
    ],
)
def test_mixed_fleet_picks_follow_predicted_ttft(h100_backlog: int, prompt: int, winner: str) -> None:
    s = BacklogTtftScorer(speed_preference=0.0)
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    now = 100_000.0
    if h100_backlog:
        s.on_picked(ctx(request(h100_backlog, "backlog"), now=now), ep("h100"))
    endpoints = [ep("h100"), ep("a10g")]
    predicted = dict(zip(("h100", "a10g"), s.predicted(endpoints, tokens=prompt, now=now), strict=True))
    scores = dict(zip(("h100", "a10g"), s.score(ctx(request(prompt), now=now), endpoints), strict=True))
    assert scores[winner] == 1.0, predicted
    loser = "a10g" if winner == "h100" else "h100"
    assert scores[loser] == pytest.approx(predicted[winner] / predicted[loser])


def test_unmeasured_endpoint_gets_one_probe_then_counts_as_the_worst() -> None:
    """Unlike every measured endpoint (no KV capacity to compare): the fleet's best guess gets a
    probe; while the probe is out it ranks below every other candidate, per request in flight."""
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    [idle] = s.predicted([ep("new")], tokens=1000, now=LATER)
    assert idle == pytest.approx(0.010 + 25e-6 * 1000, rel=1e-3)  # the fleet's best guess: a probe
    h100, a10g, probing = s.predicted([ep("h100"), ep("a10g"), ep("new", inflight=2)], tokens=1000, now=LATER)
    assert probing == pytest.approx(max(h100, a10g) * 3)


@pytest.mark.parametrize(
    ("new_blocks", "stand_in"),
    [
        (20_000, "h100"),  # alike the measured H100: its model stands in, no probe penalty
        (21_000, "h100"),
        (2_000, "a10g"),  # alike the measured A10G
    ],
)
def test_unmeasured_endpoint_alike_a_measured_one_takes_its_model(new_blocks: int, stand_in: str) -> None:
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    kv = {"h100": 20_000, "a10g": 2_000}
    endpoints = [ep(k, block_size=16, num_gpu_blocks=n) for k, n in kv.items()]
    new = ep("new", block_size=16, num_gpu_blocks=new_blocks, inflight=5)
    *known, fresh = s.predicted([*endpoints, new], tokens=1000, now=LATER)
    assert fresh == pytest.approx(dict(zip(kv, known, strict=True))[stand_in])


def test_unmeasured_endpoint_unlike_any_measured_one_is_slowed_by_its_smaller_kv_cache() -> None:
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    endpoints = [
        ep("h100", block_size=16, num_gpu_blocks=20_000),
        ep("new", block_size=16, num_gpu_blocks=2_000),
    ]
    _, fresh = s.predicted(endpoints, tokens=1000, now=LATER)
    assert fresh == pytest.approx(10 * (0.010 + 25e-6 * 1000), rel=1e-3)


def test_before_any_outcome_dispatches_drain_at_a_speed_proportional_to_kv_capacity() -> None:
    """Without a drain every dispatch would count for ever and a small GPU would end up looking idle."""
    s = BacklogTtftScorer()
    big = ep("big", block_size=16, num_gpu_blocks=20_000)
    small = ep("small", block_size=16, num_gpu_blocks=2_000)
    for i in range(20):
        s.on_picked(ctx(request(1000, f"r{i}"), now=0.0), big)
    assert s.score(ctx(request(1000), now=0.0), [big, small]) == pytest.approx(
        [10 / 21, 1.0]
    )  # 21,000 tokens ahead vs 1,000 at a tenth of the speed
    per_token = 1.0 / (320_000 * PRIOR_TOKENS_PER_S_PER_KV_TOKEN)
    later = 20_000 * per_token  # the big endpoint's backlog has drained by then
    assert s.score(ctx(request(1000), now=later), [big, small]) == pytest.approx([1.0, 0.1])


def test_an_outcome_caps_the_backlog_at_what_was_dispatched_after_it() -> None:
    """The engine prefills in arrival order: a first token proves everything sent before it prefilled."""
    s = BacklogTtftScorer()
    teach(s, "a", (0.010, 1e-3))  # slow: the backlog drains for seconds
    now = LATER
    s.on_picked(ctx(request(2000, "first"), now=now), ep("a"))
    s.on_picked(ctx(request(300, "second"), now=now), ep("a"))
    s.on_complete(
        RequestOutcome(request_id="first", endpoint="a", ok=True, ttft_s=0.5, prompt_tokens=2000),
        now=now + 0.01,
    )
    assert s.backlogs["a"].tokens == pytest.approx(300)
    s.on_complete(
        RequestOutcome(request_id="second", endpoint="a", ok=True, ttft_s=0.5, prompt_tokens=300),
        now=now + 0.02,
    )
    assert s.backlogs["a"].tokens == 0


def test_under_sampled_endpoint_splits_its_mean_ttft() -> None:
    s = BacklogTtftScorer()
    teach(s, "a", H100)
    teach(s, "b", A10G, samples=MIN_FIT_SAMPLES - 1)
    fit = s.fits["b"]
    [p] = s.predicted([ep("b")], tokens=int(fit.mean_x), now=LATER)
    assert p == pytest.approx(fit.mean_y)


def test_waiting_beyond_the_own_backlog_costs_a_mean_ttft_each() -> None:
    s = BacklogTtftScorer()
    teach(s, "a", H100)
    [plain] = s.predicted([ep("a", waiting=0)], tokens=1000, now=LATER)
    [queued] = s.predicted([ep("a", waiting=3)], tokens=1000, now=LATER)
    assert queued - plain == pytest.approx(3 * s.fits["a"].mean_y)


def test_failed_and_unknown_outcomes_teach_nothing() -> None:
    s = BacklogTtftScorer()
    s.on_picked(ctx(request(100, "x"), now=0.0), ep("a"))
    s.on_complete(RequestOutcome(request_id="x", endpoint="a", ok=False), now=1.0)
    s.on_complete(RequestOutcome(request_id="never-picked", endpoint="a", ok=True, ttft_s=0.1), now=1.0)
    assert s.fits == {}


def test_removed_endpoints_are_forgotten() -> None:
    s = BacklogTtftScorer()
    teach(s, "a", H100)
    s.on_picked(ctx(request(100, "pending"), now=0.0), ep("a"))
    s.on_endpoints_removed(["a"])
    assert s.fits == {}
    assert s.backlogs == {}
    assert s.dispatched == {}


def test_factory_reads_parameters_and_rejects_bad_ones() -> None:
    plugin = factory(
        "b",
        {
            "alpha": 0.3,
            "poolRatio": 2,
            "speedRatio": 4,
            "speedPreference": 0.5,
            "maxTracked": 10,
            "probeShare": 0.5,
            "probeKvRatio": 2,
        },
        "plugins[0].parameters",
    )
    assert (plugin.probe_share, plugin.probe_kv_ratio) == (0.5, 2)
    with pytest.raises(SchedulerConfigError, match=r"probeKvRatio"):
        factory("b", {"probeKvRatio": 0.5}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match=r"probeShare"):
        factory("b", {"probeShare": -0.1}, "plugins[0].parameters")
    assert (plugin.type_name, plugin.alpha, plugin.pool_ratio, plugin.max_tracked) == (TYPE, 0.3, 2, 10)
    assert (plugin.speed_ratio, plugin.speed_preference) == (4, 0.5)
    with pytest.raises(SchedulerConfigError, match=r"speedRatio"):
        factory("b", {"speedRatio": 0.9}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match=r"speedPreference"):
        factory("b", {"speedPreference": -1}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match=r"plugins\[0\]\.parameters.*alpha"):
        factory("b", {"alpha": 2}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match=r"poolRatio"):
        factory("b", {"poolRatio": 0.5}, "plugins[0].parameters")


def test_a_matched_prefix_is_not_counted_as_prefill_work() -> None:
    """The prefix scorer's ``prefix.match`` share is cached there: affinity is not read as load."""
    s = BacklogTtftScorer()
    teach(s, "warm", H100)
    teach(s, "cold", H100)
    c = ctx(request(2000), now=LATER)
    c.state[STATE_MATCH] = {"warm": 0.9}
    warm, cold = s.predicted([ep("warm"), ep("cold")], tokens=2000, now=LATER, matched={"warm": 0.9})
    assert warm == pytest.approx(0.010 + 25e-6 * 200, rel=1e-3)
    assert cold == pytest.approx(0.010 + 25e-6 * 2000, rel=1e-3)
    s.on_picked(c, ep("warm"))
    assert s.backlogs["warm"].tokens == pytest.approx(200)  # only the uncached tail is queued


def adapter_request(adapter: str = "ad", tokens: int = 500) -> RoutingRequest:
    return RoutingRequest(
        request_id="x", model=adapter, base_model="m", prefix_text="", prompt_tokens=tokens, adapter=adapter
    )


@pytest.mark.parametrize(
    ("active", "waiting", "max_lora", "exponent", "price", "why"),
    [
        (frozenset({"ad"}), frozenset(), 4, 1.0, 1.0, "the adapter runs there: no slot to take"),
        (frozenset(), frozenset(), 4, 1.0, 1.0, "every slot free: max_lora / 4"),
        (frozenset({"b", "c"}), frozenset(), 4, 1.0, 2.0, "half the slots free"),
        (frozenset({"b"}), frozenset({"c", "d"}), 4, 1.0, 4.0, "waiting adapters hold slots too"),
        (frozenset({"b", "c"}), frozenset(), 2, 1.0, 3.0, "no slot free: max_lora + 1 (it waits)"),
        (frozenset({"b", "c"}), frozenset(), 4, 2.0, 4.0, "the exponent sharpens the price"),
        (frozenset({"b"}), frozenset(), None, 1.0, 1.0, "no LoRA metrics: no price"),
    ],
)
def test_slot_price(
    active: frozenset[str],
    waiting: frozenset[str],
    max_lora: int | None,
    exponent: float,
    price: float,
    why: str,
) -> None:
    endpoint = ep("p", active=active, waiting_adapters=waiting, max_lora=max_lora)
    assert slot_price("ad", endpoint, exponent=exponent) == pytest.approx(price), why


def test_adapter_requests_pay_for_the_slots_they_take() -> None:
    """On a mixed fleet an adapter request is scored by predicted TTFT divided by the slot price: a
    slow pod where the adapter runs loses to a fast pod with every slot free, but a fast pod whose
    last free slot it would take costs more than one where the adapter already runs."""
    s = BacklogTtftScorer(adapter_slot_price=1.0)
    teach(s, "h100", H100)
    teach(s, "h100-b", H100)
    teach(s, "a10g", A10G)
    big = functools.partial(ep, block_size=16, num_gpu_blocks=4000, max_lora=4)
    small = functools.partial(ep, block_size=16, num_gpu_blocks=500, max_lora=4)
    fleet = [
        big("h100", active=frozenset()),
        big("h100-b", active=frozenset({"ad"})),
        small("a10g", active=frozenset({"ad"})),
    ]
    h100, h100_b, a10g = s.score(ctx(adapter_request(), now=LATER), fleet)
    assert h100 is not None
    assert h100_b is not None
    assert a10g is not None
    assert h100_b == pytest.approx(1.0)  # fastest, adapter resident
    assert h100 == pytest.approx(1.0)  # as fast, every slot free: price 4 / 4
    assert a10g < 0.1  # resident, but about 10x slower for 500 tokens
    crowded = [big("h100", active=frozenset({"b", "c", "d"})), *fleet[1:]]
    last_slot, resident, _ = s.score(ctx(adapter_request(), now=LATER), crowded)
    assert resident is not None
    assert last_slot == pytest.approx(resident / 4)


def test_adapter_requests_on_one_kind_of_hardware_stay_neutral() -> None:
    """Identical pods (alike KV capacity and slopes): the LoRA scorers and filter decide, slots are
    not priced here either."""
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    teach(s, "h100-b", H100)
    kv = functools.partial(ep, block_size=16, num_gpu_blocks=4000, max_lora=4)
    fleet = [
        kv("h100", active=frozenset({"b", "c", "d"})),
        kv("h100-b", active=frozenset({"ad"})),
    ]
    assert s.score(ctx(adapter_request(), now=LATER), fleet) == [1.0, 1.0]


def test_adapter_requests_are_left_to_the_lora_scorers_with_price_zero() -> None:
    s = factory("b", {"adapterSlotPrice": 0}, "plugins[0].parameters")
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    adapter = RoutingRequest(
        request_id="x", model="ad", base_model="m", prefix_text="", prompt_tokens=500, adapter="ad"
    )
    assert s.score(ctx(adapter, now=LATER), [ep("h100"), ep("a10g")]) == [1.0, 1.0]
    s.on_picked(ctx(adapter, now=LATER), ep("a10g"))
    assert s.backlogs["a10g"].tokens == pytest.approx(500)  # its prefill still counts as load


def test_runs_after_the_prefix_scorer_in_the_default_profile() -> None:
    profile = profile_from_weights(DEFAULT_WEIGHTS)
    order = [ws.scorer.type_name for ws in profile.scorers]
    assert order.index("prefix-cache-scorer") < order.index(TYPE)


@pytest.mark.parametrize(
    ("blocks", "neutral"),
    [((20_000, 20_000), True), ((20_000, 2_000), False), ((20_000, None), False)],
)
def test_endpoints_with_alike_kv_capacities_score_alike(
    blocks: tuple[int | None, int | None], neutral: bool
) -> None:
    """Alike: one kind of hardware, the other scorers balance; unlike or unknown: this one speaks."""
    for fitted in (False, True):
        s = BacklogTtftScorer()
        if fitted:  # alike measured speeds: only the KV capacities tell the endpoints apart
            teach(s, "e0", H100)
            teach(s, "e1", H100)
        endpoints = [ep(f"e{i}", block_size=16, num_gpu_blocks=n) for i, n in enumerate(blocks)]
        s.on_picked(ctx(request(4000, "busy"), now=LATER), endpoints[0])
        scores = s.score(ctx(request(1000), now=LATER), endpoints)
        assert (scores == [1.0, 1.0]) is neutral, (fitted, scores)


def test_a_first_token_teaches_the_fit_once() -> None:
    """The TTFT is learnt when the first token arrives; the completion that follows adds nothing."""
    s = BacklogTtftScorer()
    s.on_picked(ctx(request(500, "x"), now=0.0), ep("a"))
    first = RequestOutcome(request_id="x", endpoint="a", ok=True, ttft_s=0.05, prompt_tokens=500)
    s.on_first_token(first, now=0.05)
    assert (s.fits["a"].count, s.fits["a"].mean_y) == (1, 0.05)
    s.on_complete(
        RequestOutcome(
            request_id="x", endpoint="a", ok=True, ttft_s=0.05, prompt_tokens=500, output_tokens=200
        ),
        now=3.0,
    )
    assert s.fits["a"].count == 1


@pytest.mark.parametrize(
    ("slopes", "neutral"),
    [
        ((25e-6, 25e-6), True),  # alike KV and alike measured speed: one kind of hardware
        ((25e-6, 60e-6), True),  # within speedRatio: chance scatter of identical pods is tolerated
        ((25e-6, 100e-6), False),  # alike KV, measured 4x apart: an A100-80GB beside an H100
    ],
)
def test_alike_kv_endpoints_are_told_apart_by_measured_speed(
    slopes: tuple[float, float], neutral: bool
) -> None:
    s = BacklogTtftScorer()
    for key, slope in zip(("e0", "e1"), slopes, strict=True):
        teach(s, key, (0.010, slope), samples=SPEED_SAMPLES)
    endpoints = [ep(f"e{i}", block_size=16, num_gpu_blocks=20_000) for i in range(2)]
    scores = s.score(ctx(request(1000), now=LATER), endpoints)
    assert (scores == [1.0, 1.0]) is neutral, scores


@pytest.mark.parametrize("preference", [0.0, 1.0, 2.0])
def test_speed_preference_weighs_how_fast_each_endpoint_would_serve_the_request_idle(
    preference: float,
) -> None:
    """score = (best predicted / predicted) x (fastest idle TTFT / idle TTFT) ** speedPreference: of two
    endpoints predicted alike (the fast one busy), the faster hardware keeps the better score, so
    prefix affinity does not tie a request group to a slow GPU."""
    s = BacklogTtftScorer(speed_preference=preference)
    teach(s, "fast", (0.010, 90e-6))
    teach(s, "slow", (0.010, 340e-6))
    s.on_picked(ctx(request(1000, "ahead"), now=LATER), ep("fast"))
    fast, slow = s.predicted([ep("fast"), ep("slow")], tokens=1000, now=LATER)
    sf, ss = s.score(ctx(request(1000), now=LATER), [ep("fast"), ep("slow")])
    assert sf is not None
    assert ss is not None
    idle_fast, idle_slow = 0.010 + 90e-6 * 1000, 0.010 + 340e-6 * 1000
    assert sf / ss == pytest.approx((slow / fast) * (idle_slow / idle_fast) ** preference, rel=1e-3)


def test_the_scheduler_passes_first_tokens_to_the_plugins_that_hear_them() -> None:
    scheduler = scheduler_from_weights(DEFAULT_WEIGHTS, rng=random.Random(1))
    endpoints = [ep("a", block_size=16, num_gpu_blocks=1000), ep("b", block_size=16, num_gpu_blocks=1000)]
    decision = scheduler.pick(request(300, "x"), endpoints, now=0.0)
    assert decision.endpoint is not None
    scorer = next(ws.scorer for ws in scheduler.profile.scorers if ws.scorer.type_name == TYPE)
    assert isinstance(scorer, BacklogTtftScorer)
    scheduler.on_first_token(
        RequestOutcome(request_id="x", endpoint=decision.endpoint, ok=True, ttft_s=0.02, prompt_tokens=300),
        now=0.02,
    )
    assert scorer.fits[decision.endpoint].count == 1


@pytest.mark.parametrize(
    ("tokens", "probe_out", "probe_share", "new_blocks", "penalised", "why"),
    [
        (
            500,
            False,
            1.0,
            20_000,
            False,
            "shorter than the mean prompt: a cheap probe, the guess counted once",
        ),
        (1000, False, 1.0, 20_000, False, "as long as the mean prompt"),
        (
            1500,
            False,
            1.0,
            20_000,
            True,
            "longer than the mean prompt: the guess also slows the preference factor",
        ),
        (500, True, 1.0, 20_000, True, "its probe is still out: no second one"),
        (500, False, 0.0, 20_000, True, "probeShare 0 switches cheap probes off"),
        (1400, False, 1.5, 20_000, False, "probeShare scales the mean"),
        (500, False, 1.0, 14_667, False, "3x less KV cache than the largest: still probed cheaply"),
        (500, False, 1.0, 4_000, True, "11x less KV cache: another class of GPU, judged by the guess twice"),
    ],
)
def test_a_short_request_probes_an_unmeasured_endpoint_without_the_preference_penalty(
    tokens: int, probe_out: bool, probe_share: float, new_blocks: int, penalised: bool, why: str
) -> None:
    """An unmeasured endpoint with less KV cache is guessed slower in its prediction; a request no longer
    than the mean dispatched prompt does not pay that guess a second time in the speed-preference factor,
    unless the endpoint holds more than ``probeKvRatio`` (3) times less KV cache than the largest."""
    s = BacklogTtftScorer(probe_share=probe_share)
    teach(s, "h200", H100)
    s.prompt_mean = 1000.0
    endpoints = [
        ep("h200", block_size=16, num_gpu_blocks=44_000),
        ep("new", block_size=16, num_gpu_blocks=new_blocks, inflight=1 if probe_out else 0),
    ]
    predicted = s.predicted(endpoints, tokens=tokens, now=LATER)
    scores = s.score(ctx(request(tokens), now=LATER), endpoints)
    best = min(predicted)
    guess = 44_000 / new_blocks  # the fleet's best model, slowed by the KV ratio
    idle = [0.010 + 25e-6 * tokens, guess * (0.010 + 25e-6 * tokens)]
    preference = idle[0] / idle[1] if penalised else 1.0
    assert scores[1] == pytest.approx(best / predicted[1] * preference, rel=1e-6), why
    assert scores[0] == pytest.approx(best / predicted[0], rel=1e-6), why


def test_the_mean_dispatched_prompt_follows_the_dispatches() -> None:
    s = BacklogTtftScorer(alpha=0.5)
    for i, tokens in enumerate((100, 300)):
        s.on_picked(ctx(request(tokens, f"r{i}"), now=0.0), ep("a"))
    assert s.prompt_mean == pytest.approx(200.0)  # a plain mean while fewer than 1/alpha samples
    s.on_picked(ctx(request(1000, "r2"), now=0.0), ep("a"))
    assert s.prompt_mean == pytest.approx(600.0)  # then weighted by alpha


def test_adapter_slot_price_parameter() -> None:
    assert factory("b", {"adapterSlotPrice": 3}, "plugins[0].parameters").adapter_slot_price == 3
    with pytest.raises(SchedulerConfigError, match=r"plugins\[0\]\.parameters.*adapterSlotPrice"):
        factory("b", {"adapterSlotPrice": -1}, "plugins[0].parameters")


def test_adapter_requests_on_alike_kv_stay_neutral_even_when_slopes_differ() -> None:
    """Alike KV capacities: slopes learnt from adapter requests include adapter loads and slot
    waits, so a measured difference does not make them priced; base requests still see it."""
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    teach(s, "h100-b", A10G)  # same memory, slopes 12x apart (SPEED_SAMPLES reached)
    kv = functools.partial(ep, block_size=16, num_gpu_blocks=4000, max_lora=4)
    fleet = [
        kv("h100", active=frozenset({"b", "c", "d"})),
        kv("h100-b", active=frozenset({"ad"})),
    ]
    assert s.score(ctx(adapter_request(), now=LATER), fleet) == [1.0, 1.0]
    fast, slow = s.score(ctx(request(500), now=LATER), fleet)
    assert fast == pytest.approx(1.0)
    assert slow is not None
    assert slow < 0.2


def test_adapter_requests_stay_neutral_while_kv_capacities_are_unknown() -> None:
    """Before the first scrape nothing says the fleet mixes hardware: no price, no speed score."""
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    fleet = [ep("h100", active=frozenset(), max_lora=4), ep("a10g", active=frozenset({"ad"}), max_lora=4)]
    assert s.score(ctx(adapter_request(), now=LATER), fleet) == [1.0, 1.0]


@pytest.mark.parametrize(
    ("share", "adapter", "same_list", "expected", "why"),
    [
        (0.25, None, True, [1.0, 0.875, 0.75], "a quarter of predicted-ttft's column repeated"),
        (1.0, None, True, [1.0, 0.5, 0.0], "the whole column"),
        (0.0, None, True, [1.0, 1.0, 1.0], "share 0: neutral, as before round 6"),
        (0.25, "ad", True, [1.0, 1.0, 1.0], "adapter requests stay with the LoRA scorers"),
        (0.25, None, False, [1.0, 1.0, 1.0], "scores of another candidate list are not used"),
    ],
)
def test_on_one_kind_of_hardware_it_repeats_a_share_of_the_predicted_ttft_column(
    share: float, adapter: str | None, same_list: bool, expected: list[float], why: str
) -> None:
    s = factory("b", {"oneKindShare": share}, "plugins[0].parameters")
    endpoints = [ep(f"e{i}", block_size=16, num_gpu_blocks=20_000) for i in range(3)]
    r = adapter_request(adapter) if adapter is not None else request(500, "x")
    c = ctx(r, now=LATER)
    published = endpoints if same_list else list(endpoints)
    c.state[STATE_SCORES] = PublishedScores(published, [1.0, 0.5, 0.0])
    assert s.score(c, endpoints) == pytest.approx(expected), why


def test_on_mixed_hardware_the_predicted_ttft_column_is_not_repeated() -> None:
    s = BacklogTtftScorer()
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    endpoints = [
        ep("h100", block_size=16, num_gpu_blocks=20_000),
        ep("a10g", block_size=16, num_gpu_blocks=2_000),
    ]
    plain = s.score(ctx(request(1000), now=LATER), endpoints)
    c = ctx(request(1000), now=LATER)
    c.state[STATE_SCORES] = PublishedScores(endpoints, [0.0, 1.0])
    assert s.score(c, endpoints) == plain


def test_the_one_kind_share_parameter_is_bounded() -> None:
    with pytest.raises(SchedulerConfigError, match="oneKindShare"):
        factory("b", {"oneKindShare": 1.5}, "plugins[0].parameters")


def test_the_predicted_ttft_scorer_publishes_its_scores_for_this_candidate_list() -> None:
    scorer = PredictedTtftScorer()
    endpoints = [ep("a", waiting=0), ep("b", waiting=3)]
    c = ctx(request(100), now=1.0)
    scores = scorer.score(c, endpoints)
    found = c.state[STATE_SCORES]
    assert isinstance(found, PublishedScores)
    assert found.endpoints is endpoints
    assert list(found.scores) == scores == [1.0, 0.25]


@pytest.mark.parametrize(
    ("labels", "hardware_label", "neutral", "why"),
    [
        (("h100", "h100"), "gpu", True, "the same GPU kind and alike KV: one kind of hardware"),
        (
            ("h100", "a100"),
            "gpu",
            False,
            "alike KV but labelled as different GPUs: told apart from the start",
        ),
        ((None, "a100"), "gpu", True, "an unlabelled endpoint counts as either kind"),
        (("h100", "a100"), "", True, "hardwareLabel '' switches the label check off"),
    ],
)
def test_a_hardware_label_tells_alike_kv_endpoints_apart(
    labels: tuple[str | None, str | None], hardware_label: str, neutral: bool, why: str
) -> None:
    s = factory("b", {"hardwareLabel": hardware_label}, "plugins[0].parameters")
    teach(s, "e0", H100)
    endpoints = [
        ep(f"e{i}", block_size=16, num_gpu_blocks=20_000, labels={} if v is None else {"gpu": v})
        for i, v in enumerate(labels)
    ]
    s.on_picked(ctx(request(4000, "busy"), now=LATER), endpoints[0])
    scores = s.score(ctx(request(1000), now=LATER), endpoints)
    assert (scores == [1.0, 1.0]) is neutral, (why, scores)
    assert s.one_speed(endpoints) is neutral, why


@pytest.mark.parametrize(
    ("gpus", "adapter", "published", "why"),
    [
        (("h100", "h100"), None, True, "one kind of hardware: the candidate list is published"),
        (("h100", "a100"), None, False, "labelled as two kinds: nothing published"),
        (("h100", "h100"), "ad", False, "adapter requests: left to the LoRA scorers, nothing published"),
    ],
)
def test_it_publishes_the_one_kind_verdict_for_prefill_collision_scorer(
    gpus: tuple[str, str], adapter: str | None, published: bool, why: str
) -> None:
    s = BacklogTtftScorer()
    endpoints = [
        ep(f"e{i}", block_size=16, num_gpu_blocks=20_000, labels={"gpu": gpu}) for i, gpu in enumerate(gpus)
    ]
    r = adapter_request(adapter) if adapter is not None else request(500, "x")
    c = ctx(r, now=LATER)
    s.score(c, endpoints)
    assert (c.state.get(STATE_ONE_KIND) is endpoints) is published, why
    assert published or STATE_ONE_KIND not in c.state, why


def test_the_hardware_label_parameter_must_be_a_string() -> None:
    with pytest.raises(SchedulerConfigError, match="hardwareLabel: must be a string"):
        factory("b", {"hardwareLabel": 3}, "plugins[0].parameters")


# Routing round 7 (docs/benchmark.md): slopes fitted over a narrow band of tokens, the model of an
# endpoint without a trusted regression, scraped waiting requests this router dispatched, and which
# endpoints count as measured for prefill-admission-scorer.


def teach_short(s: BacklogTtftScorer, key: str, *, samples: int = 12) -> None:
    """``samples`` prompts of 10-90 tokens on an idle ``key``, every TTFT about 25 ms: a narrow band
    whose least-squares slope (about 4 us per token) says nothing about long prompts."""
    for i in range(samples):
        tokens = 10 + 8 * (i % 11)
        rid = f"{key}-short-{i}"
        s.on_picked(ctx(request(tokens, rid), now=1000.0 * (i + 1)), ep(key))
        s.on_complete(
            RequestOutcome(
                request_id=rid, endpoint=key, ok=True, ttft_s=0.025 + 4e-6 * tokens, prompt_tokens=tokens
            ),
            now=1000.0 * (i + 1) + 1,
        )


@pytest.mark.parametrize(
    ("spread", "trusted"),
    [
        (0.0, True),  # no floor: any spread above 0 (the round-6 rule)
        (20.0, True),  # the band's standard deviation (about 26 tokens) is above it
        (64.0, False),  # the default: the band is too narrow to extrapolate from
    ],
)
def test_linear_fit_needs_a_spread_of_tokens_for_a_slope(spread: float, trusted: bool) -> None:
    fit = LinearFit()
    for i in range(12):
        x = 10.0 + 8 * (i % 11)
        fit.observe(x, 0.025 + 4e-6 * x, alpha=0.1)
    assert (fit.regression(min_samples=MIN_FIT_SAMPLES, min_spread=spread) is not None) is trusted


H200_KV = 30_000
"""Blocks of the alike-KV endpoints below."""


@pytest.mark.parametrize(
    ("twin_labels", "short_labels", "model"),
    [
        # A fitted twin of alike KV capacity, same label (or unlabelled): its slope through the
        # short-prompt endpoint's own mean sample.
        ({}, {}, "anchored"),
        ({"gpu": "h200"}, {"gpu": "h200"}, "anchored"),
        ({"gpu": "h200"}, {}, "anchored"),
        # The twin is labelled as another GPU kind: no anchor, the mean split in halves.
        ({"gpu": "h100"}, {"gpu": "h200"}, "halves"),
    ],
)
def test_an_endpoint_measured_on_short_prompts_only_takes_its_kv_twins_slope(
    twin_labels: dict[str, str], short_labels: dict[str, str], model: str
) -> None:
    """An endpoint that has served only prompts of 10-90 tokens has no trusted slope (the band is too
    narrow): it is predicted with the slope of a fitted endpoint of alike KV capacity, through its own
    mean sample; it is neither taken for ten times faster (the band's own slope) nor for five times
    slower (its mean TTFT split in halves over 50 tokens)."""
    s = BacklogTtftScorer()
    teach(s, "twin", H100)
    teach_short(s, "short")
    assert "short" not in s._pooled()
    fit = s.fits["short"]
    endpoints = [
        ep("twin", block_size=16, num_gpu_blocks=H200_KV, labels=twin_labels),
        ep("short", block_size=16, num_gpu_blocks=H200_KV, labels=short_labels),
    ]
    _, predicted = s.predicted(endpoints, tokens=3000, now=LATER)
    slope = H100[1]
    expected = {
        "anchored": fit.mean_y - slope * fit.mean_x + slope * 3000,
        "halves": fit.mean_y / 2 + fit.mean_y / (2 * fit.mean_x) * 3000,
    }[model]
    assert predicted == pytest.approx(expected, rel=1e-9)


def test_without_an_alike_kv_twin_a_short_prompt_endpoint_keeps_the_halves() -> None:
    s = BacklogTtftScorer()
    teach(s, "big", H100)
    teach_short(s, "short")
    fit = s.fits["short"]
    endpoints = [
        ep("big", block_size=16, num_gpu_blocks=H200_KV),
        ep("short", block_size=16, num_gpu_blocks=H200_KV // 4),
    ]
    _, predicted = s.predicted(endpoints, tokens=3000, now=LATER)
    assert predicted == pytest.approx(fit.mean_y / 2 + fit.mean_y / (2 * fit.mean_x) * 3000, rel=1e-9)


def test_the_slope_spread_parameter() -> None:
    assert factory(TYPE, {"slopeSpread": 0}, "p").slope_spread == 0.0
    assert factory(TYPE, {}, "p").slope_spread == 64.0
    with pytest.raises(SchedulerConfigError, match="slopeSpread"):
        factory(TYPE, {"slopeSpread": -1}, "p")
    s = factory(TYPE, {"slopeSpread": 0}, "p")
    teach_short(s, "short")
    assert "short" in s._pooled()  # no floor: the narrow band's own regression


@pytest.mark.parametrize(
    ("share", "dispatched", "waiting", "extra_means"),
    [
        # ownWaitingShare 0 (routing round 7): this router's waiting dispatches are in the backlog already.
        (0.0, 4, 4, 0.0),
        (0.0, 4, 6, 2.0),  # two more than it sent: another router's traffic, one mean TTFT each
        (0.0, 1, 3, 2.0),
        (0.0, 0, 2, 2.0),
        # 1 (before round 7): a non-empty backlog explains one waiting request, no more.
        (1.0, 4, 4, 3.0),
        (1.0, 4, 6, 5.0),
        (1.0, 1, 3, 2.0),
        (1.0, 0, 2, 2.0),
        # 0.5: each pending dispatch beyond the first explains half a waiting request.
        (0.5, 4, 4, 1.5),  # 4 - (1 + 0.5 x 3)
        (0.5, 4, 6, 3.5),
        (0.5, 2, 2, 0.5),
        (0.5, 1, 3, 2.0),  # one dispatch: the non-empty backlog explains it in full, as before
        (0.5, 0, 2, 2.0),  # nothing of this router's: every waiting request costs a mean TTFT
        (0.5, 6, 2, 0.0),  # more dispatches than waiting requests: nothing added, never taken off
        # The default, 0.25: three quarters of a waiting request each.
        (0.25, 4, 4, 0.75),  # 4 - (1 + 0.75 x 3)
        (0.25, 4, 6, 2.75),
        (0.25, 3, 2, 0.0),  # 2 - (1 + 0.75 x 2) < 0: nothing
    ],
)
def test_waiting_requests_this_router_dispatched_count_by_the_own_waiting_share(
    share: float, dispatched: int, waiting: int, extra_means: float
) -> None:
    """The backlog holds the prompt tokens of this router's dispatches still waiting for a first
    token; the scrape's ``waiting`` count adds one mean TTFT per request beyond the first that they
    do not explain, and ``ownWaitingShare`` of one per request they do. Counted in full they added
    seconds to every busy pod's prediction in a burst (routing round 7); not at all, a pod deep in
    this router's long prompts was predicted at its idle drain speed and took more (round 8)."""
    s = BacklogTtftScorer(own_waiting_share=share)
    teach(s, "a", H100)
    now = LATER
    for i in range(dispatched):
        s.on_picked(ctx(request(500, f"q{i}"), now=now), ep("a"))
    [plain] = s.predicted([ep("a", waiting=0)], tokens=1000, now=now)
    [busy] = s.predicted([ep("a", waiting=waiting)], tokens=1000, now=now)
    assert busy - plain == pytest.approx(extra_means * s.fits["a"].mean_y, rel=1e-9, abs=1e-12)


def busy_mixed_scores(share: float, scored: RoutingRequest) -> list[float | None]:
    """Scores of a fast pod with four of this router's dispatches pending and four scraped waiting,
    beside an idle slow pod (both running the adapter ``ad``: no slot price between them)."""
    s = BacklogTtftScorer(own_waiting_share=share)
    teach(s, "h100", H100)
    teach(s, "a10g", A10G)
    big = functools.partial(ep, block_size=16, num_gpu_blocks=4000, max_lora=4, active=frozenset({"ad"}))
    small = functools.partial(ep, block_size=16, num_gpu_blocks=500, max_lora=4, active=frozenset({"ad"}))
    for i in range(4):
        s.on_picked(ctx(request(500, f"q{i}"), now=LATER), big("h100"))
    return s.score(ctx(scored, now=LATER), [big("h100", waiting=4), small("a10g")])


def test_the_own_waiting_share_counts_for_requests_without_an_adapter_only() -> None:
    """An adapter request's waiting count is read as in routing round 7 (each pending dispatch
    explains one waiting request) whatever the share: on a LoRA fleet a waiting request may be
    waiting for a slot, which the slot price charges already (the share lengthened the LoRA draws'
    tails, docs/benchmark.md, routing round 8). A request without an adapter sees the share."""
    base = request(1000, "b")
    assert busy_mixed_scores(0.0, base) != busy_mixed_scores(1.0, base)
    _, idle_slow_0 = busy_mixed_scores(0.0, base)
    _, idle_slow_1 = busy_mixed_scores(1.0, base)
    assert idle_slow_0 is not None
    assert idle_slow_1 is not None
    assert idle_slow_1 > idle_slow_0  # three more waiting requests counted on the busy fast pod
    adapter = adapter_request(tokens=1000)
    assert busy_mixed_scores(1.0, adapter) == busy_mixed_scores(0.0, adapter)
    assert busy_mixed_scores(0.25, adapter) == busy_mixed_scores(0.0, adapter)


def test_the_own_waiting_share_parameter() -> None:
    assert factory(TYPE, {}, "p").own_waiting_share == 0.25
    assert BacklogTtftScorer().own_waiting_share == 0.25
    assert factory(TYPE, {"ownWaitingShare": 0}, "p").own_waiting_share == 0.0
    assert factory(TYPE, {"ownWaitingShare": 1}, "p").own_waiting_share == 1.0
    for bad in (-0.1, 1.5):
        with pytest.raises(SchedulerConfigError, match=r"p.*ownWaitingShare"):
            factory(TYPE, {"ownWaitingShare": bad}, "p")


def test_a_first_token_ends_a_dispatchs_share_of_the_waiting_count() -> None:
    s = BacklogTtftScorer()
    teach(s, "a", H100)
    for i in range(3):
        s.on_picked(ctx(request(500, f"q{i}"), now=LATER), ep("a"))
    assert s.pending["a"] == 3
    s.on_first_token(
        RequestOutcome(request_id="q0", endpoint="a", ok=True, ttft_s=0.02, prompt_tokens=500), now=LATER
    )
    s.on_complete(
        RequestOutcome(request_id="q0", endpoint="a", ok=True, ttft_s=0.02, prompt_tokens=500), now=LATER
    )
    assert s.pending["a"] == 2
    s.on_endpoints_removed(["a"])
    assert "a" not in s.pending


@pytest.mark.parametrize(
    ("samples", "measured"), [(1, False), (MIN_FIT_SAMPLES - 1, False), (MIN_FIT_SAMPLES, True)]
)
def test_an_endpoint_counts_as_measured_for_admission_after_min_fit_samples(
    samples: int, measured: bool
) -> None:
    """``prefill-admission-scorer`` judges only measured endpoints; a few samples (a mean TTFT of
    short prompts split in halves) took H200s for slow hardware beside 2xH100 pods and rejected them
    for long prompts (docs/benchmark.md, routing round 7)."""
    s = BacklogTtftScorer()
    teach(s, "fast", H100)
    teach(s, "slow", A10G, samples=samples)
    endpoints = [
        ep("fast", block_size=16, num_gpu_blocks=20_000),
        ep("slow", block_size=16, num_gpu_blocks=2_000),
    ]
    c = ctx(request(2000), now=LATER)
    s.score(c, endpoints)
    found = c.state[STATE_PREDICTED]
    assert isinstance(found, Predictions)
    assert list(found.measured) == [True, measured]


@pytest.mark.parametrize(
    ("labels", "shared"),
    [
        (("h100", "h100", "h100"), True),  # one kind: the flat fit takes the kind's medians
        (("h100", "h100", "a100"), False),  # the flat one is another kind: its own model
        ((None, None, None), False),  # unlabelled: pooled by slope only, as before
    ],
)
def test_endpoints_of_one_labelled_kind_share_the_median_of_their_regressions(
    labels: tuple[str | None, str | None, str | None], shared: bool
) -> None:
    """Three pods; the third's fit came out flat (a seventh of the slope, a high intercept). Labelled
    as the same GPU kind, all three are predicted with the median intercept and the median slope of
    their own regressions; otherwise the flat pod keeps its own model (alone in its slope pool)."""
    s = BacklogTtftScorer(pending_floor=0.0)  # the one-token label picks stay pending
    models = {"a": (0.010, 25e-6), "b": (0.012, 27e-6), "flat": (0.300, 4e-6)}
    endpoints = [
        ep(k, labels={} if label is None else {"gpu": label}) for k, label in zip(models, labels, strict=True)
    ]
    for e in endpoints:  # the label is learnt from the picks
        teach(s, e.key, models[e.key])
        s.on_picked(ctx(request(1, f"{e.key}-label"), now=LATER - 1), e)
    _, _, flat = s.predicted(endpoints, tokens=2000, now=LATER * 2)
    if shared:
        assert flat == pytest.approx(0.012 + 25e-6 * 2000, rel=1e-6)
    else:
        assert flat == pytest.approx(0.300 + 4e-6 * 2000, rel=1e-6)


@pytest.mark.parametrize(
    ("floor", "prompts", "first_tokens_seen", "ahead"),
    [
        (0.0, [2000, 2000, 1000], 0, 0.0),  # no floor: the drained estimate (empty by now) stands
        (1.0, [2000, 2000, 1000], 0, 5000.0),  # every pending prompt is still ahead
        (1.0, [2000, 2000, 1000], 1, 3000.0),  # a first token takes its prompt off the floor
        (1.0, [2000, 2000, 1000], 3, 0.0),  # nothing pending: nothing floored
        (0.5, [2000, 2000, 1000], 0, 2500.0),
        (0.5, [4000], 0, 2000.0),
    ],
)
def test_this_routers_pending_prompts_floor_the_backlog(
    floor: float, prompts: list[int], first_tokens_seen: int, ahead: float
) -> None:
    """The backlog drains at the fitted speed, which a busy pod (decoding its batch beside the prompts
    it prefills) does not reach: on random-1-08 and -02 pods whose own dispatches were still waiting
    for their first token were predicted as drained and took more (docs/benchmark.md, routing round
    9). None of the prompts still waiting for a first token is wholly prefilled, so ``pendingFloor``
    of their tokens is still ahead of a new request. The fit's samples keep the drained estimate
    (floored there as well, the H200s' fits of random-1-02 came out flat and random-1-14 went out)."""
    s = BacklogTtftScorer(pending_floor=floor)
    teach(s, "a", H100)
    for i, tokens in enumerate(prompts):
        s.on_picked(ctx(request(tokens, f"q{i}"), now=LATER), ep("a"))
    for i in range(first_tokens_seen):
        s.on_first_token(
            RequestOutcome(request_id=f"q{i}", endpoint="a", ok=True, ttft_s=0.05, prompt_tokens=prompts[i]),
            now=LATER,
        )
    drained = LATER + 1000.0  # the drained estimate is empty long before this
    [p] = s.predicted([ep("a")], tokens=1000, now=drained)
    intercept, slope = s._cycle_models["a"]  # a first token taught the fit a sample too
    assert p == pytest.approx(intercept + slope * (ahead + 1000), rel=1e-9)
    s.on_picked(ctx(request(1000, "next"), now=drained), ep("a"))
    assert s.dispatched["next"][1] == 0.0  # the fit's sample: the drained estimate, not floored


def test_the_pending_floor_forgets_dispatches_that_ended_or_left() -> None:
    s = BacklogTtftScorer(pending_floor=1.0)
    teach(s, "a", H100)
    s.on_picked(ctx(request(700, "q0"), now=LATER), ep("a"))
    s.on_picked(ctx(request(300, "q1"), now=LATER), ep("a"))
    s.on_picked(ctx(request(500, "q1"), now=LATER), ep("a"))  # a retry of q1: its first dispatch is over
    assert s.pending_tokens["a"] == pytest.approx(1200)
    s.on_complete(
        RequestOutcome(request_id="q0", endpoint="a", ok=False, ttft_s=None, prompt_tokens=700), now=LATER
    )
    assert s.pending_tokens["a"] == pytest.approx(500)  # a failure ends the dispatch too
    s.on_endpoints_removed(["a"])
    assert "a" not in s.pending_tokens


def test_only_streamed_dispatches_floor_the_backlog() -> None:
    """A non-streamed request's first token is never reported (only its completion, the whole answer
    later): counted in the floor, its prompt would stay ahead of every new request long after its
    prefill, and a pod serving non-streamed requests would look busier than it is."""
    s = BacklogTtftScorer(pending_floor=1.0)
    teach(s, "a", H100)
    s.on_picked(ctx(request(2000, "streamed"), now=LATER), ep("a"))
    s.on_picked(ctx(dataclasses.replace(request(3000, "whole"), stream=False), now=LATER), ep("a"))
    assert s.pending["a"] == 2  # both dispatches are tracked (the waiting-share counts them)
    assert s.pending_tokens["a"] == pytest.approx(2000)
    [p] = s.predicted([ep("a")], tokens=1000, now=LATER + 1000.0)
    intercept, slope = s._cycle_models["a"]
    assert p == pytest.approx(intercept + slope * (2000 + 1000), rel=1e-9)
    s.on_complete(
        RequestOutcome(request_id="whole", endpoint="a", ok=True, ttft_s=None, prompt_tokens=3000), now=LATER
    )
    assert s.pending_tokens["a"] == pytest.approx(2000)


def test_the_pending_floor_parameter() -> None:
    assert factory(TYPE, {}, "p").pending_floor == 1.0
    assert BacklogTtftScorer().pending_floor == 1.0
    assert factory(TYPE, {"pendingFloor": 0}, "p").pending_floor == 0.0
    assert factory(TYPE, {"pendingFloor": 0.5}, "p").pending_floor == 0.5
    for bad in (-0.1, 1.5):
        with pytest.raises(SchedulerConfigError, match=r"p.*pendingFloor"):
            factory(TYPE, {"pendingFloor": bad}, "p")


@pytest.mark.parametrize(
    ("exponent", "preference"),
    [(1.0, 0.0), (1.0, 1.0), (2.0, 0.0), (4.0, 0.0), (4.0, 1.0), (0.5, 2.0)],
)
def test_the_prediction_exponent_sharpens_the_ratio_between_endpoints_of_one_model(
    exponent: float, preference: float
) -> None:
    """score = (best of its kind / predicted) ** predictionExponent x (best / best of its kind) x
    (fastest idle / idle) ** speedPreference. The plain ratio shrinks as the whole fleet's predictions
    grow (1.2 s against 1.5 s is 0.8), so on an overloaded fleet of identical 2xH100s a pod predicted
    0.3 s later lost a fraction of this scorer's weight and the range-normalised queue and
    prefill-collision columns placed the request (random-1-02, docs/benchmark.md, routing round 10).
    Between kinds (``slow``) the ratio is not sharpened."""
    s = BacklogTtftScorer(speed_preference=preference, prediction_exponent=exponent)
    teach(s, "a", H100)
    teach(s, "b", H100)
    teach(s, "slow", A10G)
    s.on_picked(ctx(request(3000, "ahead"), now=LATER), ep("a"))
    endpoints = [ep("a"), ep("b"), ep("slow")]
    pa, pb, ps = s.predicted(endpoints, tokens=1000, now=LATER)
    assert s._cycle_models["a"] == s._cycle_models["b"] != s._cycle_models["slow"]  # the premise
    assert pb < pa < ps
    sa, sb, ss = s.score(ctx(request(1000), now=LATER), endpoints)
    assert sa is not None
    assert sb is not None
    assert ss is not None
    idle_h100, idle_a10g = H100[0] + H100[1] * 1000, A10G[0] + A10G[1] * 1000
    assert sb == pytest.approx(1.0)
    assert sa == pytest.approx((pb / pa) ** exponent, rel=1e-6)
    assert ss == pytest.approx((pb / ps) * (idle_h100 / idle_a10g) ** preference, rel=1e-6)


@pytest.mark.parametrize("exponent", [1.0, 2.0])
def test_the_prediction_exponent_applies_before_any_outcome(exponent: float) -> None:
    """Before any sample endpoints of one KV capacity are one model; the exponent sharpens the ratio
    between them and leaves the one to the smaller GPU as it is."""
    s = BacklogTtftScorer(prediction_exponent=exponent)
    endpoints = [
        ep("big", block_size=16, num_gpu_blocks=4000),
        ep("busy", block_size=16, num_gpu_blocks=4000),
        ep("small", block_size=16, num_gpu_blocks=1000),
    ]
    s.on_picked(ctx(request(500, "ahead"), now=0.0), endpoints[1])
    big, busy, small = s.predicted(endpoints, tokens=1000, now=0.0)
    scores = s.score(ctx(request(1000), now=0.0), endpoints)
    assert scores == pytest.approx([1.0, (big / busy) ** exponent, big / small])


def test_the_prediction_exponent_parameter() -> None:
    assert factory(TYPE, {}, "p").prediction_exponent == 4.0
    assert BacklogTtftScorer().prediction_exponent == 4.0
    assert factory(TYPE, {"predictionExponent": 1}, "p").prediction_exponent == 1.0
    with pytest.raises(SchedulerConfigError, match=r"p.*predictionExponent"):
        factory(TYPE, {"predictionExponent": -1}, "p")


@pytest.mark.parametrize(("labels", "sharpened"), [(("h100", "h100"), True), (("h100", "h200"), False)])
def test_the_prediction_exponent_leaves_differently_labelled_endpoints_of_one_model_plain(
    labels: tuple[str, str], sharpened: bool
) -> None:
    """Before any sample an H200 and a 2xH100 pod hold about the same KV cache and so share the prior
    model; sharpened as one kind, the H200 lost the early picks of random-1-14 (docs/benchmark.md,
    routing round 10). Their ``hardwareLabel`` values tell them apart."""
    s = BacklogTtftScorer(prediction_exponent=3.0)
    endpoints = [
        *(
            ep(f"e{i}", block_size=16, num_gpu_blocks=4000, labels={"gpu": label})
            for i, label in enumerate(labels)
        ),
        ep("small", block_size=16, num_gpu_blocks=1000, labels={"gpu": "a10g"}),  # a mixed fleet
    ]
    s.on_picked(ctx(request(500, "ahead"), now=0.0), endpoints[1])
    first, second, small = s.predicted(endpoints, tokens=1000, now=0.0)
    scores = s.score(ctx(request(1000), now=0.0), endpoints)
    assert scores == pytest.approx([1.0, (first / second) ** (3.0 if sharpened else 1.0), first / small])


def test_the_prediction_exponent_leaves_adapter_requests_plain() -> None:
    """Adapter requests keep the plain ratio (then the slot price): sharpened too, random-1-03 (a LoRA
    draw) went from 346 to 458 ms against the oracle's 350 (docs/benchmark.md, routing round 10)."""
    endpoints = [
        ep("a", block_size=16, num_gpu_blocks=4000, labels={"gpu": "h100"}),
        ep("b", block_size=16, num_gpu_blocks=4000, labels={"gpu": "h100"}),
        ep("small", block_size=16, num_gpu_blocks=1000, labels={"gpu": "a10g"}),
    ]
    scores = {}
    for exponent in (1.0, 3.0):
        s = BacklogTtftScorer(prediction_exponent=exponent)
        teach(s, "a", H100)
        teach(s, "b", H100)
        teach(s, "small", A10G)
        s.on_picked(ctx(request(3000, "ahead"), now=LATER), endpoints[0])
        adapter_request = dataclasses.replace(request(1000), model="lora-x", adapter="lora-x")
        scores[exponent] = s.score(ctx(adapter_request, now=LATER), endpoints)
    assert scores[1.0][0] is not None
    assert scores[1.0][0] < 1.0  # the busy twin scores below its idle one
    assert scores[3.0] == scores[1.0]


def test_the_one_kind_check_kept_per_scrape_answers_as_reading_every_candidate() -> None:
    """The capacities-alike and labels-differ answers kept between picks, updated at the
    re-scraped positions only, equal those made from the whole candidate list, whatever the
    re-scrapes change (capacities, labels, neither), with the label check on and off."""
    rng = random.Random(5)

    def view(i: int) -> EndpointView:
        label = rng.choice((None, "h100", "h100", "a10g"))
        return ep(
            f"e{i}",
            block_size=16,
            num_gpu_blocks=rng.choice((20_000, 20_000, 20_000, 5_000, 0)),
            labels=None if label is None else {"gpu": label},
        )

    for hardware_label in ("gpu", ""):
        scorer = BacklogTtftScorer(hardware_label=hardware_label)
        updated_differ = updated_alike = 0
        for _ in range(300):
            n = rng.randint(1, 12)
            endpoints = [view(i) for i in range(n)]
            capacities = kv_capacities(endpoints)
            kept = scorer._alike_made(endpoints, capacities)
            for _ in range(5):
                changed = sorted(rng.sample(range(n), rng.randint(1, n)))
                endpoints = [view(i) if i in changed else e for i, e in enumerate(endpoints)]
                capacities = capacities_updated(capacities, changed, [e.metrics for e in endpoints])
                kept = scorer._alike_updated(kept, changed, endpoints, capacities)
                made = scorer._alike_made(endpoints, capacities)
                assert kept[1:] == made[1:]
                assert kept[3] == scorer.labels_differ(endpoints)
                assert kept[1] == scorer._alike_capacities(endpoints)
                updated_differ += kept[3]
                updated_alike += kept[1]
        assert updated_alike > 50  # both answers were seen
        if hardware_label:
            assert 50 < updated_differ < 1400


def test_a_pick_sent_elsewhere_teaches_the_fit_of_the_pod_that_served_it() -> None:
    """Flow control steered the pick from a to b (or a refused the connection and b served): b's
    first token teaches b's fit. Until session s41 the dispatch stayed recorded on a, and b's time to
    first token became a sample of a's speed (on a mixed fleet, a slow pod learnt a fast one's TTFT)."""
    s = scheduler_from_weights(dict(DEFAULT_WEIGHTS), rng=random.Random(0))
    (scorer,) = [p for p in s.plugins if isinstance(p, BacklogTtftScorer)]
    a, b = ep("a", waiting=1, running=4), ep("b", waiting=1, running=4)
    rreq = dataclasses.replace(request(1000, "q"), stream=True)
    picked = s.pick(rreq, [a, b], now=1.0).endpoint
    assert picked is not None
    other = b if picked == "a" else a
    s.move_dispatch(picked, other.key, now=1.0, request_id="q", sent_to=other)
    assert scorer.pending_tokens.get(picked, 0.0) == 0.0
    s.on_first_token(
        RequestOutcome(request_id="q", endpoint=other.key, ok=True, ttft_s=0.5, prompt_tokens=1000), now=1.5
    )
    assert set(scorer.fits) == {other.key}


def test_picks_given_back_leave_no_backlog_and_no_pending_floor() -> None:
    """The flow-control pump picks a queued request's pod at every poll and gives the pick back while
    the pod has no place; then the client leaves (no outcome ever comes). Until session s41 each
    poll added the prompt to the pod's backlog (10,000 tokens after 10 polls of a 1,000-token prompt)
    and the last pick held 1,000 tokens in the pod's pending floor until maxTracked more picks."""
    s = BacklogTtftScorer()
    rreq = dataclasses.replace(request(1000, "q"), stream=True)
    for _ in range(10):
        s.on_picked(ctx(rreq, now=1.0), ep("a", kv=0.5))
        assert s.on_not_sent("q", "a", sent_to=None)
    assert s.backlogs["a"].tokens == 0.0
    assert (s.pending["a"], s.pending_tokens["a"], s.dispatched) == (0, 0.0, {})
    assert not s.on_not_sent("q", "a", sent_to=None)
