"""The request-body bytes one gateway process holds at once, bounded (``serverLimits.maxBodyBytesHeld``).

A body is counted from the moment its handler starts reading it (its ``Content-Length``; a chunked
body as its chunks arrive) until it is handed to flow control's queue (which bounds what it holds
by its own ``maxBytes``) or forwarded, or its request is answered otherwise. Without this bound the
bodies being read were bounded only by ``maxConnections`` x ``bbr.maxRequestBodyBytes``: 2,000
clients each sending 1 MiB to a saturated pool took an ``igw serve`` to 1.2 GiB resident (session
s48), while flow control's queue held its 64 MiB. A request whose body would pass the budget is
answered 503 ``server_busy`` with ``Retry-After`` before its body is read (the connection then
closes at once - aiohttp's side too, not reading the upload for its lingering time - the close
lingering as every close does); nothing is forwarded.

Why 503 and not 429: the process, not the caller, is short of room - ``server_busy`` is in
:data:`~igw.gateway.errors.BUSY_CODES`, so a tier-2 router tries its next cluster without counting a
failure, the OpenAI and Anthropic SDKs retry a 503 after its ``Retry-After`` as they do a 429, and
the Anthropic shape calls it ``overloaded_error`` (a 429 would read as the caller's rate limit).

The accounting is two integer operations per request (:meth:`BodyBudget.take`,
:meth:`BodyHold.release`); a lone body always fits (with nothing held), so a budget below
``bbr.maxRequestBodyBytes`` refuses no body for its size alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from igw.gateway.memory import BODY_DEFAULT_BYTES, RESIDENT_PER_COUNTED, malloc_trim

log = logging.getLogger(__name__)

DEFAULT_BYTES: Final = BODY_DEFAULT_BYTES
"""The budget without a container memory limit (the memory plan's, :mod:`igw.gateway.memory`)."""
EXAMPLE_BODY_BYTES: Final = 100 * 1024
"""The body size :func:`budget_meaning` states the budget in (a long prompt)."""
TRIM_ABOVE_BYTES: Final = 64 * 1024 * 1024
"""A burst whose bodies held this much at once (or half the limit, if less) trims the C heap once
they are all given back (:class:`HeapTrim`)."""
TRIM_INTERVAL_S: Final = 10.0
"""At most one heap trim per this many seconds."""
RETRY_AFTER_S: Final = 1
"""The ``Retry-After`` of a ``server_busy`` answer: bodies being read are uploads in progress,
done (and their bytes given back) within about a second at the bandwidths that filled the budget."""


def budget_meaning(limit: int) -> str:
    """The budget in requests, for the start-up log: how many bodies of :data:`EXAMPLE_BODY_BYTES`
    it holds at once (a request past them is answered 503 ``server_busy``)."""
    return (
        f"about {limit // EXAMPLE_BODY_BYTES} concurrent requests of {EXAMPLE_BODY_BYTES // 1024} KiB, "
        f"about {limit * RESIDENT_PER_COUNTED // 2**20} MiB resident when full"
    )


class BodyBudget:
    """The process's request-body bytes held (:attr:`held`) against :attr:`limit`."""

    __slots__ = ("held", "limit", "peak", "refused", "trim")

    def __init__(self, limit: int = DEFAULT_BYTES) -> None:
        self.limit = limit
        self.held = 0
        self.refused = 0
        """Requests refused for want of room (``igw_body_budget_refusals_total``)."""
        self.peak = 0
        """The most bytes held at once since the heap was last trimmed (:class:`HeapTrim`)."""
        self.trim: HeapTrim | None = None
        """Told when the bytes held return to 0 after a burst (``peak`` past its threshold)."""

    def take(self, size: int) -> BodyHold | None:
        """A hold of ``size`` bytes, or ``None`` when they would pass the limit while other bodies
        are held (a lone body always fits)."""
        held = self.held
        if held and held + size > self.limit:
            self.refused += 1
            return None
        held += size
        self.held = held
        if held > self.peak:
            self.peak = held
        return BodyHold(self, size)

    def grow(self, hold: BodyHold, size: int) -> bool:
        """Add ``size`` bytes to ``hold`` (a chunked body's next chunk); ``False``, nothing added, when
        they would pass the limit while other bodies are held."""
        held = self.held
        if held > hold.size and held + size > self.limit:
            self.refused += 1
            return False
        held += size
        self.held = held
        if held > self.peak:
            self.peak = held
        hold.size += size
        return True

    def trim_above(self) -> int:
        """The peak past which a return to 0 trims the heap (:data:`TRIM_ABOVE_BYTES`, or half the
        limit if less)."""
        return min(TRIM_ABOVE_BYTES, self.limit // 2)


class BodyHold:
    """One request's bytes in its :class:`BodyBudget`; :meth:`release` gives them back (once)."""

    __slots__ = ("budget", "size")

    def __init__(self, budget: BodyBudget, size: int) -> None:
        self.budget = budget
        self.size = size

    def release(self) -> None:
        """Give the bytes back; a second call gives nothing."""
        size = self.size
        if size:
            self.size = 0
            budget = self.budget
            budget.held -= size
            if not budget.held and budget.trim is not None and budget.peak >= budget.trim_above():
                budget.trim.drained()


class HeapTrim:
    """Give the C heap back to the system after a burst of request bodies (``malloc_trim(0)``).

    aiohttp and the lean server read a body in reads of up to 64 KiB, each a ``bytes`` object below
    glibc's mmap threshold (128 KiB, :mod:`igw.gateway.memory`): from the ``brk`` heap, where the
    small objects that outlive a request (its log record, a prefix index's entries) pin them. Freed,
    their pages stay resident: after bursts of 2,000 x 1 MiB uploads to a saturated pool an
    ``igw serve`` stayed at ~340 MiB resident, idle (session s48). glibc returns only the heap's top
    on its own; ``malloc_trim(0)`` also returns the whole free pages inside it (docs/gateway.md,
    "The heap after a burst of bodies", for what it frees and how long it blocks).

    When the bytes held return to 0 after a burst that held :meth:`BodyBudget.trim_above` or more
    (:meth:`drained`), a trim is scheduled as a callback of its own (not in the request's
    release), at most once per ``interval_s``: a drain sooner than that waits for the interval's
    end, and is skipped if bodies are held again by then (that burst's own drain trims). Counted in
    ``igw_heap_trims_total``, its time logged at debug.

    The trim runs on the event loop, one at a time (one callback pending at most), not in a thread:
    ``malloc_trim`` holds the main arena's lock while it walks the heap, so a loop that allocates
    meanwhile (a serving gateway does) waits for it all the same (docs/gateway.md, "The heap after a
    burst of bodies"). :meth:`close` (the app's cleanup, at shutdown) cancels a pending trim and
    schedules none after it."""

    __slots__ = ("_budget", "_clock", "_closed", "_interval_s", "_last", "_pending", "_trim", "trims")

    def __init__(
        self,
        budget: BodyBudget,
        *,
        interval_s: float = TRIM_INTERVAL_S,
        trim: Callable[[], bool] = malloc_trim,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._budget = budget
        self._interval_s = interval_s
        self._trim = trim
        self._clock = clock
        self._last: float | None = None
        self._pending: asyncio.TimerHandle | None = None
        self._closed = False
        self.trims = 0
        budget.trim = self

    @property
    def pending(self) -> bool:
        """Whether a trim is scheduled and has not run yet."""
        return self._pending is not None

    def drained(self) -> None:
        """The bytes held are back to 0 after a burst: trim soon, unless a trim is pending already
        or the process is shutting down (:meth:`close`)."""
        if self._pending is not None or self._closed:
            return
        wait = 0.0 if self._last is None else max(0.0, self._last + self._interval_s - self._clock())
        self._pending = asyncio.get_running_loop().call_later(wait, self._run)

    def close(self) -> None:
        """Shutting down: cancel a pending trim and schedule none after this (the bodies' last
        drains during the cleanup would otherwise trim a heap the process is about to give back)."""
        self._closed = True
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _run(self) -> None:
        self._pending = None
        budget = self._budget
        if budget.held or self._closed:  # another burst under way: its own drain trims (the peak is kept)
            return
        budget.peak = 0
        started = self._clock()
        released = self._trim()
        self._last = self._clock()
        self.trims += 1
        log.debug(
            "trimmed the C heap after a burst of request bodies in %.1f ms (released: %s)",
            (self._last - started) * 1e3,
            released,
        )


class BodyBudgetCollector(Collector):
    """``igw_body_bytes_held`` (and its limit) and ``igw_body_budget_refusals_total``, read from the
    budget at each scrape (nothing is counted on the request path beyond the budget's own integers)."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget

    def collect(self) -> Iterator[Metric]:
        budget = self._budget
        yield GaugeMetricFamily(
            "igw_body_bytes_held",
            "Request-body bytes this process holds: bodies being read, or read and not yet queued by "
            "flow control nor forwarded (serverLimits.maxBodyBytesHeld bounds them).",
            value=budget.held,
        )
        yield GaugeMetricFamily(
            "igw_body_bytes_held_limit",
            "serverLimits.maxBodyBytesHeld in force in this process (derived when the field is 0).",
            value=budget.limit,
        )
        trim = budget.trim
        yield CounterMetricFamily(
            "igw_heap_trims",
            "C heap trims (malloc_trim) after bursts of request bodies (serverLimits.maxBodyBytesHeld's "
            "accounting: held bytes back to 0 after a burst, at most once per 10 s).",
            value=0 if trim is None else trim.trims,
        )
        yield CounterMetricFamily(
            "igw_body_budget_refusals",
            "Requests answered 503 server_busy because their body would have passed "
            "serverLimits.maxBodyBytesHeld (the body not read, the connection closed).",
            value=budget.refused,
        )
