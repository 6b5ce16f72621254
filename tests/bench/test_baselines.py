from __future__ import annotations

import random
from collections import Counter

from igw.bench.policies.baselines import LeastRequestPolicy, PowerOfTwoPolicy, RandomPolicy, RoundRobinPolicy
from igw.scheduling.types import DecisionKind
from tests.bench.helpers import request, views


def test_round_robin_cycles_in_key_order_ignoring_load() -> None:
    policy = RoundRobinPolicy()
    eps = views(c=0, a=100, b=5)
    picks = [policy.pick(request(), eps, now=0.0).endpoint for _ in range(6)]
    assert picks == ["a", "b", "c", "a", "b", "c"]


def test_round_robin_fallbacks_are_the_other_endpoints_least_loaded_first() -> None:
    decision = RoundRobinPolicy().pick(request(), views(a=0, b=7, c=2), now=0.0)
    assert decision.endpoint == "a"
    assert decision.fallbacks == ("c", "b")


def test_every_baseline_answers_no_endpoints_on_an_empty_set() -> None:
    rng = random.Random(1)
    for policy in (
        RoundRobinPolicy(),
        RandomPolicy(rng=rng),
        LeastRequestPolicy(rng=rng),
        PowerOfTwoPolicy(rng=rng),
    ):
        decision = policy.pick(request(), [], now=0.0)
        assert decision.kind is DecisionKind.NO_ENDPOINTS
        assert decision.endpoint is None


def test_random_is_reproducible_per_seed_and_covers_all_endpoints() -> None:
    eps = views(a=0, b=0, c=0, d=0)
    first = [RandomPolicy(rng=random.Random(7)).pick(request(), eps, now=0.0).endpoint for _ in range(1)]
    p1, p2 = RandomPolicy(rng=random.Random(7)), RandomPolicy(rng=random.Random(7))
    seq1 = [p1.pick(request(), eps, now=0.0).endpoint for _ in range(400)]
    seq2 = [p2.pick(request(), list(reversed(eps)), now=0.0).endpoint for _ in range(400)]
    assert seq1 == seq2  # caller order does not matter
    assert seq1[0] == first[0]
    counts = Counter(seq1)
    assert set(counts) == {"a", "b", "c", "d"}
    assert all(60 < n < 140 for n in counts.values())


def test_least_request_picks_the_minimum_and_breaks_ties_at_random() -> None:
    policy = LeastRequestPolicy(rng=random.Random(3))
    assert policy.pick(request(), views(a=4, b=1, c=9), now=0.0).endpoint == "b"
    tied = Counter(policy.pick(request(), views(a=2, b=2, c=9), now=0.0).endpoint for _ in range(200))
    assert set(tied) == {"a", "b"}


def test_power_of_two_never_picks_the_most_loaded_of_three() -> None:
    policy = PowerOfTwoPolicy(rng=random.Random(11))
    picks = Counter(policy.pick(request(), views(a=0, b=5, c=10), now=0.0).endpoint for _ in range(300))
    assert "c" not in picks
    # "a" wins every pair it is in (2 of 3 pairs), "b" only the pair (b, c).
    assert picks["a"] > picks["b"] > 0


def test_power_of_two_with_two_endpoints_is_least_request() -> None:
    policy = PowerOfTwoPolicy(rng=random.Random(0))
    assert {policy.pick(request(), views(a=3, b=1), now=0.0).endpoint for _ in range(20)} == {"b"}
