"""``prefill-admission-scorer``: a long prompt is kept off candidates whose predicted TTFT (from
``backlog-ttft-scorer``) is more than ``ratio`` times the best; otherwise it leaves the pick alone."""

from __future__ import annotations

import random

import pytest

from igw.config.model import Weights
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import (
    DECODE_BALANCE_KEY,
    DEFAULT_WEIGHTS,
    OUTPUT_AFFINITY_KEY,
    effective_weights,
    profile_from_weights,
    scheduler_from_weights,
)
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_PREDICTED, BacklogTtftScorer, Predictions
from igw.scheduling.plugins.prefill_admission_scorer import TYPE, PrefillAdmissionScorer, admitted, factory
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.types import EndpointView, RequestOutcome, RoutingRequest
from tests.scheduling.helpers import ctx, ep

LATER = 100_000.0


def request(tokens: int, request_id: str = "r", adapter: str | None = None) -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id,
        model=adapter or "m",
        base_model="m",
        prefix_text="",
        prompt_tokens=tokens,
        adapter=adapter,
    )


@pytest.mark.parametrize(
    ("predicted", "idle", "ratio", "expected", "why"),
    [
        ([1.0, 1.9, 2.0, 2.1], [1.0, 3.0, 3.0, 3.0], 2.0, [True, True, True, False], "slow and far worse"),
        ([0.5, 3.0], [0.4, 2.0], 2.0, [True, False], "slow hardware predicted 6x the best"),
        ([0.5, 3.0], [0.4, 2.0], 8.0, [True, True], "a looser ratio admits it"),
        ([0.5, 3.0], [0.4, 0.5], 2.0, [True, True], "far worse but as fast hardware: queues are not judged"),
        ([2.0, 2.0], [1.0, 5.0], 1.0, [True, True], "slow hardware predicted as well as the best"),
        ([0.0, 0.0], [1.0, 5.0], 2.0, [True, True], "no positive prediction: no basis to reject"),
        ([0.0, 1.0, 5.0], [1.0, 1.0, 5.0], 2.0, [True, True, False], "the best positive prediction counts"),
    ],
)
def test_admitted_rejects_slow_hardware_predicted_far_worse(
    predicted: list[float], idle: list[float], ratio: float, expected: list[bool], why: str
) -> None:
    assert admitted(predicted, idle, [True] * len(predicted), ratio=ratio, slow_ratio=ratio) == expected, why


@pytest.mark.parametrize(
    ("slow_ratio", "expected"),
    [(1.3, [True, False]), (2.5, [True, True]), (1.9, [True, False])],
)
def test_slow_ratio_decides_what_counts_as_slow_hardware(slow_ratio: float, expected: list[bool]) -> None:
    """A pod with twice the idle prefill (a single H200 beside 2xH100 for 32B) is slow hardware at
    1.3 and 1.9, not at 2.5 (the default); an A10G-class pod (ten times) is slow at all three."""
    assert admitted([0.5, 3.0], [0.4, 0.8], [True, True], ratio=1.3, slow_ratio=slow_ratio) == expected
    assert admitted([0.5, 3.0], [0.4, 4.0], [True, True], ratio=1.3, slow_ratio=slow_ratio) == [True, False]


def test_a_guessed_speed_is_not_judged() -> None:
    """An endpoint without samples of its own is predicted on a guess; the backlog scorer's probing
    decides its first requests, not admission."""
    assert admitted([0.5, 3.0], [0.4, 2.0], [True, False], ratio=1.3, slow_ratio=1.3) == [True, True]
    assert admitted([0.5, 3.0], [0.4, 2.0], [True, True], ratio=1.3, slow_ratio=1.3) == [True, False]


@pytest.mark.parametrize(
    ("tokens", "predicted", "expected", "why"),
    [
        (4000, [1.0, 5.0], [1.0, 0.0], "long prompt, the slow candidate 5x the best: rejected"),
        (512, [1.0, 1.31], [1.0, 0.0], "just over 1.3x the best, at minPromptTokens: rejected"),
        (4000, [1.0, 1.3], [None, None], "every candidate within 1.3x: no opinion"),
        (511, [1.0, 5.0], [None, None], "below minPromptTokens: short prompts are never judged"),
    ],
)
def test_scores_long_prompts_only(
    tokens: int, predicted: list[float], expected: list[float | None], why: str
) -> None:
    endpoints = [ep("fast"), ep("slow")]
    c = ctx(request(tokens), now=1.0)
    c.state[STATE_PREDICTED] = Predictions(
        endpoints, predicted, [1.0, 3.0], [True, True]
    )  # the second pod is slow
    assert PrefillAdmissionScorer().score(c, endpoints) == expected, why


def test_without_predictions_for_this_candidate_list_it_has_no_opinion() -> None:
    endpoints = [ep("fast"), ep("slow")]
    c = ctx(request(4000), now=1.0)
    assert PrefillAdmissionScorer().score(c, endpoints) == [None, None]
    c.state[STATE_PREDICTED] = Predictions([ep("fast"), ep("slow")], [1.0, 9.0], [1.0, 9.0], [True, True])
    assert PrefillAdmissionScorer().score(c, endpoints) == [None, None]  # another list object


