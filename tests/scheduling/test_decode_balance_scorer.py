"""``decode-balance-scorer``: on one kind of hardware, fewer of this router's requests in flight
scores higher, by as much as the request's prefix match leaves to gain, and the harder the longer the
prompt against the median one seen (while no candidate has requests waiting); elsewhere it abstains."""

from __future__ import annotations

import math
import random

import pytest

from igw.config.model import Weights
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, effective_weights, scheduler_from_weights
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.decode_balance_scorer import (
    MEDIAN_STEP,
    STRETCH_CAP,
    TYPE,
    DecodeBalanceScorer,
    RunningMedian,
    balance_scores,
    factory,
    match_share,
    stretch_for,
)
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import RoutingRequest
from tests.scheduling.helpers import ctx, ep


def request(adapter: str | None = None, *, prompt_tokens: int = 2000) -> RoutingRequest:
    return RoutingRequest(
        request_id="r",
        model=adapter or "m",
        base_model="m",
        prefix_text="",
        prompt_tokens=prompt_tokens,
        adapter=adapter,
    )


@pytest.mark.parametrize(
    ("inflight", "factor", "expected", "why"),
    [
        ([0, 1, 3], 1.0, [1.0, 0.5, 0.25], "(fewest + 1) / (own + 1)"),
        ([20, 21, 29], 1.0, [1.0, 21 / 22, 21 / 30], "busy pods: one request more costs little"),
        ([4, 4, 4], 1.0, [1.0, 1.0, 1.0], "equal counts: no preference"),
        ([0, 1, 3], 0.1, [1.0, 0.95, 0.925], "a prefix match buying 90 % leaves a tenth of the preference"),
        ([0, 1, 3], 0.0, [1.0, 1.0, 1.0], "a whole-prompt match: the prefix scorer decides"),
        ([-2, 1], 1.0, [1.0, 0.5], "a negative count is read as 0"),
    ],
)
def test_balance_scores(inflight: list[int], factor: float, expected: list[float], why: str) -> None:
    assert balance_scores(inflight, factor=factor) == pytest.approx(expected), why


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (None, 0.0),
        ({}, 0.0),
        ({"a": 0.25, "b": 0.75}, 0.75),
        ({"a": 1.5}, 1.0),
        ("not a mapping", 0.0),
    ],
)
def test_match_share_is_the_largest_matched_share(found: object, expected: float) -> None:
    assert match_share(found) == expected


@pytest.mark.parametrize(
    ("one_kind", "matched", "adapter", "expected", "why"),
    [
        (True, None, None, [1.0, 0.5, 0.25], "one kind, no prefix match: the in-flight ratio"),
        (True, {"e2": 0.5}, None, [1.0, 0.75, 0.625], "half the prompt matched: half the preference"),
        (False, None, None, [None, None, None], "not one kind of hardware: abstains"),
        (True, None, "ad", [None, None, None], "an adapter request: left to the LoRA scorers"),
    ],
)
def test_it_scores_only_one_kind_of_hardware(
    one_kind: bool,
    matched: dict[str, float] | None,
    adapter: str | None,
    expected: list[float | None],
    why: str,
) -> None:
    endpoints = [ep("e0", inflight=0), ep("e1", inflight=1), ep("e2", inflight=3)]
    c = ctx(request(adapter))
    if one_kind:
        c.state[STATE_ONE_KIND] = endpoints
    if matched is not None:
        c.state[STATE_MATCH] = matched
    got = DecodeBalanceScorer().score(c, endpoints)
    assert got == pytest.approx(expected) if expected[0] is not None else got == expected, why


def test_a_one_kind_verdict_for_other_candidates_is_not_taken() -> None:
    endpoints = [ep("e0", inflight=0), ep("e1", inflight=2)]
    c = ctx(request())
    c.state[STATE_ONE_KIND] = list(endpoints)  # equal, but another pick's list
    assert DecodeBalanceScorer().score(c, endpoints) == [None, None]


def test_it_takes_no_parameters() -> None:
    with pytest.raises(SchedulerConfigError, match="share"):
        factory("d", {"share": 1}, "plugins[0].parameters")


def test_it_is_a_default_scorer_switched_off_with_predicted_latency() -> None:
    assert DEFAULT_WEIGHTS[TYPE] == 2.0
    assert TYPE not in effective_weights(Weights(predicted_latency=0), lora_adapters=False)


def test_the_default_scheduler_sends_the_next_request_to_the_pod_with_fewest_in_flight() -> None:
    """Identical pods, every scraped signal equal: the pick follows this router's in-flight counts
    (with the scorer off it is a random tie-break among all three)."""
    picks = set()
    for seed in range(20):
        s = scheduler_from_weights(DEFAULT_WEIGHTS, rng=random.Random(seed))
        endpoints = [
            ep(f"e{i}", inflight=n, block_size=16, num_gpu_blocks=20_000, labels={"gpu": "h100"})
            for i, n in enumerate([3, 1, 2])
        ]
        picks.add(s.pick(request(), endpoints, now=0.0).endpoint)
    assert picks == {"e1"}


