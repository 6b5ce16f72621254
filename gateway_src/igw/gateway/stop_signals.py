"""SIGTERM/SIGINT as a one-shot stop request for a long-running server process.

The first signal sets an :class:`asyncio.Event` (the server starts its drain); from then on the
process ignores both signals for good, so a supervisor that repeats SIGTERM while the server drains
and exits still sees exit code 0.

Why not ``loop.add_signal_handler``: removing such a handler - the loop does it when it closes, and
so did the first version of "ignore from now on" - restores ``SIG_DFL`` before anything else can be
set, and a repeated SIGTERM landing in that instant killed the process (-15 instead of 0; CI caught
it once in a few thousand runs). Here the disposition goes from a Python handler straight to
``SIG_IGN`` in one ``signal.signal`` call, and the loop never owns it, so closing it restores nothing.

Delivery: Python runs the handler in the main thread. uvloop wakes for it through its own signal
wake-up fd; the plain asyncio loop's ``select`` returns with EINTR (Linux hands a process-directed
signal to the main thread first). The handler passes the stop to the loop with
``call_soon_threadsafe``, which also wakes it through its self-pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)

log = logging.getLogger("igw.gateway")


class StopSignals:
    """Turns the first of ``signals`` into ``stop.set()`` on ``loop``; see the module docstring.

    A context manager: entering routes the signals here (main thread only: ``signal.signal`` raises
    ``ValueError`` elsewhere). Leaving before any stop (an error on the way up) puts the previous
    handlers back; leaving after it keeps the signals ignored, since the process is on its way out.
    """

    def __init__(
        self,
        stop: asyncio.Event,
        loop: asyncio.AbstractEventLoop,
        signals: Sequence[signal.Signals] = STOP_SIGNALS,
    ) -> None:
        self._stop = stop
        self._loop = loop
        self._signals = tuple(signals)
        self._received = False
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopSignals:
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self._signals}
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._received:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)

    def ignore_further(self) -> None:
        """Shutdown has begun: a repeated signal changes nothing, now and in the process's last moments."""
        self._received = True
        for sig in self._signals:
            signal.signal(sig, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._received:  # a second signal before ignore_further ran: the stop is already on its way
            return
        self._received = True
        self._loop.call_soon_threadsafe(self._stop.set)


class ReloadSignal:
    """SIGHUP as "check the configuration file now" (``reload()`` on ``loop``), never as an end.

    Without a handler SIGHUP's default action ended ``igw serve`` at once, silently: a single
    process cut every stream without the shutdown's error event (exit -1, 129 in a shell), and the
    parent of ``--workers`` died the same way while its workers drained (the habit of ``kill -HUP``
    for a reload, or a terminal's hang-up, did it; session s48). ``reload()`` gets the call on the
    loop; ``stopping()`` true: the signal is logged and ignored, and leaving after a stop keeps it
    ignored (the process is on its way out). Leaving before one puts the previous handler back.
    A context manager, entered in the main thread (as :class:`StopSignals`).
    """

    def __init__(
        self,
        reload: Callable[[], None],
        loop: asyncio.AbstractEventLoop,
        stopping: Callable[[], bool],
    ) -> None:
        self._reload = reload
        self._loop = loop
        self._stopping = stopping
        self._previous: Any = None
        self._pending = False

    def __enter__(self) -> ReloadSignal:
        self._previous = signal.signal(signal.SIGHUP, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN if self._stopping() else self._previous)

    def release_held(self) -> None:
        """Unblock SIGHUP in this (main) thread: one that came while it was blocked is handled now.

        ``igw serve`` blocks SIGHUP from the start of :func:`igw.cli.main.main` (serve's
        ``HOLDS_HANGUP``), and the parent of ``--workers`` starts each worker with it blocked
        (:func:`sighup_held`); call this once the process serves (its reloader runs), so that a
        hang-up during its start-up (of the whole process group, or of this process alone) is a
        reload check then, not the default action that ended it mid-import. A no-op where nothing
        blocked it."""
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # A check already on its way absorbs another SIGHUP: after a hang-up of a --workers group,
        # worker 0 gets its own and the one its parent passes on, and checked the file twice.
        if self._pending:
            return
        self._pending = True
        self._loop.call_soon_threadsafe(self._received)

    def _received(self) -> None:
        self._pending = False
        if self._stopping():
            log.info("SIGHUP ignored: the gateway is stopping")
            return
        self._reload()


@contextlib.contextmanager
def sighup_held() -> Iterator[None]:
    """Block SIGHUP in the calling (main) thread for the ``with`` block: a process started inside it
    inherits the block across ``exec`` (POSIX keeps the signal mask) and holds every SIGHUP pending
    until it has a handler (:meth:`ReloadSignal.release_held`); one sent to this process meanwhile is
    handled when the block ends.

    Why: SIGHUP's default action ends a process, and a worker of ``igw serve --workers`` has no
    handler for the second or two it imports; a hang-up sent to the whole process group (a closing
    terminal, ``kill -HUP -PGID``) then ended it, and the group stopped with exit 3 (session s48). A
    disposition (``SIG_IGN``) would be inherited too but would drop the signal, and setting it around
    the start would drop this process's own."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def hold_stop_signals(signals: Sequence[signal.Signals] = STOP_SIGNALS) -> None:
    """Block ``signals`` in the calling (main) thread for the rest of the process's life.

    For a process whose event loop owns its SIGTERM/SIGINT handlers (``igw operator``: kopf registers
    them on the loop, and the loop removes them - restoring the default action - when it closes).
    Call it once stopping is done, before the loop closes: a repeat then stays pending instead of
    killing the process, and :func:`ignore_held_stop_signals` discards it after the loop is gone. The
    loop's executor threads and kopf's handler executor, which do not block them, are joined before
    the loop closes.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)


def ignore_held_stop_signals(signals: Sequence[signal.Signals] = STOP_SIGNALS) -> None:
    """After :func:`hold_stop_signals` and the loop's close: ignore ``signals``, discarding a pending one."""
    for sig in signals:
        signal.signal(sig, signal.SIG_IGN)
