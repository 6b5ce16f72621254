"""SIGTERM / Ctrl-C while ``igw`` starts: recorded, and acted on once the command can stop cleanly.

Python raises ``KeyboardInterrupt`` (and ``igw``'s SIGTERM handler ``SystemExit``) wherever the main
thread happens to be. During the first second of a command that is inside imports - kopf's, aiohttp's,
the kubernetes client's - where an exception can be turned into another one (an interrupt inside a
class body's ``__set_name__`` came out as ``RuntimeError``, a traceback and exit 1, seen when Ctrl-C
hit ``igw operator`` 0.7 s after its start) or swallowed by a library's catch-all, and then the stop
is lost.

So while ``igw`` imports and parses its arguments (:func:`igw.cli.main.main`), and for a command that
installs its own stop handlers (``DEFERS_STOP_SIGNALS = True`` in its module, e.g. ``igw operator``)
until it has, both signals only *record* that they came. The parser's caller then exits with 128 +
the signal at once; such a command asks :func:`take` right after installing its handlers and stops
before it starts. A signal ignored when igw starts (a background job of a non-interactive shell
starts with SIGINT ignored) stays ignored.

SIGHUP has no handler in most commands, and its default action ends the process: a command that
handles it (``HOLDS_HANGUP = True`` in its module, ``igw serve``, whose handler is a configuration
check) gets it blocked from the start of :func:`igw.cli.main.main` (:func:`hold_hangup`) until it has
installed that handler and unblocks it, so one sent during its start-up (a terminal's hang-up, a
``kill -HUP`` for a reload) is handled then, once, instead of ending it (exit -1, session s48). Any
other command has it unblocked again right after parsing (:func:`let_hangup_through`): a SIGHUP ends
it as before.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[int] = []


def _record(signum: int, frame: FrameType | None) -> None:
    if not _received:
        _received.append(signum)


def defer() -> dict[signal.Signals, Any]:
    """Record SIGTERM and SIGINT from now on instead of raising; returns the handlers replaced."""
    _received.clear()
    replaced: dict[signal.Signals, Any] = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            replaced[signum] = signal.signal(signum, _record)
    return replaced


def deferring(signum: signal.Signals) -> bool:
    """Whether ``signum`` is being recorded rather than acted on."""
    return signal.getsignal(signum) is _record


def received() -> int | None:
    """The first stop signal recorded since :func:`defer`, if any."""
    return _received[0] if _received else None


def take() -> int | None:
    """:func:`received`, forgotten afterwards (the command has acted on it)."""
    found = received()
    _received.clear()
    return found


def hold_hangup() -> bool:
    """Block SIGHUP in the calling (main) thread; returns whether it was blocked already (a worker of
    ``igw serve --workers`` is started with it blocked), in which case nothing here undoes it."""
    return signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})


def let_hangup_through(held_before: bool) -> None:
    """Undo :func:`hold_hangup` for a command with no SIGHUP handler: one held back acts now (its
    default action ends the command, as a SIGHUP did before igw blocked it)."""
    if not held_before:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})


def drop_held_hangup(held_before: bool) -> None:
    """At the command's return: unblock SIGHUP again (unless it was blocked before igw started),
    discarding one still held back with no handler to take it. A command that returned before it
    handled SIGHUP (``igw serve`` refusing its configuration) exits with its own code, not -1; and a
    caller of :func:`igw.cli.main.main` in the same process (a test) is not ended by it."""
    if held_before:
        return
    if signal.SIGHUP in signal.sigpending() and signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, None):
        previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # discards the pending one (POSIX)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        signal.signal(signal.SIGHUP, previous)
        return
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
