"""A logging filter that keeps a repeated warning to one line per interval, counting the rest.

A failure that repeats per request or per retry (a trace collector unreachable, a pod answering every
request with an oversized error) would otherwise write one line each time: a flood that buries the
rest of the log and costs the process a write per request. Used by :mod:`igw.gateway.trace_export`
(the exporter's loggers) and :mod:`igw.gateway.upstream` (its per-answer warnings).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["MAX_KEYS", "REPEAT_INTERVAL_S", "RepeatThrottle"]

REPEAT_INTERVAL_S: Final = 60.0
"""At most one line per message per minute while a failure lasts."""

MAX_KEYS: Final = 4096
"""The most kinds of record one throttle remembers. Records keyed by their arguments (a pod's
address) are as many as the pods that sent them; past the bound the oldest kind is forgotten (its
held count with it), so a fleet whose pods come and go does not grow the map without end."""


class RepeatThrottle(logging.Filter):
    """Passes a message's first record, then at most one per ``interval_s``, noting how many were held.

    Records are alike when they share logger, level and message template (``record.msg``, before
    its arguments are merged): a retry's changing delay or status code does not make it new.
    ``keyed_args``: the first arguments that make records differ too (a pod's address and a reason:
    one pod's flood then hides neither another pod's first line nor its own other failures), at most
    ``max_keys`` kinds remembered (:data:`MAX_KEYS`).
    """

    def __init__(
        self,
        interval_s: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        *,
        keyed_args: int = 0,
        max_keys: int = MAX_KEYS,
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._keyed_args = keyed_args
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._seen: dict[tuple[object, ...], tuple[float, int]] = {}
        """(logger, level, template, keyed arguments...) -> (when one last passed, how many were
        held since); in the order each kind was first seen, the oldest first."""

    def _key(self, record: logging.LogRecord) -> tuple[object, ...]:
        key: tuple[object, ...] = (record.name, record.levelno, str(record.msg))
        if self._keyed_args and isinstance(record.args, tuple):
            key += tuple(str(arg) for arg in record.args[: self._keyed_args])
        return key

    def filter(self, record: logging.LogRecord) -> bool:
        key = self._key(record)
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self._interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            if last is None and len(self._seen) >= self._max_keys:
                del self._seen[next(iter(self._seen))]  # the oldest kind
            self._seen[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} [{last[1]} like this in the last {now - last[0]:.0f} s not logged]"
        return True
