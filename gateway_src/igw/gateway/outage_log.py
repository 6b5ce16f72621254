"""When to log a dependency's outage and its end: at once the first time, counted while it flaps.

A poller logs "down" (an ERROR) at a dependency's first failure and "up" (a WARNING) at its first
answer after. A dependency that alternates failing and answering - a flapping Redis - wrote that pair
every poll (one a second for the heartbeat store), burying the rest of the log. :class:`OutageLog`
keeps the first "down" and its "up" at once, then, for :data:`QUIET_S` after a logged "up", counts
each further outage that ends within :data:`FLAP_S` (a flap) instead of logging it. The next line
logged carries the count: an outage that outlasts :data:`FLAP_S` (logged then, saying how long it has
lasted), an outage of a new kind, or - when the quiet window ends with the dependency up - a summary.
The very first outage, and any after a quiet window, is logged at once. Callers keep their metrics
counting every flap: only the lines are held.

Used by :mod:`igw.gateway.heartbeat` (the gateway's publisher) and
:mod:`igw.global_router.fleet` (the router's reader). Not thread-safe: each is driven by one ticker.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal

__all__ = ["FLAP_S", "QUIET_S", "LogLine", "OutageLog"]

QUIET_S: Final = 60.0
"""After a logged "up", further flaps are counted, not logged, for this long."""

FLAP_S: Final = 10.0
"""An outage inside the quiet window shorter than this is a flap; one that lasts longer is logged."""


@dataclasses.dataclass(frozen=True, slots=True)
class LogLine:
    """One line to log: ``kind`` says which, ``note`` (empty, or `` (…)`` to append) what was held."""

    kind: Literal["down", "up", "summary"]
    flaps: int
    """Outages (down and up again) since the last line that were not logged."""
    note: str


class OutageLog:
    """The rule for one dependency; :meth:`down` at each failed poll, :meth:`up` at each good one."""

    def __init__(self, *, quiet_s: float = QUIET_S, flap_s: float = FLAP_S) -> None:
        self._quiet_s = quiet_s
        self._flap_s = flap_s
        self._down_since: float | None = None
        """When the current outage began; ``None`` while the dependency answers."""
        self._down_logged = False
        self._quiet_until = float("-inf")
        """Until when a new outage is held (counted if it ends within :attr:`_flap_s`)."""
        self._flaps = 0
        self._counting_since = 0.0
        """When the first of :attr:`_flaps` began."""

    @property
    def down_now(self) -> bool:
        """Whether the last call was :meth:`down`."""
        return self._down_since is not None

    def down(self, now: float, *, news: bool = False) -> LogLine | None:
        """A failed poll at ``now``: the line to log, or ``None``. ``news``: this failure is of a
        kind not logged last (a refusal of the caller's credentials after an outage; an outage after
        such a refusal), logged at once whether it begins an outage or continues one: an operator's
        mistake is not a flap (until session s44 a refusal beginning an outage inside the quiet
        window was held like one)."""
        if self._down_since is None:
            self._down_since = now
            self._down_logged = False
            if news or now >= self._quiet_until:
                return self._line("down", now, late=False)
            return None
        if news or (not self._down_logged and now - self._down_since >= self._flap_s):
            return self._line("down", now, late=not self._down_logged)
        return None

    def up(self, now: float) -> LogLine | None:
        """A good poll at ``now``: the line to log, or ``None``."""
        if self._down_since is not None:
            since, logged = self._down_since, self._down_logged
            self._down_since = None
            self._down_logged = False
            if logged:
                line = self._line("up", now, late=False)
                self._quiet_until = now + self._quiet_s
                return line
            if not self._flaps:
                self._counting_since = since
            self._flaps += 1
        if self._flaps and now >= self._quiet_until:
            line = self._line("summary", now, late=False)
            self._quiet_until = now + self._quiet_s  # a store still flapping: one summary a window
            return line
        return None

    def _line(self, kind: Literal["down", "up", "summary"], now: float, *, late: bool) -> LogLine:
        parts = []
        if late and self._down_since is not None:
            parts.append(f"for {now - self._down_since:.0f} s")
        flaps = self._flaps
        if flaps:
            plural = "" if flaps == 1 else "s"
            parts.append(f"{flaps} flap{plural} in the last {now - self._counting_since:.0f} s not logged")
        if kind == "down":
            self._down_logged = True
        self._flaps = 0
        return LogLine(kind, flaps, f" ({'; '.join(parts)})" if parts else "")
