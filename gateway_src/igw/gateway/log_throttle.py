"""A logging filter that keeps a repeated warning to one line per interval, counting the rest.

A failure that repeats per request or per retry (a trace collector unreachable, a pod answering every
request with an oversized error) would otherwise write one line each time: a flood that buries the
rest of the log and costs the process a write per request. Used by :mod:`igw.gateway.trace_export`
(the exporter's loggers) and :mod:`igw.gateway.upstream` (its per-answer warnings).

Repeats held in a window are reported when it ends, not only with the next line: the last one held
is logged then with the count of the others (:meth:`RepeatThrottle.flush`), by one timer per throttle
(armed for the earliest window that holds a repeat, never one per kind), and at the process's exit.
Until session s45 a failure that stopped within its window - the collector back, the pod replaced -
had its held repeats reported never: no next line came to carry the count.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final, Protocol

__all__ = ["MAX_KEYS", "REPEAT_INTERVAL_S", "RepeatThrottle", "Timer", "daemon_timer", "live_throttles"]

REPEAT_INTERVAL_S: Final = 60.0
"""At most one line per message per minute while a failure lasts."""

MAX_KEYS: Final = 4096
"""The most kinds of record one throttle remembers. Records keyed by their arguments (a pod's
address) are as many as the pods that sent them; past the bound the oldest kind is forgotten (its
held count with it), so a fleet whose pods come and go does not grow the map without end."""


_FLUSHED: Final = "_igw_throttle_flushed"
"""The attribute a record re-logged by :meth:`RepeatThrottle.flush` carries: the throttle that let
it through already (its filter passes it)."""


class Timer(Protocol):
    """What a throttle's timer gives back: something to cancel (:class:`threading.Timer`)."""

    def cancel(self) -> None: ...


def daemon_timer(delay_s: float, fire: Callable[[], None]) -> Timer:
    """``fire`` on a daemon thread after ``delay_s`` (the process's exit does not wait for it)."""
    timer = threading.Timer(delay_s, fire)
    timer.daemon = True
    timer.name = "igw-log-throttle"
    timer.start()
    return timer


