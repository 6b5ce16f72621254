"""The requests a stopping gateway still owes an answer.

On SIGTERM the gateway (see :func:`igw.gateway.serving.serve_app` and :mod:`igw.gateway.launch`)
first reports not-ready while still serving (the drain period), then stops accepting connections and
gives in-flight requests up to the *stream grace* to finish on their own. Requests still running
after that are ended by :meth:`InflightRequests.cut`: their handlers are cancelled, and the request
path turns that cancellation into an answer - a started stream gets a final SSE error event
(``code: shutting_down``) and ``data: [DONE]``, a request not yet answered a 503 ``shutting_down`` -
so a client sees a clean, retryable ending instead of a truncated response. Requests waiting in a
flow-control queue count too: they may still be dispatched during the grace, and those left are
answered 503 ``shutting_down`` rather than having their connection dropped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

log = logging.getLogger("igw.gateway")

CUT_WAIT_S: Final = 5.0
"""How long :meth:`InflightRequests.cut` waits for cancelled handlers to write their answer."""


class InflightRequests:
    """The handler tasks of requests being forwarded to a model server or waiting in a flow-control
    queue (both are owed an answer); one registry per gateway."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._idle: asyncio.Event | None = None
        """Set exactly while no task is in; made by the first :meth:`wait` (a shutdown), so that
        requests before it pay no ``Event.clear``/``Event.set`` (Python functions, called on the
        first token's path of every request at concurrency 1)."""
        self.cutting = False
        """True once :meth:`cut` began: a cancelled handler answers its client instead of giving up."""

    def __len__(self) -> int:
        return len(self._tasks)

    def tasks(self) -> frozenset[asyncio.Task[object]]:
        """The tasks counted in now (a copy): what a global router's reload waits for before it
        closes a removed cluster's connection pool."""
        return frozenset(self._tasks)

    def enter(self, task: asyncio.Task[object] | None = None) -> asyncio.Task[object] | None:
        """Count ``task`` in - the task running the request's handler, when the caller has it at hand
        (the lean server's request carries it), else the calling task - and return it, for
        :meth:`leave`. Passing it spares ``asyncio.current_task``, a Python function on 3.11 that the
        compiled build would call per request."""
        if task is None:
            task = asyncio.current_task()
        if task is not None:
            if not self._tasks and self._idle is not None:  # idle is set exactly while no task is
                self._idle.clear()  # in: clear it on the first
            self._tasks.add(task)
        return task

    def leave(self, task: asyncio.Task[object] | None = None) -> None:
        """Count ``task`` (the one :meth:`enter` returned; the calling task when not given) out."""
        if task is None:
            task = asyncio.current_task()
        if task is not None:
            self._tasks.discard(task)
        if not self._tasks and self._idle is not None:
            self._idle.set()

    async def wait(self, grace_s: float) -> int:
        """Wait up to ``grace_s`` for every request to finish; returns how many are still running."""
        if self._tasks and grace_s > 0:
            log.info("waiting up to %gs for %d in-flight request(s)", grace_s, len(self._tasks))
            idle = self._idle
            if idle is None:  # tasks are in: made clear
                idle = self._idle = asyncio.Event()
            try:
                async with asyncio.timeout(grace_s):
                    # Woken when the set emptied, it may have refilled since: a request dispatched
                    # from the flow-control queue leaves, then enters again to be forwarded, within
                    # one step of its handler. Wait for it too instead of cutting it at once.
                    while self._tasks:
                        await idle.wait()
            except TimeoutError:
                pass
        return len(self._tasks)

    async def cut(self) -> None:
        """End every in-flight request now (SSE error event + ``[DONE]``, or a 503)."""
        self.cutting = True
        tasks = list(self._tasks)
        if not tasks:
            return
        log.warning("shutdown grace over: ending %d in-flight request(s)", len(tasks))
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=CUT_WAIT_S)
