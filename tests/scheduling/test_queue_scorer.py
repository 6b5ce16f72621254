from __future__ import annotations

import pytest

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.plugins import queue_scorer
from tests.scheduling.helpers import ctx, ep


@pytest.mark.parametrize(
    ("waiting", "expected"),
    [
        pytest.param([0, 5, 10], [1.0, 0.5, 0.0], id="min-max"),
        pytest.param([3, 3, 3], [1.0, 1.0, 1.0], id="all-equal-is-neutral-1"),
        pytest.param([7], [1.0], id="single"),
        pytest.param([None, 2, 4], [None, 1.0, 0.0], id="missing-signal-is-None-not-zero"),
        pytest.param([None, None], [None, None], id="nobody-has-signal"),
    ],
)
def test_queue_scores(waiting: list[int | None], expected: list[float | None]) -> None:
    eps = [ep(f"e{i}", waiting=w) for i, w in enumerate(waiting)]
    assert queue_scorer.QueueScorer().score(ctx(), eps) == pytest.approx(expected)


def test_queue_factory_rejects_unknown_parameter() -> None:
    with pytest.raises(SchedulerConfigError, match=r"plugins\[0\]\.parameters: unknown field 'threshold'"):
        queue_scorer.factory("q", {"threshold": 3}, "plugins[0].parameters")
