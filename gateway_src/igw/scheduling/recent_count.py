"""How many events of one kind happened within a sliding window, in bounded memory.

The request path measures rates over a recent window on every request: flow control's dispatches
and arrivals (the shed ``Retry-After``, ``slotWait``), the scheduler's completions per endpoint (the
saturation ``Retry-After``, the flow gate's capacity). Kept as one timestamp per event, a record
held the window's events: at 10k requests/s, 100k entries for a 10 s window and 300k for the 30 s
drain window, each one allocated per request (until session s42). :class:`RecentCount` keeps counts
per slot of a hundredth of the window instead: at most 101 slots whatever the rate, O(1) per event.

The module does no I/O and reads no clock: every call takes ``now``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Final

SLOTS_PER_WINDOW: Final = 100
"""A window is counted in this many slots: the memory bound, and the precision (1 %) of the count
at the window's trailing edge."""


@dataclass(slots=True)
class _Slot:
    """The events of one slot of time: how many, when the first and the last of them happened, and
    when the slot ends."""

    end: float
    first: float
    last: float
    count: int = 1


class RecentCount:
    """How many events happened within the last ``window_s``, counted per slot of
    ``window_s / SLOTS_PER_WINDOW`` seconds rather than one timestamp per event.

    A slot leaves once its last event is older than the window (an event exactly one window old
    still counts), so at the window's trailing edge up to one slot's older events may still count:
    the rates built on it are exact to within 1 %. Not thread-safe: one event loop owns it."""

    __slots__ = ("_slot_s", "_slots", "count", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.count = 0
        """Events within the window (as of the last :meth:`add` or :meth:`forget`)."""
        self._slot_s = window_s / SLOTS_PER_WINDOW
        self._slots: deque[_Slot] = deque()

    def add(self, now: float) -> None:
        """Count one event at ``now``."""
        self.count += 1
        slots = self._slots
        if slots:
            slot = slots[-1]
            if now < slot.end:  # the same slot (or a clock that stepped back)
                slot.count += 1
                if now > slot.last:
                    slot.last = now
                elif now < slot.first:
                    slot.first = now
                return
        slot_s = self._slot_s
        slots.append(_Slot((math.floor(now / slot_s) + 1) * slot_s, now, now))
        self.forget(now)

    def forget(self, now: float) -> None:
        """Drop the slots whose events all happened before the window that ends at ``now``."""
        horizon = now - self.window_s
        slots = self._slots
        while slots and slots[0].last < horizon:
            self.count -= slots.popleft().count

    def oldest(self) -> float | None:
        """When the oldest event still counted happened; ``None`` when none is."""
        return self._slots[0].first if self._slots else None
