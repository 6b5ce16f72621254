"""A periodic background task that can always be stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class Ticker:
    """Runs ``tick`` every ``interval_s`` until :meth:`stop`.

    Stopping sets an event the loop waits on instead of only cancelling the task: redis-py's
    asyncio client can swallow a ``CancelledError`` that arrives while it checks a pooled
    connection, which would leave a cancelled loop running and ``stop`` waiting forever. The task
    is still cancelled if it does not end within ``stop_timeout_s``.

    ``fixed_rate``: ticks start every ``interval_s`` (the next at once when one took longer), rather
    than ``interval_s`` after the last one ended; for a tick whose period is a promise to others
    (a heartbeat, whose readers judge staleness by it), so that a slow store does not stretch it.
    """

    def __init__(
        self,
        tick: Callable[[], Awaitable[None]],
        *,
        interval_s: float,
        name: str,
        stop_timeout_s: float = 2.0,
        fixed_rate: bool = False,
    ) -> None:
        self._tick = tick
        self._fixed_rate = fixed_rate
        self._interval_s = interval_s
        self._name = name
        self._stop_timeout_s = stop_timeout_s
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            started = loop.time()
            await self._tick()
            wait = self._interval_s
            if self._fixed_rate:
                wait = max(0.0, started + self._interval_s - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is None:
            return
        done, _ = await asyncio.wait({self._task}, timeout=self._stop_timeout_s)
        if not done:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
