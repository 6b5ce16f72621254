"""The upstream pool's connection slots keep ``asyncio.Semaphore``'s behaviour: first come, first
served; a waiter cancelled before it got a slot holds none; one cancelled after it was handed a slot
passes it on; a release with no one waiting frees a slot; and under many concurrent takers with
cancellations no slot is lost or doubled."""

from __future__ import annotations

import asyncio
import random

import pytest

from igw.gateway.slots import Slots


async def _settle() -> None:
    """Let every ready task run until none is left to run (a few loop turns)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def _waiter(slots: Slots, name: str, got: list[str]) -> None:
    await slots.take()
    got.append(name)


def test_a_free_slot_is_taken_at_once_until_none_is_left() -> None:
    slots = Slots(2)
    assert slots.try_take()
    assert slots.try_take()
    assert slots.locked()
    assert not slots.try_take()
    assert slots.free == 0
    slots.release()
    assert slots.free == 1
    assert not slots.locked()


async def test_take_returns_at_once_with_a_free_slot() -> None:
    slots = Slots(1)
    await slots.take()
    assert slots.free == 0
    slots.release()
    assert slots.free == 1


async def test_waiters_get_their_slots_in_the_order_they_came() -> None:
    slots = Slots(1)
    assert slots.try_take()
    got: list[str] = []
    tasks = []
    for name in ("a", "b", "c"):
        tasks.append(asyncio.create_task(_waiter(slots, name, got)))
        await _settle()  # each one waiting before the next comes
    assert slots.waiting == 3
    for expected in (["a"], ["a", "b"], ["a", "b", "c"]):
        slots.release()
        await _settle()
        assert got == expected
    await asyncio.gather(*tasks)
    assert slots.free == 0  # "c" holds the one slot
    slots.release()
    assert slots.free == 1


async def test_a_released_slot_goes_to_the_waiter_not_to_a_newcomer() -> None:
    slots = Slots(1)
    assert slots.try_take()
    got: list[str] = []
    first = asyncio.create_task(_waiter(slots, "waiter", got))
    await _settle()
    slots.release()  # handed to the waiter, which has not run yet
    assert not slots.try_take()  # the newcomer finds none free
    assert slots.waiting == 0
    await first
    assert got == ["waiter"]
    assert slots.free == 0


async def test_a_waiter_cancelled_before_it_gets_a_slot_holds_none() -> None:
    slots = Slots(1)
    assert slots.try_take()
    got: list[str] = []
    gone = asyncio.create_task(_waiter(slots, "gone", got))
    await _settle()
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert slots.waiting == 0
    slots.release()
    assert slots.free == 1  # the slot came back; the cancelled waiter did not keep it
    assert got == []


async def test_a_waiter_timed_out_before_it_gets_a_slot_holds_none() -> None:
    slots = Slots(1)
    assert slots.try_take()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await slots.take()
    assert slots.waiting == 0
    slots.release()
    assert slots.free == 1


async def test_a_waiter_cancelled_after_it_was_handed_a_slot_passes_it_to_the_next() -> None:
    slots = Slots(1)
    assert slots.try_take()
    got: list[str] = []
    first = asyncio.create_task(_waiter(slots, "first", got))
    await _settle()
    second = asyncio.create_task(_waiter(slots, "second", got))
    await _settle()
    slots.release()  # handed to "first" ...
    first.cancel()  # ... which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert got == ["second"]
    assert slots.free == 0  # "second" holds it
    slots.release()
    assert slots.free == 1


async def test_a_waiter_cancelled_after_it_was_handed_a_slot_frees_it_when_no_one_else_waits() -> None:
    slots = Slots(1)
    assert slots.try_take()
    got: list[str] = []
    only = asyncio.create_task(_waiter(slots, "only", got))
    await _settle()
    slots.release()
    only.cancel()
    with pytest.raises(asyncio.CancelledError):
        await only
    assert got == []
    assert slots.free == 1


def test_a_release_without_waiters_frees_a_slot_and_more_releases_than_takes_are_refused() -> None:
    slots = Slots(3)
    assert slots.try_take()
    assert slots.try_take()
    slots.release()
    assert slots.free == 2
    slots.release()
    assert slots.free == 3
    with pytest.raises(ValueError, match="released more times"):
        slots.release()
    assert slots.free == 3


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        Slots(-1)


async def test_many_takers_with_cancellations_lose_no_slot_and_never_exceed_the_limit() -> None:
    limit = 3
    slots = Slots(limit)
    rng = random.Random(7)
    holding = 0
    most = 0
    served = 0

    async def taker(hold_turns: int, timeout_s: float | None) -> None:
        nonlocal holding, most, served
        if not slots.try_take():
            if timeout_s is None:
                await slots.take()
            else:
                async with asyncio.timeout(timeout_s):
                    await slots.take()
        holding += 1
        most = max(most, holding)
        try:
            for _ in range(hold_turns):
                await asyncio.sleep(0)
        finally:
            holding -= 1
            served += 1
            slots.release()

    tasks = [
        asyncio.create_task(taker(rng.randrange(0, 4), rng.choice((None, None, 0.0005, 0.002))))
        for _ in range(300)
    ]
    for _ in range(40):  # cancel some at random moments: waiting, just handed a slot, holding one
        await asyncio.sleep(0)
        rng.choice(tasks).cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    finished = sum(1 for r in results if r is None)
    assert finished >= 50
    assert any(isinstance(r, asyncio.CancelledError) for r in results)
    assert all(r is None or isinstance(r, asyncio.CancelledError | TimeoutError) for r in results)
    assert most == limit  # the limit was reached and never passed
    assert holding == 0
    assert served >= finished
    assert slots.free == limit  # every slot came back
    assert slots.waiting == 0
    for _ in range(limit):  # and each one can be taken again
        assert slots.try_take()
    assert not slots.try_take()
