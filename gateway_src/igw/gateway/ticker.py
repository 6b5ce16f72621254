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
    """

    def __init__(
        self,
        tick: Callable[[], Awaitable[None]],
        *,
        interval_s: float,
        name: str,
        stop_timeout_s: float = 2.0,
    ) -> None:
        self._tick = tick
        self._interval_s = interval_s
        self._name = name
        self._stop_timeout_s = stop_timeout_s
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stopping.is_set():
            await self._tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval_s)

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