def test_factory_reads_parameters_and_rejects_bad_ones() -> None:
    plugin = factory("a", {"ratio": 3, "slowRatio": 4, "minPromptTokens": 10}, "plugins[0].parameters")
    assert (plugin.ratio, plugin.slow_ratio, plugin.min_prompt_tokens) == (3.0, 4.0, 10)
    with pytest.raises(SchedulerConfigError, match=r"plugins\[0\]\.parameters\.ratio"):
        factory("a", {"ratio": 0.5}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match="unknown field 'bogus'"):
        factory("a", {"bogus": 1}, "plugins[0].parameters")


def test_default_profile_has_it_after_the_backlog_scorer_outweighing_the_rest() -> None:
    """Outweighing every scorer that can score in the same pick: ``decode-balance-scorer`` and
    ``output-affinity-scorer`` score only where the backlog scorer found one kind of hardware, and
    then it publishes no predictions for this one to judge (``test_decode_balance_scorer.py`` and
    ``test_output_affinity_scorer.py`` check that they abstain on mixed hardware)."""
    order = [ws.scorer.type_name for ws in profile_from_weights(DEFAULT_WEIGHTS).scorers]
    assert order.index("backlog-ttft-scorer") < order.index(TYPE)
    others = sum(
        w
        for k, w in effective_weights(None, lora_adapters=True).items()
        if k not in (TYPE, DECODE_BALANCE_KEY, OUTPUT_AFFINITY_KEY)
    )
    assert DEFAULT_WEIGHTS[TYPE] > others
    assert TYPE not in effective_weights(Weights(predicted_latency=0), lora_adapters=False)


def backlog_of(scheduler: Scheduler) -> BacklogTtftScorer:
    found = next(
        ws.scorer for ws in scheduler.profile.scorers if ws.scorer.type_name == "backlog-ttft-scorer"
    )
    assert isinstance(found, BacklogTtftScorer)
    return found


def _taught(scheduler_weights: dict[str, float]) -> tuple[Scheduler, list[EndpointView]]:
    """A default scheduler that has measured a fast endpoint (H100-like) and a slow one (A10G-like,
    a tenth of the KV cache), with the fast one holding a long prompt of this router's."""
    scheduler = scheduler_from_weights(scheduler_weights, rng=random.Random(3))
    fast = ep("fast", block_size=16, num_gpu_blocks=20_000, scraped_at=LATER, waiting=3, running=8, kv=0.6)
    slow = ep("slow", block_size=16, num_gpu_blocks=2_000, scraped_at=LATER)
    backlog = backlog_of(scheduler)
    models = {"fast": (0.010, 25e-6), "slow": (0.040, 300e-6)}
    for i in range(40):
        key = "fast" if i % 2 == 0 else "slow"
        tokens = 100 + 37 * (i % 11)
        rid = f"t{i}"
        c = ctx(request(tokens, rid), now=100.0 * (i + 1))
        backlog.on_picked(c, fast if key == "fast" else slow)
        intercept, slope = models[key]
        backlog.on_first_token(
            RequestOutcome(
                request_id=rid, endpoint=key, ok=True, ttft_s=intercept + slope * tokens, prompt_tokens=tokens
            ),
            now=100.0 * (i + 1) + 1,
        )
    backlog.on_picked(ctx(request(30_000, "busy"), now=LATER), fast)
    return scheduler, [fast, slow]


def test_in_the_default_profile_a_long_prompt_waits_for_the_fast_pod() -> None:
    """The fast pod has 30,000 tokens queued (about 0.76 s); an 8,000-token prompt takes 0.21 s
    there and 2.4 s on the idle slow pod: admission keeps the slow pod out. Without the plugin the
    balance scorers, which see an idle slow pod, send it there."""
    scheduler, endpoints = _taught(dict(DEFAULT_WEIGHTS))
    decision = scheduler.pick(request(8000, "long"), endpoints, now=LATER)
    assert decision.endpoint == "fast"
    without = {k: w for k, w in DEFAULT_WEIGHTS.items() if k != TYPE}
    scheduler, endpoints = _taught(without)
    decision = scheduler.pick(request(8000, "long"), endpoints, now=LATER)
    assert decision.endpoint == "slow"


def test_adapter_requests_and_short_prompts_are_left_alone() -> None:
    scheduler, endpoints = _taught(dict(DEFAULT_WEIGHTS))
    c = ctx(request(200, "short"), now=LATER)
    backlog = backlog_of(scheduler)
    backlog.score(c, endpoints)
    assert STATE_PREDICTED in c.state
    assert PrefillAdmissionScorer().score(c, endpoints) == [None, None]
    c = ctx(request(8000, "lora", adapter="ad"), now=LATER)
    backlog.score(c, endpoints)
    assert STATE_PREDICTED not in c.state
