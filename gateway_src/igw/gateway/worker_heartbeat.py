"""Liveness inside a worker group: each worker's event loop beats, the parent ends a worker that stops.

Why: a worker whose event loop is stuck (a hang in native code, an endless loop, a process stopped
by SIGSTOP) keeps its listener in the port's ``SO_REUSEPORT`` group, so the kernel still hands it its
share of new connections, and they hang. Kubernetes' liveness probe cannot see it reliably: each
probe is a new connection that the kernel's hash gives to that worker one time in N, so with four
workers three failed probes in a row come about once in 64 probe rounds. The parent sees every
worker: a worker that has not beaten for ``stuck_after_s`` is killed, which ends the group as any
dying worker does (:mod:`igw.gateway.workers`), and the orchestrator restarts the container. The
same rule as gunicorn's worker ``--timeout``.

The channel is one pipe per worker: the worker writes one byte per :data:`BEAT_INTERVAL_S` from its
event loop (so a beat proves the loop runs, not just the process), non-blocking (a full pipe means
the parent already knows it is alive); the parent drains the read ends each time it polls. A worker
that has not beaten yet is still starting (imports, configuration, its listeners) and gets
:data:`START_ALLOWANCE_S` more before it counts as stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from typing import Final

BEAT_INTERVAL_S: Final = 1.0
STUCK_AFTER_S: Final = 30.0
"""Default seconds without a beat before a worker counts as stuck (``igw serve --worker-timeout``, the
chart's ``gateway.workerTimeoutSeconds``, ``igw operator --gateway-worker-timeout``): gunicorn's worker
timeout; no healthy worker's event loop stalls for seconds."""
START_ALLOWANCE_S: Final = 60.0
"""Extra seconds a worker has for its first beat: a worker starts in ~1 s on an idle machine, but in
tens of seconds on a saturated one, and killing it then would end the group in a restart loop."""
_DRAIN_BYTES: Final = 4096


class Heartbeat:
    """The worker side: a byte to ``fd`` every :data:`BEAT_INTERVAL_S` from ``loop`` until :meth:`stop`."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop, interval_s: float = BEAT_INTERVAL_S) -> None:
        self._fd = fd
        self._loop = loop
        self._interval_s = interval_s
        self._timer: asyncio.TimerHandle | None = None
        os.set_blocking(fd, False)

    def start(self) -> None:
        self._beat()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _beat(self) -> None:
        # Full pipe: the parent has beats it has not read yet, so it knows; closed pipe: the parent is
        # gone (the kernel's parent-death signal stops this worker, igw.gateway.parent_death).
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self._fd, b".")
        self._timer = self._loop.call_later(self._interval_s, self._beat)


class HeartbeatWatch:
    """The parent side: when each worker last beat, read from the pipes' read ends."""

    def __init__(self, read_fds: Sequence[int], *, started_at: float, stuck_after_s: float) -> None:
        self._stuck_after_s = stuck_after_s
        self._fds: list[int] = []
        self._started_at: list[float] = []
        self._last: list[float | None] = []
        self._open: list[bool] = []
        for fd in read_fds:
            self.add(fd, started_at=started_at)

    def add(self, read_fd: int, *, started_at: float) -> None:
        """Watch one more worker's pipe (the next index), started at ``started_at``: a group starts
        its workers in two steps (worker 0 first, :mod:`igw.gateway.workers`)."""
        os.set_blocking(read_fd, False)
        self._fds.append(read_fd)
        self._started_at.append(started_at)
        self._last.append(None)
        self._open.append(True)

    def stuck(self, now: float) -> list[tuple[int, float]]:
        """Drain the pipes; the workers (index, seconds silent) that have gone too long without a beat.

        A worker whose pipe reached its end has exited (the caller sees that in its exit status), so
        it is not reported here."""
        out: list[tuple[int, float]] = []
        for index, fd in enumerate(self._fds):
            if not self._open[index]:
                continue
            if self._drain(index, fd):
                self._last[index] = now
            if not self._open[index]:
                continue
            last = self._last[index]
            silent = now - (self._started_at[index] if last is None else last)
            limit = self._stuck_after_s + (START_ALLOWANCE_S if last is None else 0.0)
            if silent > limit:
                out.append((index, silent))
        return out

    def _drain(self, index: int, fd: int) -> bool:
        """Whether any beat was waiting; marks the pipe closed at its end."""
        beat = False
        while True:
            try:
                chunk = os.read(fd, _DRAIN_BYTES)
            except BlockingIOError:
                return beat
            if not chunk:
                self._open[index] = False
                return beat
            beat = True

    def close(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
        self._started_at = []
        self._open = []
        self._last = []
