"""``decode-balance-scorer``: on one kind of hardware, fewer of this router's requests in flight
scores higher, by as much as the request's prefix match leaves to gain; elsewhere it abstains."""

from __future__ import annotations

import random
import types

import pytest

from igw.config.model import Weights
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, effective_weights, scheduler_from_weights
from igw.scheduling.framework import UnitScores
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.decode_balance_scorer import (
    TABLE_FROM,
    TYPE,
    DecodeBalanceScorer,
    balance_scores,
    factory,
    match_share,
)
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import RoutingRequest
from tests.scheduling.helpers import ctx, ep


def request(adapter: str | None = None) -> RoutingRequest:
    return RoutingRequest(
        request_id="r",
        model=adapter or "m",
        base_model="m",
        prefix_text="",
        prompt_tokens=2000,
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
        (types.MappingProxyType({"a": 0.25, "b": 0.5}), 0.5),
        (types.MappingProxyType({}), 0.0),
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


def test_the_table_of_distinct_counts_gives_the_formula_s_floats_on_large_pools() -> None:
    """From ``TABLE_FROM`` candidates with few distinct counts the formula is worked out once per
    count and looked up: the same floats, in candidate order, as the formula per candidate."""
    rng = random.Random(11)
    tabled = 0
    for _ in range(2_000):
        n = rng.randint(TABLE_FROM - 2, 400)
        spread = rng.choice((1, 3, 9, 60, 400))
        inflight = [rng.randint(-2, spread) for _ in range(n)]
        factor = rng.random()
        counts = [max(0, c) for c in inflight]
        lo = min(counts, default=0)
        expected = [1.0 - factor * (1.0 - (lo + 1) / (c + 1)) for c in counts]
        scores = balance_scores(inflight, factor=factor)
        assert type(scores) is UnitScores
        assert list(scores) == expected
        tabled += n >= TABLE_FROM and len(set(inflight)) * 4 <= n
    assert tabled > 500  # the table's path was taken, often
