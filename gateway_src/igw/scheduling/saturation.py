"""Pool saturation and the ``Retry-After`` a 429 carries.

Rule (GIE v1.2 saturation detector): the pool is saturated when no *fresh* endpoint has spare
capacity, where spare capacity means ``waiting <= queue threshold`` and ``kv <= KV threshold``.
A signal the engine does not publish cannot show saturation, so it is skipped for that endpoint
(the missing signal is reported loudly elsewhere, never turned into a silent 0 or 1).

Where GIE sends no ``Retry-After`` at all, we compute one from the *observed drain rate*: requests
completed per second per endpoint over a sliding window (fed by ``on_complete``). The least-loaded
endpoint needs ``excess + 1`` completions to drop under the queue threshold; at its drain rate that
takes ``(excess + 1) / rate`` seconds. The result is rounded up to whole seconds and bounded; with no
completions observed yet it is the upper bound (we have no evidence the pool drains quickly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from igw.scheduling.recent_count import RecentCount
from igw.scheduling.types import EndpointKey, EndpointView


def has_capacity(endpoint: EndpointView, *, queue_threshold: int, kv_threshold: float) -> bool:
    m = endpoint.metrics
    if m is None:
        return False
    if m.waiting is not None and m.waiting > queue_threshold:
        return False
    return not (m.kv_usage is not None and m.kv_usage > kv_threshold)


class DrainTracker:
    """Completions per endpoint within a sliding window, counted per slot of time
    (:class:`~igw.scheduling.recent_count.RecentCount`): bounded memory per endpoint whatever the
    completion rate (until session s42 a timestamp per completion, 300k of them over the default
    30 s window at 10k completions/s)."""

    def __init__(self, *, window_s: float) -> None:
        self.window_s = window_s
        self._done: dict[EndpointKey, RecentCount] = {}
        self._first: dict[EndpointKey, float] = {}

    def record(self, endpoint: EndpointKey, now: float) -> None:
        done = self._done.get(endpoint)
        if done is None:
            done = self._done[endpoint] = RecentCount(self.window_s)
            self._first[endpoint] = now
        done.add(now)

    def rate(self, endpoint: EndpointKey, now: float) -> float | None:
        """Completions per second, or ``None`` when nothing completed within the window."""
        done = self._done.get(endpoint)
        if done is None:
            return None
        done.forget(now)
        if not done.count:
            return None
        span = min(self.window_s, max(now - self._first[endpoint], 1.0))
        return done.count / span

    def forget(self, endpoint: EndpointKey) -> None:
        self._done.pop(endpoint, None)
        self._first.pop(endpoint, None)


def retry_after_seconds(
    endpoints: Sequence[EndpointView],
    *,
    drain: DrainTracker,
    now: float,
    queue_threshold: int,
    min_s: int,
    max_s: int,
) -> int:
    """Whole seconds until the least-loaded endpoint is expected to regain capacity, bounded."""
    best: float | None = None
    for e in endpoints:
        rate = drain.rate(e.key, now)
        if rate is None or rate <= 0:
            continue
        waiting = e.metrics.waiting if e.metrics is not None and e.metrics.waiting is not None else 0
        excess = max(0, waiting - queue_threshold) + 1
        eta = excess / rate
        if best is None or eta < best:
            best = eta
    if best is None:
        return max_s
    return max(min_s, min(max_s, math.ceil(best)))
