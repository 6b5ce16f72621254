"""``decode-harm-gate`` (routing round 15, not a default): on one kind of hardware a long prompt is
kept off pods where its prefill would slow more requests than the wait it saves; elsewhere it
abstains."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import DEFAULT_WEIGHTS, scheduler_from_weights
from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.decode_harm_gate import (
    MEAN_WINDOW,
    TYPE,
    DecodeHarmGate,
    RunningMean,
    bounded_gate,
    cost_gate,
    factory,
    tolerance_gate,
)
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointView, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx, ep, req


def request(tokens: int, *, rid: str = "r", adapter: str | None = None) -> RoutingRequest:
    """A request of ``tokens`` prompt tokens (the helpers' builder counts four characters a token)."""
    return req("x" * (4 * tokens), adapter=adapter, request_id=rid)


@pytest.mark.parametrize(
    ("gate", "waits", "loads", "bound", "expected", "why"),
    [
        (cost_gate, [0, 0, 0], [2, 5, 9], 2.0, [True, False, False], "equal waits: the fewest in flight"),
        (cost_gate, [6, 0, 0], [2, 5, 9], 2.0, [True, True, False], "6 + 2x2 = 10 >= 0 + 2x5, not 2x9"),
        (cost_gate, [6, 0], [2, 5], 1.5, [True, True], "6 + 3 >= 7.5: the saved wait pays"),
        (cost_gate, [6, 0], [2, 5], 3.0, [True, False], "a longer prompt harms more: 12 < 15"),
        (cost_gate, [5, 1, 0], [2, 2, 9], 2.0, [True, True, False], "all at the fewest are admitted"),
        (cost_gate, [4, 4], [3, 3], 2.0, [True, True], "equal loads: nothing to reject"),
        (bounded_gate, [9, 0, 1], [0, 5, 9], 2.0, [False, True, False], "idle pod waits 9 > 0 + 2"),
        (bounded_gate, [2, 0, 1], [0, 5, 9], 2.0, [True, False, False], "in bounds: the cost test"),
        (tolerance_gate, [0, 100, 5000], [9, 3, 0], 1e3, [False, True, False], "near: the fewest"),
        (tolerance_gate, [0, 100], [3, 3], 1e3, [True, True], "equal loads among the near ones"),
        (tolerance_gate, [0, 2000], [9, 0], 1e3, [True, False], "the idle pod is over a step away"),
    ],
)
def test_gates(
    gate: Callable[[list[float], list[int], float], list[bool]],
    waits: list[float],
    loads: list[int],
    bound: float,
    expected: list[bool],
    why: str,
) -> None:
    """``bound``: the prompt's stretch ``g`` (cost, bounded) or the tolerance in tokens."""
    assert gate(waits, loads, bound) == expected, why


def test_running_mean_is_the_plain_mean_then_exponential() -> None:
    m = RunningMean()
    for x in (1.0, 2.0, 6.0):
        m.observe(x)
    assert m.value == pytest.approx(3.0)
    for _ in range(10 * MEAN_WINDOW):
        m.observe(100.0)
    before = m.value
    m.observe(0.0)
    assert m.value == pytest.approx(before * (1 - 1 / MEAN_WINDOW))


def taught(gate: DecodeHarmGate, *, mean: int, endpoint: EndpointView) -> None:
    """Teach ``gate`` a mean prompt of ``mean`` tokens (one pick, completed at once)."""
    c = ctx(request(mean, rid="teach"))
    gate.on_picked(c, endpoint)
    gate.on_complete(RequestOutcome("teach", endpoint.key, True, 0.1, 0.02, mean, 10), now=0.0)


def one_kind(
    c_req: RoutingRequest, endpoints: list[EndpointView], matched: dict[str, float] | None = None
) -> CycleContext:
    c = ctx(c_req)
    c.state[STATE_ONE_KIND] = endpoints
    if matched is not None:
        c.state[STATE_MATCH] = matched
    return c


def test_a_long_prompt_is_kept_off_the_busier_pod_a_short_one_is_not_judged() -> None:
    endpoints = [ep("e0", inflight=2), ep("e1", inflight=8)]
    gate = DecodeHarmGate()
    taught(gate, mean=1000, endpoint=endpoints[0])
    assert gate.score(one_kind(request(3000), endpoints), endpoints) == [1.0, 0.0]
    assert gate.score(one_kind(request(1000), endpoints), endpoints) == [None, None], "g = 1: abstains"


def test_the_prompt_tokens_queued_ahead_buy_the_busier_pod_back() -> None:
    """e0 holds fewer requests but 12 mean prompts of this router's tokens waiting for a first token:
    W = 12 + g x 2 against 0 + g x 8 admits e1 at g = 1.5 (15 >= 12) and rejects it at g = 3."""
    e0, e1 = ep("e0", inflight=2), ep("e1", inflight=8)
    gate = DecodeHarmGate()
    taught(gate, mean=1000, endpoint=e0)
    for i in range(2):
        gate.on_picked(ctx(request(6000, rid=f"q{i}")), e0)
    gate.prompt_mean.value = 1000.0  # the picks above taught the mean; the test fixes it
    endpoints = [e0, e1]
    assert gate.score(one_kind(request(1500), endpoints), endpoints) == [None, None], "both admitted"
    assert gate.score(one_kind(request(3000), endpoints), endpoints) == [1.0, 0.0]
    # A first token takes a request's tokens out of the queue.
    gate.on_first_token(RequestOutcome("q0", "e0", True, 2.0, None, 6000, 0), now=2.0)
    assert gate.queued["e0"] == 6000.0


@pytest.mark.parametrize(
    ("one", "adapter", "matched", "why"),
    [
        (False, None, None, "not one kind of hardware"),
        (True, "ad", None, "an adapter request"),
        (True, None, {"e0": 0.8}, "a prefix covering 80 % leaves less than the mean to prefill"),
    ],
)
def test_it_abstains(one: bool, adapter: str | None, matched: dict[str, float] | None, why: str) -> None:
    endpoints = [ep("e0", inflight=2), ep("e1", inflight=8)]
    gate = DecodeHarmGate()
    taught(gate, mean=1000, endpoint=endpoints[0])
    c = one_kind(request(3000, adapter=adapter), endpoints, matched)
    if not one:
        del c.state[STATE_ONE_KIND]
    assert gate.score(c, endpoints) == [None, None], why


def test_it_abstains_before_any_pick_and_on_equal_loads() -> None:
    endpoints = [ep("e0", inflight=4), ep("e1", inflight=4)]
    gate = DecodeHarmGate()
    assert gate.score(one_kind(request(3000), endpoints), endpoints) == [None, None], "no mean yet"
    taught(gate, mean=1000, endpoint=endpoints[0])
    assert gate.score(one_kind(request(3000), endpoints), endpoints) == [None, None], "equal loads"


def test_the_tolerance_form_waits_for_its_measurements() -> None:
    endpoints = [ep("e0", inflight=2), ep("e1", inflight=8)]
    gate = DecodeHarmGate(form="tolerance")
    gate.prompt_mean.observe(1000.0)
    assert gate.score(one_kind(request(3000), endpoints), endpoints) == [None, None], "no step measured"
    gate.on_picked(ctx(request(1000, rid="a")), endpoints[0])
    gate.on_first_token(RequestOutcome("a", "e0", True, 0.5, None, 1000, 0), now=0.5)
    gate.on_complete(RequestOutcome("a", "e0", True, 0.5, 0.05, 1000, 10), now=1.0)
    assert gate.rate_mean.value == pytest.approx(2000.0)
    assert gate.score(one_kind(request(3000), endpoints), endpoints) == [1.0, 0.0]


def test_factory_reads_the_form() -> None:
    assert factory("g", {"form": "bounded"}, "p").form == "bounded"
    assert factory("g", {}, "p").form == "cost"
    with pytest.raises(SchedulerConfigError, match="form"):
        factory("g", {"form": "score"}, "p")


def test_with_the_default_weights_the_gate_decides_against_the_ttft_columns() -> None:
    """Identical pods, e0 with an empty queue (the TTFT columns' favourite) but more requests in
    flight; a long prompt goes to e1 once the gate is in the profile at 17 (above the other
    defaults' sum), and to e0 without it."""

    def pods() -> list[EndpointView]:
        return [
            ep("e0", inflight=9, waiting=0, block_size=16, num_gpu_blocks=20_000, labels={"gpu": "h100"}),
            ep("e1", inflight=3, waiting=4, block_size=16, num_gpu_blocks=20_000, labels={"gpu": "h100"}),
        ]

    picks: dict[bool, set[str | None]] = {True: set(), False: set()}
    for seed in range(10):
        for on in (True, False):
            weights = {**DEFAULT_WEIGHTS, TYPE: 17.0} if on else dict(DEFAULT_WEIGHTS)
            s = scheduler_from_weights(weights, rng=random.Random(seed))
            for i in range(3):  # teach the mean: 1,000-token prompts, completed
                short = request(1000, rid=f"t{i}")
                d = s.pick(
                    short, [ep("x", block_size=16, num_gpu_blocks=20_000, labels={"gpu": "h100"})], now=0.0
                )
                s.on_complete(RequestOutcome(f"t{i}", d.endpoint or "x", True, 0.1, 0.02, 1000, 5), now=0.0)
            picks[on].add(s.pick(request(4000, rid="long"), pods(), now=0.0).endpoint)
    assert picks[False] == {"e0"}
    assert picks[True] == {"e1"}
