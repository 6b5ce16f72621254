"""igw.gateway.eager_task: a task's first step run in the caller's callback, with a task's semantics
kept (current task, context, result, exception, cancellation before the task's own first step)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import uvloop

from igw.gateway.eager_task import EagerStart, start_task

T = TypeVar("T")
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def from_callback(
    make: Callable[[], EagerStart[T] | asyncio.Task[T]],
) -> asyncio.Future[EagerStart[T] | asyncio.Task[T]]:
    """``make()`` called from a plain loop callback (no task running), as a protocol's
    ``data_received`` is; the future gets what it returned."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[EagerStart[T] | asyncio.Task[T]] = loop.create_future()
    loop.call_soon(lambda: made.set_result(make()))
    return made


async def test_the_first_step_runs_at_once_as_the_current_task_in_the_tasks_context() -> None:
    events: list[str] = []
    seen: dict[str, Any] = {}
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def work() -> int:
        seen["current"] = asyncio.current_task()
        VAR.set("inside")
        async with asyncio.timeout(5):  # needs a current task
            events.append("first step")
            value = await gate
        events.append("resumed")
        seen["var"] = VAR.get()
        return value + 1

    def make() -> EagerStart[int] | asyncio.Task[int]:
        started = start_task(asyncio.get_running_loop(), work())
        assert isinstance(started, EagerStart)
        events.append("task made")
        started.run_first_step()
        events.append("step returned")
        assert asyncio.current_task() is None  # the caller's callback again
        return started

    started = await from_callback(make)
    assert isinstance(started, EagerStart)
    assert events == ["task made", "first step", "step returned"]
    assert seen["current"] is started.task
    assert VAR.get() == "unset"  # the step ran in the task's own context
    gate.set_result(41)
    assert await started.task == 42
    assert events[-1] == "resumed"
    assert seen["var"] == "inside"


async def test_a_coroutine_that_ends_in_its_first_step_ends_its_task_with_its_result() -> None:
    async def done() -> str:
        return "done"

    def make() -> EagerStart[str] | asyncio.Task[str]:
        started = start_task(asyncio.get_running_loop(), done())
        assert isinstance(started, EagerStart)
        started.run_first_step()
        return started

    started = await from_callback(make)
    assert isinstance(started, EagerStart)
    assert await started.task == "done"


async def test_a_coroutine_that_raises_in_its_first_step_ends_its_task_with_the_exception() -> None:
    async def fails() -> None:
        raise ValueError("bad")

    def make() -> EagerStart[None] | asyncio.Task[None]:
        started = start_task(asyncio.get_running_loop(), fails())
        assert isinstance(started, EagerStart)
        started.run_first_step()  # does not raise here: the task carries it
        return started

    started = await from_callback(make)
    assert isinstance(started, EagerStart)
    with pytest.raises(ValueError, match="bad"):
        await started.task


async def test_a_cancel_before_the_tasks_first_step_cancels_what_the_coroutine_waits_on() -> None:
    """A semaphore's waiter must see its future cancelled, as ``Task.cancel`` would do it: otherwise
    the semaphore hands a slot to a waiter that is gone."""
    slots = asyncio.Semaphore(0)
    cleaned: list[str] = []

    async def waits() -> None:
        try:
            await slots.acquire()
        finally:
            cleaned.append("finally")

    def make() -> EagerStart[None] | asyncio.Task[None]:
        started = start_task(asyncio.get_running_loop(), waits())
        assert isinstance(started, EagerStart)
        started.run_first_step()
        assert started.task.cancel("client gone")  # before the task's own first step
        return started

    started = await from_callback(make)
    assert isinstance(started, EagerStart)
    with pytest.raises(asyncio.CancelledError):
        await started.task
    assert started.task.cancelled()
    assert cleaned == ["finally"]
    assert slots.locked()  # no slot was made up for a waiter that never got one
    slots.release()
    assert not slots.locked()  # the released slot is free: no cancelled waiter took it
    await asyncio.wait_for(slots.acquire(), 1)
    assert slots.locked()


async def test_a_cancel_after_the_coroutine_finished_eagerly_keeps_its_result() -> None:
    async def done() -> int:
        return 7

    def make() -> EagerStart[int] | asyncio.Task[int]:
        started = start_task(asyncio.get_running_loop(), done())
        assert isinstance(started, EagerStart)
        started.run_first_step()
        started.task.cancel()
        return started

    started = await from_callback(make)
    assert isinstance(started, EagerStart)
    assert await started.task == 7


async def test_inside_a_running_task_a_task_starts_the_usual_way() -> None:
    ran: list[str] = []

    async def work() -> None:
        ran.append("ran")

    started = start_task(asyncio.get_running_loop(), work())
    assert isinstance(started, asyncio.Task)
    assert ran == []  # not stepped inside the running task
    await started
    assert ran == ["ran"]


async def test_an_eager_task_is_awaitable_through_its_wrapper_and_cancels_normally_later() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def waits() -> None:
        await gate

    def make() -> EagerStart[None] | asyncio.Task[None]:
        started = start_task(asyncio.get_running_loop(), waits())
        assert isinstance(started, EagerStart)
        started.run_first_step()
        return started

    started = await from_callback(make)
    assert isinstance(started, EagerStart)
    await asyncio.sleep(0)  # the task's own first step has taken over the wait
    started.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await started.task
    assert gate.cancelled()


@pytest.mark.parametrize(
    "case",
    [
        test_the_first_step_runs_at_once_as_the_current_task_in_the_tasks_context,
        test_a_coroutine_that_raises_in_its_first_step_ends_its_task_with_the_exception,
        test_a_cancel_before_the_tasks_first_step_cancels_what_the_coroutine_waits_on,
        test_an_eager_task_is_awaitable_through_its_wrapper_and_cancels_normally_later,
    ],
)
def test_the_same_on_uvloop(case: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``igw serve`` runs on uvloop (its own ``create_task`` and current-task bookkeeping)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(case())