class RepeatThrottle(logging.Filter):
    """Passes a message's first record, then at most one per ``interval_s``, noting how many were held.

    Records are alike when they share logger, level and message template (``record.msg``, before
    its arguments are merged): a retry's changing delay or status code does not make it new.
    ``keyed_args``: the first arguments that make records differ too (a pod's address and a reason:
    one pod's flood then hides neither another pod's first line nor its own other failures), at most
    ``max_keys`` kinds remembered (:data:`MAX_KEYS`).

    ``timer(delay_s, fire)``: how the end of a window that held a repeat is waited for (the module
    docstring); by default :func:`daemon_timer` when ``clock`` is :func:`time.monotonic`, none with
    another clock (a test's, whose owner calls :meth:`flush` itself).
    """

    def __init__(
        self,
        interval_s: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        *,
        keyed_args: int = 0,
        max_keys: int = MAX_KEYS,
        timer: Callable[[float, Callable[[], None]], Timer] | None = None,
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._keyed_args = keyed_args
        self._max_keys = max_keys
        self._timer = timer if timer is not None or clock is not time.monotonic else daemon_timer
        self._lock = threading.Lock()
        self._seen: dict[tuple[object, ...], tuple[float, int]] = {}
        """(logger, level, template, keyed arguments...) -> (when one last passed, how many were
        held since); in the order each kind was first seen, the oldest first."""
        self._held: dict[tuple[object, ...], logging.LogRecord] = {}
        """The last record held of each kind holding any: what :meth:`flush` logs."""
        self._armed: Timer | None = None
        """The timer armed for the earliest window end that holds a repeat, if any."""
        self._armed_for = float("inf")
        """When (on ``clock``) :attr:`_armed` fires."""
        _THROTTLES.add(self)

    def _key(self, record: logging.LogRecord) -> tuple[object, ...]:
        key: tuple[object, ...] = (record.name, record.levelno, str(record.msg))
        if self._keyed_args and isinstance(record.args, tuple):
            key += tuple(str(arg) for arg in record.args[: self._keyed_args])
        return key

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _FLUSHED, None) is self:
            return True  # re-logged by flush(): counted there
        key = self._key(record)
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self._interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                self._held[key] = record
                self._arm(last[0] + self._interval_s, now)
                return False
            if last is None and len(self._seen) >= self._max_keys:
                oldest = next(iter(self._seen))
                del self._seen[oldest]  # the oldest kind
                self._held.pop(oldest, None)
            self._seen[key] = (now, 0)
            self._held.pop(key, None)
        if last is not None and last[1]:
            record.msg = f"{record.msg} [{last[1]} like this in the last {now - last[0]:.0f} s not logged]"
        return True

    def flush(self, *, everything: bool = False) -> int:
        """Log the last repeat held of each kind whose window has ended (``everything``: of every
        kind, at shutdown), with the count of the others held (``[2 more like this in the last 60 s
        not logged]``); its window starts again then, as if it had passed. Returns how many were
        logged. Called by the timer, at the process's exit, and by the owner of a throttle with a
        clock of its own."""
        now = self._clock()
        due: list[tuple[logging.LogRecord, int, float]] = []
        with self._lock:
            for key, record in list(self._held.items()):
                since, held = self._seen[key]
                if everything or now - since >= self._interval_s:
                    due.append((record, held, now - since))
                    self._seen[key] = (now, 0)
                    del self._held[key]
        for record, held, span in due:
            if held > 1:
                record.msg = f"{record.msg} [{held - 1} more like this in the last {span:.0f} s not logged]"
            setattr(record, _FLUSHED, self)
            logging.getLogger(record.name).handle(record)
        return len(due)

    def _arm(self, ends: float, now: float) -> None:
        """Have the timer fire at ``ends`` unless it fires earlier already (under the lock)."""
        if self._timer is None or ends >= self._armed_for:
            return
        if self._armed is not None:
            self._armed.cancel()
        self._armed = self._timer(max(0.0, ends - now), self._fire)
        self._armed_for = ends

    def _fire(self) -> None:
        """The timer's end: flush what is due, and arm again for the next window holding a repeat."""
        with self._lock:
            self._armed, self._armed_for = None, float("inf")
        self.flush()
        with self._lock:
            if self._held:
                ends = min(self._seen[key][0] for key in self._held) + self._interval_s
                self._arm(ends, self._clock())

    def forget(self) -> None:
        """Cancel the timer, drop the repeats held and the kinds seen, logging nothing (a test suite:
        one test's held repeats must not land in a later test's captured log a window later, and a
        kind one test logged - a pod's address on a port the next test's pod reuses - must not hold
        the next test's first line)."""
        with self._lock:
            armed, self._armed, self._armed_for = self._armed, None, float("inf")
            self._held.clear()
            self._seen.clear()
        if armed is not None:
            armed.cancel()

    def close(self) -> None:
        """Cancel the timer and log every repeat still held (the throttle taken off its loggers)."""
        with self._lock:
            armed, self._armed, self._armed_for = self._armed, None, float("inf")
        if armed is not None:
            armed.cancel()
        self.flush(everything=True)


_THROTTLES: weakref.WeakSet[RepeatThrottle] = weakref.WeakSet()
"""Every throttle alive, for :func:`_flush_at_exit` (and the tests' :func:`live_throttles`)."""


def live_throttles() -> list[RepeatThrottle]:
    """Every throttle alive in this process."""
    return list(_THROTTLES)


@atexit.register
def _flush_at_exit() -> None:
    """At the process's exit (before :func:`logging.shutdown`, registered earlier and so run later)
    the repeats still held are logged: a gateway stopped within a window would lose their count."""
    for throttle in list(_THROTTLES):
        throttle.close()
