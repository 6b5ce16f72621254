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

__all__ = ["REPEAT_INTERVAL_S", "RepeatThrottle"]

REPEAT_INTERVAL_S: Final = 60.0
"""At most one line per message per minute while a failure lasts."""


class RepeatThrottle(logging.Filter):
    """Passes a message's first record, then at most one per ``interval_s``, noting how many were held.

    Records are alike when they share logger, level and message template (``record.msg``, before
    its arguments are merged): a retry's changing delay or status code does not make it new.
    """

    def __init__(
        self, interval_s: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}
        """(logger, level, template) -> (when one last passed, how many were held since)."""

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self._interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            self._seen[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} [{last[1]} like this in the last {now - last[0]:.0f} s not logged]"
        return True
