"""The in-flight registry counts a request's task in and out; the task :meth:`enter` returned can be
handed back to :meth:`leave` (the request path's one task look-up per request)."""

from __future__ import annotations

import asyncio

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
    inflight = InflightRequests()
    steps: list[tuple[str, int]] = [("in", 0), ("in", 1), ("out", 0), ("in", 2), ("out", 1), ("out", 2)]
    steps += [("in", 3), ("out", 3), ("in", 4), ("in", 5), ("out", 5), ("out", 4)]
    gates = {n: asyncio.Event() for n, _ in enumerate(steps)}
    entered: dict[int, asyncio.Event] = {}
    tasks: dict[int, asyncio.Task[None]] = {}

    async def request(number: int) -> None:
        task = inflight.enter()
        entered[number].set()
        await gates[number].wait()
        inflight.leave(task)

    assert inflight._idle.is_set()
    for what, number in steps:
        if what == "in":
            entered[number] = asyncio.Event()
            tasks[number] = asyncio.create_task(request(number))
            await entered[number].wait()
        else:
            gates[number].set()
            await tasks[number]
        assert inflight._idle.is_set() is (len(inflight) == 0), (what, number, len(inflight))


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
