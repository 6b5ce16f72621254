"""A task whose coroutine's first step runs now, in the caller's callback, not one loop turn later.

``loop.create_task`` puts a task's first step in the loop's ready queue: it runs in the loop's next
turn, after the callback that created it has returned and the loop has gone round once (timers, the
ready queue). For the lean server that callback is the read that completed a request's head, and the
handler's first step is the whole path before the forward - authentication, the body, the
scheduler's decision, the upstream request's write - so the turn sits between the request's bytes
and the model server's request on every request, and on a request that follows an idle gap (every
streamed request in ``igw perf gateway``) the loop's own code runs cold as well. Python 3.12's
``eager_start`` does this; the gateway supports 3.11, which has no such option, so it is written
here: the task is created as usual (its context, its place in ``asyncio.all_tasks``, its
cancellation) around a coroutine wrapper, the wrapped coroutine is run to its first suspension with
the task made the loop's current task (``asyncio.current_task()``, ``asyncio.timeout`` and the
in-flight registry see the task as they would in a task step), and the task's own first step, still
scheduled by ``create_task``, picks up what that step produced:

* the coroutine suspended on a future: the task waits on it, as if its own step had run;
* it returned or raised: the task ends with that result or exception (``KeyboardInterrupt`` and
  ``SystemExit`` re-raised by the task's step, as a task step raises them);
* the task was cancelled before its first step: the future the coroutine waits on is cancelled and
  the cancellation thrown into the coroutine where it waits - what ``Task.cancel`` does to a task
  waiting on a future (a semaphore's waiter, for one, must see its future cancelled). A coroutine
  that already finished in the eager step keeps its outcome (its work is done; Python 3.12's eager
  task is done at that point too, and its ``cancel()`` is a no-op).

The eager step is only taken where no task is running (a protocol callback): inside a task step the
loop already has a current task, and the new task starts the usual way (:func:`start_task`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

_NOT_RUN: Final = 0
_YIELDED: Final = 1
_RETURNED: Final = 2
_RAISED: Final = 3
_PASSING: Final = 4
"""The wrapper's states: the first step not run here; it ran and the coroutine waits on what it
yielded, returned, or raised; that outcome was handed to the task (everything passes through now)."""


class _FirstStepRun(Coroutine[Any, Any, T], Generic[T]):
    """A coroutine whose first step may already have run: the first ``send`` or ``throw`` from the
    task hands over that step's outcome, every later call goes to the coroutine."""

    __slots__ = ("_coro", "_outcome", "_state")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self._state = _NOT_RUN
        self._outcome: Any = None

    def run_first_step(self) -> None:
        """Run the coroutine to its first suspension (or its end) and keep the outcome."""
        try:
            self._outcome = self._coro.send(None)
            self._state = _YIELDED
        except StopIteration as stop:
            self._outcome = stop.value
            self._state = _RETURNED
        except BaseException as exc:  # handed to the task, which ends with it (or re-raises it)
            self._outcome = exc
            self._state = _RAISED

    def _handed_over(self) -> tuple[int, Any]:
        state, outcome = self._state, self._outcome
        self._state = _PASSING
        self._outcome = None
        return state, outcome

    def send(self, value: Any) -> Any:
        if self._state == _PASSING:
            return self._coro.send(value)
        state, outcome = self._handed_over()
        if state == _YIELDED:
            return outcome
        if state == _RETURNED:
            raise StopIteration(outcome)
        if state == _RAISED:
            raise outcome
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._state == _PASSING:
            return self._coro.throw(typ, val, tb) if val is not None else self._coro.throw(typ)
        state, outcome = self._handed_over()
        if state == _RETURNED:
            raise StopIteration(outcome)
        if state == _RAISED:
            raise outcome
        exc = typ if val is None else val
        if state == _YIELDED and isinstance(exc, asyncio.CancelledError):
            cancel = getattr(outcome, "cancel", None)
            if cancel is not None and getattr(outcome, "_asyncio_future_blocking", None) is not None:
                cancel(msg=exc.args[0] if exc.args else None)
        return self._coro.throw(typ, val, tb) if val is not None else self._coro.throw(typ)

    def close(self) -> None:
        self._state = _PASSING
        self._outcome = None
        self._coro.close()

    def __await__(self) -> Generator[Any, None, T]:
        return self  # an iterator driving send/throw, as a coroutine's wrapper is

    def __iter__(self) -> _FirstStepRun[T]:
        return self

    def __next__(self) -> Any:
        return self.send(None)


class EagerStart(Generic[T]):
    """A task made around ``coro`` whose first step has not run yet: keep :attr:`task` where it
    belongs, then call :meth:`run_first_step` (the step may finish the coroutine, and code it runs
    may look for the task where it was kept)."""

    __slots__ = ("_context", "_loop", "_wrapped", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> None:
        self._loop = loop
        self._wrapped = _FirstStepRun(coro)
        self._context = contextvars.copy_context()
        self.task: asyncio.Task[T] = loop.create_task(self._wrapped, context=self._context)

    def run_first_step(self) -> None:
        """The coroutine's first step, now, as the loop's current task and in the task's context."""
        loop, task = self._loop, self.task
        asyncio.tasks._enter_task(loop, task)
        try:
            self._context.run(self._wrapped.run_first_step)
        finally:
            asyncio.tasks._leave_task(loop, task)


def start_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
) -> EagerStart[T] | asyncio.Task[T]:
    """An :class:`EagerStart` for ``coro`` where no task is running on ``loop`` (a protocol or timer
    callback), else a task started the usual way (the running task stays the current one)."""
    if asyncio.current_task(loop) is not None:
        return loop.create_task(coro)
    return EagerStart(loop, coro)
