from __future__ import annotations

import tracemalloc

import pytest

from igw.scheduling.saturation import DrainTracker, has_capacity, retry_after_seconds
from tests.scheduling.helpers import ep


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"waiting": 5, "kv": 0.8}, True, id="at-thresholds"),
        pytest.param({"waiting": 6, "kv": 0.1}, False, id="queue-over"),
        pytest.param({"waiting": 0, "kv": 0.81}, False, id="kv-over"),
        pytest.param({"waiting": 0, "kv": None}, True, id="kv-missing-cannot-show-saturation"),
        pytest.param({"no_metrics": True}, False, id="no-metrics"),
    ],
)
def test_has_capacity(kwargs: dict[str, object], expected: bool) -> None:
    assert has_capacity(ep("e", **kwargs), queue_threshold=5, kv_threshold=0.8) is expected  # type: ignore[arg-type]


def test_drain_rate_window() -> None:
    d = DrainTracker(window_s=10.0)
    assert d.rate("a", 0.0) is None
    for t in range(10):
        d.record("a", float(t))
    assert d.rate("a", 9.0) == pytest.approx(10 / 9.0)
    assert d.rate("a", 30.0) is None  # all aged out


@pytest.mark.parametrize(
    ("rate_events", "waiting", "expected"),
    [
        pytest.param(0, 9, 30, id="unknown-drain-upper-bound"),
        pytest.param(100, 9, 1, id="fast-drain-lower-bound"),
        pytest.param(10, 7, 3, id="computed"),
        pytest.param(1, 60, 30, id="slow-drain-capped"),
    ],
)
def test_retry_after(rate_events: int, waiting: int, expected: int) -> None:
    d = DrainTracker(window_s=10.0)
    for i in range(rate_events):
        d.record("a", i * 10.0 / max(rate_events, 1))
    got = retry_after_seconds(
        [ep("a", waiting=waiting)], drain=d, now=10.0, queue_threshold=5, min_s=1, max_s=30
    )
    assert got == expected


def test_a_completion_exactly_one_window_old_still_counts() -> None:
    """The window keeps completions at its start (only older ones leave), whether trimmed by a new
    completion or by a rate read."""
    drain = DrainTracker(window_s=10.0)
    drain.record("a", 0.0)
    drain.record("a", 10.0)  # the first is exactly one window old: kept
    assert drain.rate("a", 10.0) == 2 / 10.0
    drain.record("a", 10.5)  # now it is older than the window: dropped
    assert drain.rate("a", 10.5) == 2 / 10.0


def test_thirty_seconds_of_completions_at_ten_thousand_a_second_keep_the_tracker_small() -> None:
    """Completions are counted per slot of time, not one timestamp each: 30 s at 10k completions/s
    held 300k timestamps (about 10 MB) until session s42. The rate stays the exact record's."""
    drain = DrainTracker(window_s=30.0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(300_000):
            drain.record("a", i / 10_000)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 128 * 1024, held
    assert drain.rate("a", 30.0) == pytest.approx(10_000, rel=0.01)
    assert drain.rate("a", 45.0) == pytest.approx(5_000, rel=0.01)  # the last 15 s of them
    assert drain.rate("a", 60.5) is None
