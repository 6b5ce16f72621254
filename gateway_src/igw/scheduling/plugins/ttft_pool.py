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
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import compress, count, islice, repeat

from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.types import EndpointKey

C_LOOP_ABOVE = 32
"""Group size from which its members are assigned by a loop in C, and the length of a walk from
which groups are found by one (below it, setting up the C iterators costs more than they save)."""


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
        self._unmeasured: list[int] = []
        """The candidate positions whose ``_measured`` is ``None`` (kept current, so neither a pick
        nor a catch-up looks through every candidate for them)."""
        self._sorted_as: list[float | None] = []
        """Per candidate position: the log mean it is sorted under, ``None`` when it is not settled."""
        # The settled candidates, ascending by (log mean, position); the lists are parallel.
        self._pairs: list[tuple[float, int]] = []
        self._positions: list[int] = []
        self._logs: list[float] = []
        self._errors: list[float] = []
        self._ttfts: list[float] = []
        self._starts: list[int] = []
        """Sorted position of each group's first member, as of the last pick."""
        self._out: list[float] = []
        """The pooled TTFT per candidate position as of the last pick (updated, not rebuilt)."""

    def pooled(self, keys: list[EndpointKey]) -> list[float]:
        """The pooled TTFT of each of ``keys`` (candidate order)."""
        changed = self._take_changes()
        if self._keys is None or self._keys != keys:
            self._rebuild(keys)
            out = self._out = self._base()
            self._starts = self._walk(out, 0)[0] if self.noise_z > 0 else []
        elif changed:
            self._apply(changed)
        if len(self._index) != len(keys):  # a key listed twice: positions are ambiguous, keep nothing
            self._keys = None
        return list(self._out)

    def catch_up(self) -> None:
        """Apply the EWMAs' changes now, to the candidate list of the last pick, rather than in the
        next :meth:`pooled` (called after a completion, off the next pick's path).

        Why: the scorer learns about one outcome between two picks at the gateway's rates, and
        moving that endpoint in the sorted lists and regrouping is work the routed request need
        not wait for (docs/gateway.md has the measured split). The result is the same:
        :meth:`pooled` applies whatever changes remain (none, usually) with the same incremental
        steps, and a different candidate list rebuilds everything as before. Nothing kept (no
        pick yet, or a key listed twice): nothing to do."""
        if self._keys is None:
            return
        ttft_changed, log_changed = self.ttft.changed, self.log_ttft.changed
        assert ttft_changed is not None  # both checked in __init__
        assert log_changed is not None
        if len(ttft_changed) == 1 and ttft_changed == log_changed:
            # The usual case, one outcome since the last pick or catch-up (both EWMAs took its
            # sample): :meth:`_apply` for one key, without the set union and the loop over it.
            key = ttft_changed.pop()
            log_changed.clear()
            position = self._index.get(key)
            if position is not None:
                self._apply_one(position, key)
            return
        changed = self._take_changes()
        if changed:
            self._apply(changed)

    def _apply_one(self, position: int, key: EndpointKey) -> None:
        """:meth:`_apply` for the one changed endpoint ``key``, a candidate at ``position``: the
        same steps in the same order (so the same floats)."""
        move = self._refresh(position, key)
        out = self._out
        ttft = self._measured[position]
        if ttft is not None:
            out[position] = ttft
        if self._unmeasured:
            fallback = self._fallback()
            for i in self._unmeasured:
                out[i] = fallback
        if self.noise_z > 0 and move != (None, None):
            self._regroup(out, [move])

    def _apply(self, changed: set[EndpointKey]) -> None:
        """Move the ``changed`` endpoints (candidates of the kept list or not) to their new places
        and update the pooled values (the candidate list unchanged since the last pick)."""
        out = self._out
        measured = self._measured
        index = self._index
        moves: list[tuple[int | None, int | None]] = []
        for key in changed:
            position = index.get(key)
            if position is not None:
                move = self._refresh(position, key)
                if move != (None, None):
                    moves.append(move)
                ttft = measured[position]
                if ttft is not None:
                    out[position] = ttft  # its own mean, unless a group below says otherwise
        if self._unmeasured:  # the fallback is the mean of the measured ones
            fallback = self._fallback()
            for i in self._unmeasured:
                out[i] = fallback
        if self.noise_z > 0 and moves:
            self._regroup(out, moves)

    def forget(self) -> None:
        """Endpoints left the pool (the EWMAs forgot them, and their changes): nothing kept, the
        next :meth:`pooled` rebuilds (a removal changes the candidate list, which does so anyway,
        except for an endpoint that left and came back between two picks)."""
        self._keys = None

    def _take_changes(self) -> set[EndpointKey]:
        if not self.ttft.changed and not self.log_ttft.changed:
            return set()  # the usual case at a pick: ``catch_up`` took them after the outcome
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
        self._unmeasured = [i for i, t in enumerate(self._measured) if t is None]
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

    def _refresh(self, position: int, key: EndpointKey) -> tuple[int | None, int | None]:
        """Re-read one candidate's measurements and move it in the sorted lists; returns where it
        was deleted from and where it was inserted (``None``: not in the list before / after).

        A new mean that keeps its place between its neighbours (often, as one sample moves a mean
        by ``alpha`` of its difference) is written over the old one instead: what the deletion and
        insertion would leave, without moving the lists' tails twice."""
        old = self._sorted_as[position]
        deleted = None
        if old is not None:
            pairs = self._pairs
            deleted = bisect_left(pairs, (old, position))
            logs = self.log_ttft
            ttft = self.ttft.values.get(key)
            if ttft is not None and logs.counts.get(key, 0) >= logs.settled_count:
                log = logs.values.get(key) or 0.0
                pair = (log, position)
                if (deleted == 0 or pairs[deleted - 1] < pair) and (
                    deleted + 1 == len(pairs) or pair < pairs[deleted + 1]
                ):  # in the sorted lists already: still measured, so ``_unmeasured`` stays
                    pairs[deleted] = pair
                    self._logs[deleted] = log
                    self._errors[deleted] = logs.errors.get(key) or 0.0
                    self._ttfts[deleted] = ttft
                    self._measured[position] = ttft
                    self._sorted_as[position] = log
                    return deleted, deleted
            # The parallel lists, one statement each (no tuple of lists and loop per change).
            del self._pairs[deleted]
            del self._positions[deleted]
            del self._logs[deleted]
            del self._errors[deleted]
            del self._ttfts[deleted]
            self._sorted_as[position] = None
        ttft = self.ttft.values.get(key)
        if (ttft is None) != (self._measured[position] is None):
            if ttft is None:
                self._unmeasured.append(position)
            else:
                self._unmeasured.remove(position)
        self._measured[position] = ttft
        logs = self.log_ttft
        if ttft is None or logs.counts.get(key, 0) < logs.settled_count:
            return deleted, None
        log = logs.values.get(key) or 0.0
        at = bisect_left(self._pairs, (log, position))
        self._pairs.insert(at, (log, position))
        self._positions.insert(at, position)
        self._logs.insert(at, log)
        self._errors.insert(at, logs.errors.get(key) or 0.0)
        self._ttfts.insert(at, ttft)
        self._sorted_as[position] = log
        return deleted, at

    def _fallback(self) -> float:
        """What unmeasured candidates take: the mean of the measured ones (1.0 when none is)."""
        present = [v for v in self._measured if v is not None]
        return sum(present) / len(present) if present else 1.0

    def _base(self) -> list[float]:
        """Measured means, the fallback for the others."""
        measured = self._measured
        if not self._unmeasured:
            return list(measured)  # type: ignore[arg-type]  # no None: counted
        fallback = self._fallback()
        return [fallback if t is None else t for t in measured]

    def _regroup(self, out: list[float], moves: list[tuple[int | None, int | None]]) -> None:
        """Walk again only the groups a change can have altered.

        With one endpoint moved in the sorted lists (the usual case: one completion since the last
        pick), the groups that ended before the first touched sorted position are unchanged (a
        group is decided by its members and the first endpoint after it), and past the last
        touched position every endpoint sits where it sat before, shifted by one for a plain
        deletion or insertion: once the walk reaches a group start that was one before (shifted
        alike), every group from there on is the same as before. More moves: the whole walk."""
        if len(moves) != 1:
            self._starts = self._walk(out, 0)[0]
            return
        deleted, inserted = moves[0]
        if deleted is not None and inserted is not None:
            lo, hi, delta = min(deleted, inserted), max(deleted, inserted), 0
        elif deleted is not None:
            lo = hi = deleted
            delta = -1
        else:
            assert inserted is not None  # moves hold no (None, None)
            lo = hi = inserted
            delta = 1
        starts = self._starts
        first = max(0, bisect_right(starts, lo - 1) - 1) if lo > 0 else 0
        begin = starts[first] if first < len(starts) else 0
        head = starts[:first] if begin else []
        walked, tail = self._walk(out, begin, hi=hi, delta=delta, old_starts=starts)
        self._starts = head + walked + tail

    def _walk(
        self,
        out: list[float],
        begin: int,
        *,
        hi: int | None = None,
        delta: int = 0,
        old_starts: list[int] | None = None,
    ) -> tuple[list[int], list[int]]:
        """Give the members of each group from sorted position ``begin`` (a group start) their
        group's mean TTFT (summed in sorted order; a lone member its own).

        Returns the group starts walked and, when the walk stopped early, the remaining starts: it
        stops at a group start past ``hi`` that ``old_starts`` holds ``delta`` positions earlier
        (the groups from there on are those of before, see :meth:`_regroup`)."""
        logs, errors, ttfts, positions = self._logs, self._errors, self._ttfts, self._positions
        z, n = self.noise_z, len(logs)
        walked: list[int] = []
        if begin >= n:
            return walked, []
        # The first group's own first member is not compared with itself.
        log_iter, error_iter = islice(logs, begin + 1, None), islice(errors, begin + 1, None)
        few = n - begin <= C_LOOP_ABOVE  # a short walk: a plain loop costs less than setting up maps
        start = begin
        hypot = math.hypot
        while True:
            walked.append(start)
            # A group ends at the first later endpoint more than ``z`` combined standard errors above
            # the group's *first* (fastest) member, not the previous one, so a chain of small steps
            # cannot join an H100 and an A10G. The iterators are shared, so the search for the next
            # group resumes right after this group's end: each endpoint is compared once.
            first_log, first_error = logs[start], errors[start]
            if few:  # the same comparison, written out
                end = n
                for j in range(start + 1, n):
                    if logs[j] - first_log > z * hypot(errors[j], first_error):
                        end = j
                        break
            else:
                above = map(operator.sub, log_iter, repeat(first_log))
                allowed = map(operator.mul, repeat(z), map(hypot, error_iter, repeat(first_error)))
                end = next(compress(count(start + 1), map(operator.gt, above, allowed)), n)
            size = end - start
            if size == 1:
                out[positions[start]] = ttfts[start]
            else:
                mean = sum(ttfts[start:end]) / size
                if size > C_LOOP_ABOVE:
                    # ``out[j] = mean`` for every member, the loop run in C (a group may be most of
                    # a large pool); a zero-length deque drains the iterator, keeping nothing.
                    deque(map(out.__setitem__, positions[start:end], repeat(mean)), maxlen=0)
                else:
                    for j in positions[start:end]:
                        out[j] = mean
            if end >= n:
                return walked, []
            start = end
            if hi is not None and start > hi and old_starts is not None:
                at = bisect_left(old_starts, start - delta)
                if at < len(old_starts) and old_starts[at] == start - delta:
                    return walked, [s + delta for s in old_starts[at:]]
