from __future__ import annotations

import pytest

from igw.scheduling.plugins.endpoint_speed_scorer import EndpointSpeedScorer
from igw.scheduling.types import RequestOutcome
from tests.scheduling.helpers import ctx, ep


def outcome(key: str, itl: float | None, *, ok: bool = True, out: int = 10) -> RequestOutcome:
    return RequestOutcome(request_id="r", endpoint=key, ok=ok, itl_s=itl, output_tokens=out)


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        pytest.param([], [None, None], id="no-measurement-yet"),
        pytest.param([("e1", 0.02), ("e2", 0.04)], [1.0, 0.5], id="twice-as-slow"),
        pytest.param([("e1", 0.02)], [1.0, None], id="unmeasured-left-to-imputation"),
    ],
)
def test_speed_scores(outcomes: list[tuple[str, float]], expected: list[float | None]) -> None:
    scorer = EndpointSpeedScorer()
    for key, itl in outcomes:
        scorer.on_complete(outcome(key, itl), now=0.0)
    assert scorer.score(ctx(), [ep("e1"), ep("e2")]) == pytest.approx(expected)


def test_ewma_and_ignored_outcomes() -> None:
    scorer = EndpointSpeedScorer(alpha=0.5)
    scorer.on_complete(outcome("e1", 0.02), now=0.0)
    scorer.on_complete(outcome("e1", 0.04), now=1.0)
    scorer.on_complete(outcome("e1", 9.0, ok=False), now=2.0)
    scorer.on_complete(outcome("e1", 9.0, out=1), now=3.0)
    assert scorer.itl["e1"] == pytest.approx(0.03)
    scorer.on_endpoints_removed(["e1"])
    assert "e1" not in scorer.itl
