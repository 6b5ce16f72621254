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
from collections import deque
from collections.abc import Sequence

from igw.scheduling.types import EndpointKey, EndpointView


def has_capacity(endpoint: EndpointView, *, queue_threshold: int, kv_threshold: float) -> bool:
    m = endpoint.metrics
    if m is None:
        return False
    if m.waiting is not None and m.waiting > queue_threshold:
        return False
    return not (m.kv_usage is not None and m.kv_usage > kv_threshold)


class DrainTracker:
    """Completion timestamps per endpoint within a sliding window."""

    def __init__(self, *, window_s: float) -> None:
        self.window_s = window_s
        self._done: dict[EndpointKey, deque[float]] = {}
        self._first: dict[EndpointKey, float] = {}

    def record(self, endpoint: EndpointKey, now: float) -> None:
        q = self._done.get(endpoint)
        if q is None:
            q = self._done[endpoint] = deque()
            self._first[endpoint] = now
        q.append(now)
        # _trim, written out (once per outcome): the same comparison.
        horizon = now - self.window_s
        while q and q[0] < horizon:
            q.popleft()

    def _trim(self, q: deque[float], now: float) -> None:
        horizon = now - self.window_s
        while q and q[0] < horizon:
            q.popleft()

    def rate(self, endpoint: EndpointKey, now: float) -> float | None:
        """Completions per second, or ``None`` when nothing completed within the window."""
        q = self._done.get(endpoint)
        if not q:
            return None
        self._trim(q, now)
        if not q:
            return None
        span = min(self.window_s, max(now - self._first[endpoint], 1.0))
        return len(q) / span

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
