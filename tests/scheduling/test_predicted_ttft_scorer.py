"""``predicted-ttft-scorer``: measured TTFT x (1 + waiting incl. unreflected dispatches), ratio to best."""

from __future__ import annotations

from dataclasses import replace

import pytest
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.plugins.predicted_ttft_scorer import PredictedTtftScorer, factory
from igw.scheduling.types import EndpointView, RequestOutcome

from tests.scheduling.helpers import ctx, ep


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


def test_factory_rejects_unknown_and_out_of_range_parameters() -> None:
    assert factory("p", {"alpha": 0.5}, "plugins[0].parameters").ttft.alpha == 0.5
    with pytest.raises(SchedulerConfigError, match=r"alpha"):
        factory("p", {"alpha": 2}, "plugins[0].parameters")
    with pytest.raises(SchedulerConfigError, match=r"alhpa"):
        factory("p", {"alhpa": 0.5}, "plugins[0].parameters")
