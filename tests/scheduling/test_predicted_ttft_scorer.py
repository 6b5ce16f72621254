"""``predicted-ttft-scorer``: measured TTFT x (1 + waiting incl. unreflected dispatches), ratio to best."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import SupportsIndex

import pytest

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.plugins.predicted_ttft_scorer import PredictedTtftScorer, factory
from igw.scheduling.types import EndpointView, RequestOutcome
from tests.scheduling.helpers import ctx, ep
from tests.scheduling.reference import reference_pooled_ttft


def view(key: str, *, waiting: int | None = 0, unreflected: int = 0, inflight: int = 0) -> EndpointView:
    return replace(ep(key, waiting=waiting, inflight=inflight), unreflected_dispatches=unreflected)


@pytest.mark.parametrize(
    ("ttfts", "views", "expected"),
    [
        pytest.param(
            {},
            [view("a"), view("b", waiting=1), view("c", waiting=3)],
            [1.0, 0.5, 0.25],
            id="unmeasured-counts-only",
        ),
        pytest.param({"a": 0.02, "b": 0.2}, [view("a"), view("b")], [1.0, 0.1], id="ten-times-slower"),
        pytest.param(
            {"a": 0.02, "b": 0.2},
            [view("a", waiting=4), view("b")],
            [1.0, 0.5],
            id="fast-pod-with-queue-still-wins",
        ),
        pytest.param(
            {"a": 0.02, "b": 0.02},
            [view("a", unreflected=1), view("b")],
            [0.5, 1.0],
            id="own-dispatches-since-scrape-count-as-waiting",
        ),
        pytest.param(
            {"a": 0.02, "b": 0.06},
            [view("a"), view("b"), view("c")],
            [1.0, 1 / 3, 0.5],
            id="unmeasured-takes-the-mean",
        ),
        pytest.param(
            {},
            [view("a", waiting=None, inflight=1), view("b", waiting=None)],
            [0.5, 1.0],
            id="no-waiting-signal-uses-inflight",
        ),
    ],
)
def test_scores(ttfts: dict[str, float], views: list[EndpointView], expected: list[float]) -> None:
    scorer = PredictedTtftScorer(alpha=1.0)
    for key, ttft in ttfts.items():
        scorer.on_complete(RequestOutcome(request_id="r", endpoint=key, ok=True, ttft_s=ttft), now=0.0)
    assert scorer.score(ctx(), views) == pytest.approx(expected)


def test_failed_outcomes_are_not_learned_and_removed_endpoints_forgotten() -> None:
    scorer = PredictedTtftScorer(alpha=0.5)
    scorer.on_complete(RequestOutcome(request_id="r", endpoint="a", ok=True, ttft_s=0.02), now=0.0)
    scorer.on_complete(RequestOutcome(request_id="r", endpoint="a", ok=True, ttft_s=0.04), now=0.0)
    scorer.on_complete(RequestOutcome(request_id="r", endpoint="a", ok=False, ttft_s=9.0), now=0.0)
    assert scorer.ttft.get("a") == pytest.approx(0.03)
    scorer.on_endpoints_removed(["a"])
    assert scorer.ttft.get("a") is None


def test_a_streamed_request_s_ttft_is_learned_at_its_first_token_and_once() -> None:
    """The first token teaches the scorer (the pod's speed one TTFT after dispatch, the work done in
    the stream's gaps); the same request's completion is not taken in again, while a request with no
    first token heard (not streamed) is learned at completion as before."""
    scorer = PredictedTtftScorer(alpha=0.5)
    scorer.on_first_token(RequestOutcome(request_id="s", endpoint="a", ok=True, ttft_s=0.02), now=0.0)
    assert scorer.ttft.get("a") == pytest.approx(0.02)
    assert scorer.ttft.counts["a"] == 1
    scorer.on_complete(RequestOutcome(request_id="s", endpoint="a", ok=True, ttft_s=0.02), now=1.0)
    assert scorer.ttft.counts["a"] == 1
    scorer.on_complete(RequestOutcome(request_id="n", endpoint="a", ok=True, ttft_s=0.04), now=1.0)
    assert scorer.ttft.counts["a"] == 2
    assert scorer.ttft.get("a") == pytest.approx(0.03)
    # the picks see the learned speed at once (the pool caught up at the first token)
    scorer.on_first_token(RequestOutcome(request_id="t", endpoint="b", ok=True, ttft_s=0.06), now=2.0)
    scores = scorer.score(ctx(), [view("a"), view("b")])
    assert scores == pytest.approx([1.0, 0.03 / 0.06])


def test_ids_heard_at_first_token_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first token whose completion never comes (its endpoint left the pool) is not kept forever:
    past the limit the oldest id is dropped (and its completion, should it come, is learned)."""
    monkeypatch.setattr("igw.scheduling.plugins.predicted_ttft_scorer.HEARD_LIMIT", 3)
    scorer = PredictedTtftScorer(alpha=0.5)
    for i in range(5):
        scorer.on_first_token(RequestOutcome(request_id=f"r{i}", endpoint="a", ok=True, ttft_s=0.02), now=0.0)
    assert scorer.ttft.counts["a"] == 5
    scorer.on_complete(RequestOutcome(request_id="r0", endpoint="a", ok=True, ttft_s=0.02), now=1.0)
    scorer.on_complete(RequestOutcome(request_id="r4", endpoint="a", ok=True, ttft_s=0.02), now=1.0)
    assert scorer.ttft.counts["a"] == 6  # r0 was dropped: learned again; r4 was kept: skipped


def test_factory_rejects_unknown_and_out_of_range_parameters() -> None:
    assert factory("p", {"alpha": 0.5}, "plugins[0].parameters").ttft.alpha == 0.5
    with pytest.raises(SchedulerConfigError, match=r"alpha"):
        factory("p", {"alpha": 2}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match=r"alhpa"):
        factory("p", {"alhpa": 0.5}, "plugins[0].parameters")


def _feed(scorer: PredictedTtftScorer, key: str, samples: list[float]) -> None:
    for i, ttft in enumerate(samples):
        scorer.on_complete(
            RequestOutcome(request_id=f"{key}{i}", endpoint=key, ok=True, ttft_s=ttft), now=0.0
        )


NOISY = [0.01, 0.04, 0.02, 0.05, 0.015, 0.03, 0.06, 0.02, 0.025, 0.035, 0.012, 0.045] * 2
"""Per-request TTFTs of one pod: several-fold spread, as prompt lengths make it."""


def test_identical_pods_whose_means_differ_by_chance_score_alike() -> None:
    """Regression (homogeneous-steady herding): a pod that was lucky lately is not 'faster'."""
    scorer = PredictedTtftScorer()
    _feed(scorer, "lucky", [*NOISY[:-4], *[0.02] * 4])
    _feed(scorer, "unlucky", [*NOISY[:-4], *[0.035] * 4])
    raw = [scorer.ttft.get("lucky"), scorer.ttft.get("unlucky")]
    assert raw[0] is not None
    assert raw[1] is not None
    assert raw[1] > 1.3 * raw[0]
    assert scorer.score(ctx(), [view("lucky"), view("unlucky")]) == [1.0, 1.0]
    # Work ahead still counts in full.
    assert scorer.score(ctx(), [view("lucky", waiting=1), view("unlucky")]) == pytest.approx([0.5, 1.0])


def test_a_real_speed_difference_survives_the_noise_test() -> None:
    scorer = PredictedTtftScorer()
    _feed(scorer, "h100", NOISY)
    _feed(scorer, "a10g", [t * 10 for t in NOISY])
    scores = scorer.score(ctx(), [view("h100"), view("a10g")])
    assert scores[0] == 1.0
    assert scores[1] == pytest.approx(0.1, rel=0.05)


def test_endpoints_with_few_samples_keep_their_own_mean() -> None:
    scorer = PredictedTtftScorer()
    _feed(scorer, "settled", NOISY)
    _feed(scorer, "new", [0.2, 0.3])
    pooled = scorer.pooled_ttft([view("settled"), view("new")])
    assert pooled == [scorer.ttft.get("settled"), scorer.ttft.get("new")]


def test_noise_z_zero_compares_raw_means() -> None:
    scorer = factory("p", {"noiseZ": 0}, "plugins[0].parameters")
    _feed(scorer, "a", [*NOISY[:-4], 0.01, 0.01, 0.012, 0.011])
    _feed(scorer, "b", [*NOISY[:-4], 0.05, 0.06, 0.045, 0.05])
    scores = scorer.score(ctx(), [view("a"), view("b")])
    assert scores[0] == 1.0
    assert scores[1] is not None
    assert scores[1] < 0.9


def test_noise_z_must_be_non_negative() -> None:
    with pytest.raises(SchedulerConfigError, match=r"noiseZ"):
        factory("p", {"noiseZ": -1}, "plugins[0].parameters")


def _set_measurement(scorer: PredictedTtftScorer, key: str, *, ttft: float, log_sd: float) -> None:
    """Pin an endpoint's learned state (mean TTFT, log-space spread) as after 100 samples."""
    for ewma, value, var in ((scorer.ttft, ttft, 0.0), (scorer.log_ttft, math.log(ttft), log_sd**2)):
        ewma.set_state(key, mean=value, variance=var, count=100)


def test_groups_do_not_chain_small_steps_into_a_large_difference() -> None:
    """Each step (x1.5) is inside 2 standard errors, the first-to-last (x2.25) is not."""
    scorer = PredictedTtftScorer()
    for key, ttft in (("a", 0.02), ("b", 0.03), ("c", 0.045)):
        _set_measurement(scorer, key, ttft=ttft, log_sd=0.45)
    pooled = scorer.pooled_ttft([view("a"), view("b"), view("c")])
    assert pooled == pytest.approx([0.025, 0.025, 0.045])


class _CountingList(list[object]):
    """A list that counts the element moves (``insert``, ``del``) made on it."""

    def __init__(self, items: list[object]) -> None:
        super().__init__(items)
        self.moves = 0

    def insert(self, index: SupportsIndex, value: object) -> None:
        self.moves += 1
        super().insert(index, value)

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        self.moves += 1
        super().__delitem__(index)


def test_one_outcome_s_catch_up_takes_the_one_key_path_and_pools_as_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a first token on a settled pod (the usual case) ``TtftPool.catch_up`` updates that one
    pod without the set union of ``_take_changes`` (whose EWMA change sets it empties itself), and
    a mean that keeps its place among the sorted ones is written over rather than deleted and
    inserted again; the pooled TTFTs stay those of a from-scratch walk, unmeasured candidates
    (the mean of the measured ones) included."""
    scorer = PredictedTtftScorer()
    keys = ["a", "b", "c", "d", "new"]
    for key, scale in (("a", 1.0), ("b", 1.1), ("c", 3.0), ("d", 9.0)):
        _feed(scorer, key, [t * scale for t in NOISY])
    views = [view(k) for k in keys]
    scorer.pooled_ttft(views)  # the pool keeps this candidate list
    pool = scorer.pool
    pairs = _CountingList(pool._pairs)  # type: ignore[arg-type]
    monkeypatch.setattr(pool, "_pairs", pairs)
    taken = 0
    take_changes = pool._take_changes

    def counted() -> set[str]:
        nonlocal taken
        taken += 1
        return take_changes()

    monkeypatch.setattr(pool, "_take_changes", counted)
    outcome = RequestOutcome(request_id="r1", endpoint="c", ok=True, ttft_s=0.03 * 3.0)
    scorer.on_first_token(outcome, now=0.0)  # c's mean moves a little: it stays between b and d
    assert taken == 0
    assert pairs.moves == 0
    assert not scorer.ttft.changed
    assert not scorer.log_ttft.changed
    assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)
    # A mean that passes a neighbour still moves (deleted and inserted), with the same result.
    taken = 0  # the pick above took the (no) changes itself
    for i in range(6):
        fast = RequestOutcome(request_id=f"m{i}", endpoint="d", ok=True, ttft_s=0.001)
        scorer.on_first_token(fast, now=0.0)
    assert pairs.moves >= 2
    assert taken == 0
    assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)
    # An unmeasured candidate measured for the first time leaves the unmeasured ones.
    scorer.on_first_token(RequestOutcome(request_id="n1", endpoint="new", ok=True, ttft_s=0.5), now=0.0)
    assert pool._unmeasured == []
    assert scorer.pooled_ttft(views) == reference_pooled_ttft(scorer, views)
