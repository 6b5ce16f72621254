from __future__ import annotations

import pytest

from igw.scheduling.plugins.inflight_scorer import InflightScorer
from tests.scheduling.helpers import ctx, ep


@pytest.mark.parametrize(
    ("inflight", "expected"),
    [
        pytest.param([0, 2, 4], [1.0, 0.5, 0.0], id="relative-to-max"),
        pytest.param([0, 0], [1.0, 1.0], id="idle-is-1"),
        pytest.param([3, 3], [0.0, 0.0], id="equal-busy"),
    ],
)
def test_inflight_scores(inflight: list[int], expected: list[float]) -> None:
    eps = [ep(f"e{i}", inflight=n, no_metrics=True) for i, n in enumerate(inflight)]
    assert InflightScorer().score(ctx(), eps) == pytest.approx(expected)
