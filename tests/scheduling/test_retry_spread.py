"""The spread of ``Retry-After`` (:mod:`igw.scheduling.retry_spread`): a burst of refused clients
told the same computed wait must not all come back in the same second (session s43)."""

from __future__ import annotations

import random

import pytest

from igw.scheduling.retry_spread import spread_retry_after


@pytest.mark.parametrize(("wait", "top"), [(1, 2), (3, 4), (20, 22), (108, 118), (1000, 1100)])
def test_a_wait_is_spread_over_a_tenth_more_and_never_below_it(wait: int, top: int) -> None:
    rng = random.Random(43)
    drawn = [spread_retry_after(wait, rng=rng) for _ in range(2000)]
    assert min(drawn) == wait
    assert max(drawn) == top
    assert len(set(drawn)) == top - wait + 1  # every second between is drawn: spread, not two values


@pytest.mark.parametrize(
    ("wait", "max_s", "allowed"), [(9, 9, {9}), (8, 9, {8, 9}), (12, 9, {12}), (1, 1, {1})]
)
def test_the_configured_upper_bound_is_never_passed_by_the_spread(
    wait: int, max_s: int, allowed: set[int]
) -> None:
    """``retryAfter.maxSeconds``: a wait at the bound is sent as it is, one below it is spread up to
    it only, and one above it (a caller's bound already applied) is never lowered."""
    rng = random.Random(43)
    assert {spread_retry_after(wait, rng=rng, max_s=max_s) for _ in range(500)} == allowed
