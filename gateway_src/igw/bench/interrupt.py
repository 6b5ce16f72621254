"""Run a coroutine so that Ctrl-C *and* SIGTERM stop it cleanly.

Both signals cancel the main task, so every ``async with`` in it unwinds: router processes are stopped
by PID and the simulated fleet is shut down. (With plain ``asyncio.run`` a SIGTERM — from ``timeout``,
``kill`` or a CI runner — would kill the interpreter and orphan the router processes, which live in
their own process groups.)
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


def run_interruptible(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``; SIGINT/SIGTERM cancel it and raise :class:`KeyboardInterrupt` afterwards."""
    interrupted = False

    async def main() -> T:
        nonlocal interrupted
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def stop() -> None:
            nonlocal interrupted
            interrupted = True
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        try:
            return await coro
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`KeyboardInterrupt` in the block, as SIGINT does, so the synchronous work
    after :func:`run_interruptible` (writing a report) ends the way the run does: one line, exit 130.
    Outside it a SIGTERM while ``igw bench global`` wrote its report killed the interpreter with no
    word (exit 143). A no-op off the main thread, where Python cannot install signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
