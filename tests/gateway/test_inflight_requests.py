"""The in-flight registry counts a request's task in and out; the task :meth:`enter` returned can be
handed back to :meth:`leave` (the request path's one task look-up per request)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from igw.gateway.shutdown import InflightRequests


async def test_enter_returns_the_task_that_leave_takes_back() -> None:
    inflight = InflightRequests()
    entered = asyncio.Event()
    release = asyncio.Event()
    seen: list[asyncio.Task[object] | None] = []

    async def request() -> None:
        seen.append(inflight.enter())
        entered.set()
        await release.wait()
        inflight.leave(seen[0])

    task = asyncio.create_task(request())
    await entered.wait()
    assert seen == [task]
    assert len(inflight) == 1
    assert await inflight.wait(0.01) == 1  # still running: the grace runs out
    release.set()
    await task
    assert len(inflight) == 0
    assert await inflight.wait(1.0) == 0


async def test_leave_without_a_task_counts_the_calling_task_out() -> None:
    inflight = InflightRequests()

    async def request() -> None:
        inflight.enter()
        assert len(inflight) == 1
        inflight.leave()

    await asyncio.create_task(request())
    assert len(inflight) == 0


async def test_idle_is_set_exactly_while_no_request_is_in() -> None:
    # enter() clears the idle event only on the first task in (not on every request): whatever the
    # order of entering and leaving, the event shutdown waits on must say "no request" only then.
    # Before the first wait() (a shutdown) there is no event at all: requests pay no Event calls.
    inflight = InflightRequests()
    steps: list[tuple[str, int]] = [("in", 0), ("in", 1), ("out", 0), ("in", 2), ("out", 1), ("out", 2)]
    steps += [("in", 3), ("out", 3), ("in", 4), ("in", 5), ("out", 5), ("out", 4)]

    async def run_steps(first: int, check: Callable[[], None]) -> None:
        gates: dict[int, asyncio.Event] = {}
        entered: dict[int, asyncio.Event] = {}
        tasks: dict[int, asyncio.Task[None]] = {}

        async def request(number: int) -> None:
            task = inflight.enter()
            entered[number].set()
            await gates[number].wait()
            inflight.leave(task)

        check()
        for what, n in steps:
            number = first + n
            if what == "in":
                entered[number], gates[number] = asyncio.Event(), asyncio.Event()
                tasks[number] = asyncio.create_task(request(number))
                await entered[number].wait()
            else:
                gates[number].set()
                await tasks[number]
            check()

    def no_event() -> None:
        assert inflight._idle is None

    await run_steps(0, no_event)
    assert await inflight.wait(1.0) == 0  # nothing in: no event made either
    assert inflight._idle is None

    release = asyncio.Event()

    async def held() -> None:
        task = inflight.enter()
        await release.wait()
        inflight.leave(task)

    holder = asyncio.create_task(held())
    await asyncio.sleep(0)
    assert await inflight.wait(0.01) == 1  # made now, clear: a request is in
    assert inflight._idle is not None
    assert not inflight._idle.is_set()
    release.set()
    await holder

    def set_exactly_while_empty() -> None:
        assert inflight._idle is not None
        assert inflight._idle.is_set() is (len(inflight) == 0), len(inflight)

    await run_steps(100, set_exactly_while_empty)


async def test_a_shutdown_waiting_is_woken_when_the_last_request_leaves() -> None:
    inflight = InflightRequests()
    release = asyncio.Event()

    async def request() -> None:
        task = inflight.enter()
        await release.wait()
        inflight.leave(task)

    tasks = [asyncio.create_task(request()) for _ in range(2)]
    await asyncio.sleep(0)
    waiting = asyncio.create_task(inflight.wait(30.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    release.set()
    assert await asyncio.wait_for(waiting, 1.0) == 0  # long before the grace ends
    await asyncio.gather(*tasks)


async def test_enter_counts_in_the_task_it_is_given_not_the_calling_one() -> None:
    # The lean server's request path passes its handler's task; cut() must cancel that one.
    inflight = InflightRequests()
    release = asyncio.Event()

    async def handler() -> None:
        await release.wait()

    handler_task = asyncio.create_task(handler())
    given: asyncio.Task[object] = handler_task
    assert inflight.enter(given) is handler_task
    assert len(inflight) == 1
    await inflight.cut()
    assert handler_task.cancelled()
    caller = asyncio.current_task()
    assert caller is not None
    assert not caller.cancelling()  # the caller's task was not the one cancelled
    inflight.leave(given)
    assert len(inflight) == 0
