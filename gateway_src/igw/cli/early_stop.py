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
