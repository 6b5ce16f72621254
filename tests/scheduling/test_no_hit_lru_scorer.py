from __future__ import annotations

import pytest

from igw.scheduling.plugins.no_hit_lru_scorer import NoHitLruScorer
from igw.scheduling.plugins.prefix_cache_scorer import STATE_ANY_HIT
from tests.scheduling.helpers import ctx, ep


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        pytest.param([], [1.0, 1.0, 1.0], id="never-used-all-1"),
        pytest.param(["e1"], [0.0, 1.0, 1.0], id="recent-one-is-0"),
        pytest.param(["e1", "e2"], [0.5, 0.0, 1.0], id="older-scores-higher"),
        pytest.param(["e1", "e2", "e3", "e1"], [0.0, 2 / 3, 1 / 3], id="reuse-moves-to-most-recent"),
    ],
)
def test_cold_request_scores(history: list[str], expected: list[float]) -> None:
    scorer = NoHitLruScorer()
    eps = [ep("e1"), ep("e2"), ep("e3")]
    by_key = {e.key: e for e in eps}
    for key in history:
        scorer.on_picked(ctx(), by_key[key])
    assert scorer.score(ctx(), eps) == pytest.approx(expected)


def test_warm_request_is_neutral_and_not_recorded() -> None:
    scorer = NoHitLruScorer()
    eps = [ep("e1"), ep("e2")]
    warm = ctx()
    warm.state[STATE_ANY_HIT] = True
    assert scorer.score(warm, eps) == [0.5, 0.5]
    scorer.on_picked(warm, eps[0])
    assert scorer.score(ctx(), eps) == [1.0, 1.0]


def test_lru_size_bounds_memory() -> None:
    scorer = NoHitLruScorer(lru_size=1)
    eps = [ep("e1"), ep("e2")]
    scorer.on_picked(ctx(), eps[0])
    scorer.on_picked(ctx(), eps[1])
    assert scorer.score(ctx(), eps) == [1.0, 0.0]