def test_on_mixed_hardware_it_leaves_the_pick_to_the_other_scorers() -> None:
    """Two GPU kinds: the scorer abstains, so the totals are those of the profile without it."""
    endpoints = [
        ep(f"e{i}", inflight=n, block_size=16, num_gpu_blocks=20_000, labels={"gpu": gpu})
        for i, (n, gpu) in enumerate([(3, "h100"), (0, "a10g"), (2, "h100")])
    ]
    without = {k: v for k, v in DEFAULT_WEIGHTS.items() if k != TYPE}
    a = scheduler_from_weights(DEFAULT_WEIGHTS, rng=random.Random(1)).pick(request(), endpoints, now=0.0)
    b = scheduler_from_weights(without, rng=random.Random(1)).pick(request(), endpoints, now=0.0)
    assert a.endpoint == b.endpoint
    assert {k: v["total"] for k, v in a.scores.items()} == {k: v["total"] for k, v in b.scores.items()}


def test_the_one_pass_form_gives_the_formula_s_floats_bit_for_bit() -> None:
    """The scores are computed in one pass for speed; they must be the formula's own floats (the
    picks, and the DES decisions, depend on exact ties)."""
    rng = random.Random(7)
    for _ in range(20_000):
        inflight = [rng.randint(-2, 60) for _ in range(rng.randint(0, 20))]
        factor = rng.random()
        counts = [max(0, c) for c in inflight]
        lo = min(counts, default=0)
        expected = [1.0 - factor * (1.0 - (lo + 1) / (c + 1)) for c in counts]
        assert list(balance_scores(inflight, factor=factor)) == expected


# --------------------------------------------------------------- long prompts (routing round 13)


@pytest.mark.parametrize(
    ("inflight", "factor", "stretch", "expected", "why"),
    [
        ([0, 1, 3], 1.0, 2.0, [1.0, 0.25, 0.0625], "twice the median: the ratio squared"),
        ([0, 1, 3], 1.0, 0.5, [1.0, 0.5**0.5, 0.25**0.5], "half the median: its square root"),
        ([0, 1, 3], 1.0, 0.0, [1.0, 1.0, 1.0], "an empty prompt prefills nothing: no preference"),
        ([0, 1, 3], 0.5, 2.0, [1.0, 0.625, 0.53125], "a half-matched prefix halves the pull"),
        ([20, 21, 29], 1.0, 2.0, [1.0, (21 / 22) ** 2, (21 / 30) ** 2], "busy pods"),
        ([0, 50], 1.0, 1000.0, [1.0, (1 / 51) ** 1000], "any power stays in [0, 1]"),
    ],
)
def test_balance_scores_with_a_stretch(
    inflight: list[int], factor: float, stretch: float, expected: list[float], why: str
) -> None:
    got = balance_scores(inflight, factor=factor, stretch=stretch)
    assert got == pytest.approx(expected), why
    assert all(v is not None and 0.0 <= v <= 1.0 for v in got), why


def test_stretched_scores_are_the_formula_s_floats_and_within_0_and_1() -> None:
    rng = random.Random(11)
    for _ in range(20_000):
        inflight = [rng.randint(-2, 60) for _ in range(rng.randint(0, 20))]
        factor = rng.random()
        stretch = rng.choice([0.0, 1.0, STRETCH_CAP, rng.random() * 3])
        counts = [max(0, c) for c in inflight]
        lo = min(counts, default=0)
        expected = [1.0 - factor * (1.0 - ((lo + 1) / (c + 1)) ** stretch) for c in counts]
        got = list(balance_scores(inflight, factor=factor, stretch=stretch))
        assert got == expected
        assert all(v is not None and 0.0 <= v <= 1.0 for v in got)


@pytest.mark.parametrize(
    ("prompt", "median", "queued", "expected", "why"),
    [
        (3000, None, False, 1.0, "no median yet: round 11's rule"),
        (1000, 1000.0, False, 1.0, "the median prompt: round 11's rule"),
        (1500, 1000.0, False, 1.5, "half again the median, no queue"),
        (5000, 1000.0, False, STRETCH_CAP, "far above the median: capped"),
        (5000, 1000.0, True, 1.0, "a queue somewhere: never above 1"),
        (250, 1000.0, False, 0.25, "a short prompt pulls less"),
        (250, 1000.0, True, 0.25, "... with or without a queue"),
        (0, 1000.0, False, 0.0, "an empty prompt"),
        (-5, 1000.0, False, 0.0, "a negative count is read as 0"),
    ],
)
def test_stretch_for(prompt: int, median: float | None, queued: bool, expected: float, why: str) -> None:
    assert stretch_for(prompt, median, queued=queued) == pytest.approx(expected), why


