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
