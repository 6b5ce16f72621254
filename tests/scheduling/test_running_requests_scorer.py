from __future__ import annotations

import pytest

from igw.scheduling.plugins.running_requests_scorer import RunningRequestsScorer
from tests.scheduling.helpers import ctx, ep


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        pytest.param([0, 8, 16], [1.0, 0.5, 0.0], id="min-max"),
        pytest.param([4, 4], [1.0, 1.0], id="all-equal"),
        pytest.param([None, 1, 3], [None, 1.0, 0.0], id="missing"),
    ],
)
def test_running_scores(running: list[int | None], expected: list[float | None]) -> None:
    eps = [ep(f"e{i}", running=r) for i, r in enumerate(running)]
    assert RunningRequestsScorer().score(ctx(), eps) == pytest.approx(expected)