def test_the_running_median_settles_at_the_median_of_a_skewed_stream() -> None:
    """A long-tailed stream (log-normal, median 1,500; its mean is far above) and a stream changing
    its median: the estimate follows the median, not the mean, within the settled step's wander."""
    rng = random.Random(3)
    m = RunningMedian()
    assert m.value is None
    for _ in range(3000):
        m.add(rng.lognormvariate(0.0, 1.2) * 1500)
    assert m.value is not None
    assert 1500 / 1.35 < m.value < 1500 * 1.35
    for _ in range(3000):
        m.add(rng.lognormvariate(0.0, 1.2) * 200)
    assert m.value is not None
    assert 200 / 1.35 < m.value < 200 * 1.35


@pytest.mark.parametrize(
    ("values", "expected", "why"),
    [
        ([], None, "nothing seen"),
        ([700], 700.0, "the first value"),
        ([0], 1.0, "values below 1 count as 1"),
        ([100, 100, 100], 100.0, "values equal to the estimate leave it"),
        ([100, 1000], 100 * math.exp(1 / 2), "the second value moves it by a factor e^(1/2)"),
        ([100, 10], 100 * math.exp(-1 / 2), "... down as well"),
    ],
)
def test_running_median_steps(values: list[int], expected: float | None, why: str) -> None:
    m = RunningMedian()
    for v in values:
        m.add(v)
    assert m.value == (None if expected is None else pytest.approx(expected)), why


def test_the_running_median_s_step_settles_at_its_setting() -> None:
    m = RunningMedian(step=0.25)
    for v in (100, 1, 1, 1):  # steps 1/2, 1/3 and then 1/4 = the setting
        m.add(v)
    assert m.value == pytest.approx(100 * math.exp(-1 / 2 - 1 / 3 - 1 / 4))
    m.add(10_000)
    assert m.value == pytest.approx(100 * math.exp(-1 / 2 - 1 / 3 - 1 / 4 + 1 / 4))
    assert MEDIAN_STEP == 1 / 64
    with pytest.raises(ValueError, match="step"):
        RunningMedian(step=0.0)


def learned(median_prompt: int, picks: int = 200) -> DecodeBalanceScorer:
    """A scorer that has seen ``picks`` picks of ``median_prompt``-token prompts."""
    scorer = DecodeBalanceScorer()
    endpoints = [ep("e0")]
    for _ in range(picks):
        scorer.on_picked(ctx(request(prompt_tokens=median_prompt)), endpoints[0])
    assert scorer.prompts.value == pytest.approx(median_prompt)
    return scorer


@pytest.mark.parametrize(
    ("prompt", "waiting", "power", "why"),
    [
        (2000, [0, 0, 0], 2.0, "twice the median, no queue: the ratio squared"),
        (8000, [0, 0, 0], STRETCH_CAP, "far longer: capped"),
        (2000, [0, 3, 0], 1.0, "a candidate with requests waiting: round 11's ratio"),
        (2000, [0, None, 0], 1.0, "a waiting count missing: as if queued"),
        (500, [0, 0, 0], 0.5, "half the median: a softer pull"),
        (500, [4, 4, 4], 0.5, "... queued or not"),
    ],
)
def test_the_learned_median_sets_the_pull(
    prompt: int, waiting: list[int | None], power: float, why: str
) -> None:
    scorer = learned(1000)
    endpoints = [
        ep(f"e{i}", inflight=n, waiting=w) for i, (n, w) in enumerate(zip([0, 1, 3], waiting, strict=True))
    ]
    c = ctx(request(prompt_tokens=prompt))
    c.state[STATE_ONE_KIND] = endpoints
    assert scorer.score(c, endpoints) == pytest.approx([1.0, 0.5**power, 0.25**power]), why


def test_with_a_median_learned_it_still_abstains_off_one_kind_and_for_adapters() -> None:
    scorer = learned(1000)
    endpoints = [ep("e0", inflight=0), ep("e1", inflight=3)]
    assert scorer.score(ctx(request(prompt_tokens=4000)), endpoints) == [None, None]
    c = ctx(request("ad", prompt_tokens=4000))
    c.state[STATE_ONE_KIND] = endpoints
    assert scorer.score(c, endpoints) == [None, None]


def test_the_default_scheduler_learns_the_median_from_every_pick() -> None:
    """Picks on mixed hardware too (where the scorer abstains) enter the median: it is the median of
    the prompts the gateway sees."""
    s = scheduler_from_weights(DEFAULT_WEIGHTS, rng=random.Random(1))
    (scorer,) = [ws.scorer for ws in s.profile.scorers if isinstance(ws.scorer, DecodeBalanceScorer)]
    endpoints = [
        ep(f"e{i}", block_size=16, num_gpu_blocks=20_000, labels={"gpu": gpu})
        for i, gpu in enumerate(["h100", "a10g"])
    ]
    for _ in range(100):
        s.pick(request(prompt_tokens=1234), endpoints, now=0.0)
    assert scorer.prompts.value == pytest.approx(1234)
