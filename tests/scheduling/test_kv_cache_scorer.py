from __future__ import annotations

import pytest

from igw.scheduling.plugins.kv_cache_scorer import KvCacheScorer
from tests.scheduling.helpers import ctx, ep


@pytest.mark.parametrize(
    ("kv", "expected"),
    [
        pytest.param([0.0, 0.25, 1.0], [1.0, 0.75, 0.0], id="absolute-one-minus-kv"),
        pytest.param([0.5, 0.5], [0.5, 0.5], id="not-normalised"),
        pytest.param([None, 0.1], [None, 0.9], id="missing-is-None"),
    ],
)
def test_kv_scores(kv: list[float | None], expected: list[float | None]) -> None:
    eps = [ep(f"e{i}", kv=k) for i, k in enumerate(kv)]
    assert KvCacheScorer().score(ctx(), eps) == pytest.approx(expected)
