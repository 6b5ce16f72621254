"""Noise pooling of measured TTFTs for ``predicted-ttft-scorer``, kept up to date between picks.

What it computes (the scorer's docstring has the why): every candidate's mean TTFT, except that
*settled* endpoints (a full EWMA window of samples) are sorted by their log-space mean and grouped
while the next one is at most ``noise_z`` combined standard errors above the group's first member,
and every member of a group takes the group's mean TTFT. Unmeasured candidates take the mean of the
measured ones (1.0 when none is measured); unsettled ones keep their own mean.

How it stays cheap: sorting every settled endpoint on every pick would cost more than all the other
scorers together on a large pool, yet between two picks only the endpoints that completed a request
change their measurements. So the sorted list (ordered by log mean, then candidate position, which is
what a stable sort of the candidates yields) is kept for as long as the candidate list stays the
same, and each endpoint the two EWMAs report as changed is moved by binary search. A pick then walks
the sorted list once to find the groups: each group's end is located by a chain of ``map`` calls that
runs in C and stops at the first endpoint outside the group. Another candidate list rebuilds it.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections import deque
from itertools import compress, count, repeat

from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.types import EndpointKey

C_LOOP_ABOVE = 32
"""Group size from which its members are assigned by a loop in C (its set-up costs more below)."""


class TtftPool:
    """Pooled TTFT per candidate for one scorer's two EWMAs (both built with ``track_changes``)."""

    def __init__(self, ttft: EndpointEwma, log_ttft: EndpointEwma, *, noise_z: float) -> None:
        if ttft.changed is None or log_ttft.changed is None:
            raise ValueError("TtftPool needs EWMAs that track their changes (track_changes=True)")
        self.ttft = ttft
        self.log_ttft = log_ttft
        self.noise_z = noise_z
        self._keys: list[EndpointKey] | None = None
        """The candidate keys the lists below describe; ``None``: nothing kept."""
        self._index: dict[EndpointKey, int] = {}
        self._measured: list[float | None] = []
        """Mean TTFT per candidate position (``None``: not measured)."""
        self._unmeasured = 0
        """How many ``None`` ``_measured`` holds (kept current, so a pick need not look)."""
        self._sorted_as: list[float | None] = []
        """Per candidate position: the log mean it is sorted under, ``None`` when it is not settled."""
        # The settled candidates, ascending by (log mean, position); the lists are parallel.
        self._pairs: list[tuple[float, int]] = []
        self._positions: list[int] = []
        self._logs: list[float] = []
        self._errors: list[float] = []
        self._ttfts: list[float] = []

    def pooled(self, keys: list[EndpointKey]) -> list[float]:
        """The pooled TTFT of each of ``keys`` (candidate order)."""
        changed = self._take_changes()
        if self._keys is None or self._keys != keys:
            self._rebuild(keys)
        else:
            index = self._index
            for key in changed:
                position = index.get(key)
                if position is not None:
                    self._refresh(position, key)
        out = self._base()
        if self.noise_z > 0 and self._logs:
            self._pool_groups(out)
        if len(self._index) != len(keys):  # a key listed twice: positions are ambiguous, keep nothing
            self._keys = None
        return out

    def _take_changes(self) -> set[EndpointKey]:
        changed: set[EndpointKey] = set()
        for ewma in (self.ttft, self.log_ttft):
            if ewma.changed:
                changed |= ewma.changed
                ewma.changed.clear()
        return changed

    def _rebuild(self, keys: list[EndpointKey]) -> None:
        self._keys = list(keys)
        self._index = {k: i for i, k in enumerate(keys)}
        get = self.ttft.values.get
        self._measured = [get(k) for k in keys]
        self._unmeasured = sum(1 for t in self._measured if t is None)
        self._sorted_as = [None] * len(keys)
        for lst in (self._pairs, self._positions, self._logs, self._errors, self._ttfts):
            lst.clear()
        logs = self.log_ttft
        settled = logs.settled_count
        counts = logs.counts.get
        measured = self._measured
        eligible = [i for i, k in enumerate(keys) if counts(k, 0) >= settled and measured[i] is not None]
        log_of = logs.values.get
        pairs = sorted((log_of(keys[i]) or 0.0, i) for i in eligible)
        error_of = logs.errors.get
        for log, i in pairs:
            self._sorted_as[i] = log
            self._pairs.append((log, i))
            self._positions.append(i)
            self._logs.append(log)
            self._errors.append(error_of(keys[i]) or 0.0)
            self._ttfts.append(measured[i])  # type: ignore[arg-type]  # eligible ones are measured

    def _refresh(self, position: int, key: EndpointKey) -> None:
        """Re-read one candidate's measurements and move it in the sorted lists."""
        old = self._sorted_as[position]
        if old is not None:
            at = bisect_left(self._pairs, (old, position))
            for lst in (self._pairs, self._positions, self._logs, self._errors, self._ttfts):
                del lst[at]
            self._sorted_as[position] = None
        ttft = self.ttft.values.get(key)
        self._unmeasured += (ttft is None) - (self._measured[position] is None)
        self._measured[position] = ttft
        logs = self.log_ttft
        if ttft is None or logs.counts.get(key, 0) < logs.settled_count:
            return
        log = logs.values.get(key) or 0.0
        at = bisect_left(self._pairs, (log, position))
        self._pairs.insert(at, (log, position))
        self._positions.insert(at, position)
        self._logs.insert(at, log)
        self._errors.insert(at, logs.errors.get(key) or 0.0)
        self._ttfts.insert(at, ttft)
        self._sorted_as[position] = log

    def _base(self) -> list[float]:
        """Measured means, the mean of the measured ones for the others (1.0 when none is)."""
        measured = self._measured
        if not self._unmeasured:
            return list(measured)  # type: ignore[arg-type]  # no None: counted
        present = [v for v in measured if v is not None]
        fallback = sum(present) / len(present) if present else 1.0
        return [fallback if t is None else t for t in measured]

    def _pool_groups(self, out: list[float]) -> None:
        """Give the members of each group their group's mean TTFT (summed in sorted order)."""
        logs, errors, ttfts, positions = self._logs, self._errors, self._ttfts, self._positions
        z, n = self.noise_z, len(logs)
        log_iter, error_iter = iter(logs), iter(errors)
        next(log_iter), next(error_iter)  # the first group starts at sorted position 0
        start = 0
        while True:
            # A group ends at the first later endpoint more than ``z`` combined standard errors above
            # the group's *first* (fastest) member, not the previous one, so a chain of small steps
            # cannot join an H100 and an A10G. The iterators are shared, so the search for the next
            # group resumes right after this group's end: each endpoint is compared once.
            first_log, first_error = logs[start], errors[start]
            above = map(operator.sub, log_iter, repeat(first_log))
            allowed = map(operator.mul, repeat(z), map(math.hypot, error_iter, repeat(first_error)))
            end = next(compress(count(start + 1), map(operator.gt, above, allowed)), n)
            size = end - start
            if size > 1:
                mean = sum(ttfts[start:end]) / size
                if size > C_LOOP_ABOVE:
                    # ``out[j] = mean`` for every member, the loop run in C (a group may be most of
                    # a large pool); a zero-length deque drains the iterator, keeping nothing.
                    deque(map(out.__setitem__, positions[start:end], repeat(mean)), maxlen=0)
                else:
                    for j in positions[start:end]:
                        out[j] = mean
            if end >= n:
                return
            start = end
