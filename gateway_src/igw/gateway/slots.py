"""The upstream pool's connection slots: at most ``limit`` held at once, waiters served first come,
first served - the behaviour of the ``asyncio.Semaphore`` the pool used, in a module the compiled
build compiles.

Why not ``asyncio.Semaphore``: it is Python, so in the compiled build each request ran five
interpreted calls through it (``acquire``, ``locked`` and its generator, ``release``,
``_wake_up_next``). Here the common case, a free slot, is one native call to take it
(:meth:`Slots.try_take`) and one to give it back (:meth:`Slots.release`); only a request that finds
every slot held runs a coroutine (:meth:`Slots.take`).

What the pool relies on (``tests/gateway/test_slots.py`` pins each):

- a free slot exists only while no one waits: :meth:`Slots.release` hands its slot straight to the
  first waiter still waiting, so a newcomer never overtakes a waiter (FIFO);
- a waiter cancelled before it was handed a slot leaves the queue holding none;
- a waiter handed a slot and cancelled before it resumed (a timeout, a client gone) passes that slot
  on, to the next waiter or back to the free count - none is lost;
- a release with no one waiting frees a slot; more releases than takes is a bug and raises
  ``ValueError`` (as ``asyncio.BoundedSemaphore`` does) rather than raising the limit silently.

The hand-over (rather than asyncio's "count it free, then wake the first waiter, who takes it")
makes a wake-up final: the woken waiter already holds its slot, so nothing can take it in between,
and a cancellation after the hand-over is the only case that gives one back.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """At most ``limit`` slots held at once; a taker finding none free waits its turn."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"a slot limit must be >= 0, not {limit}")
        self.limit = limit
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()
        """Takers waiting for a slot, oldest first; a cancelled one leaves as it is cancelled."""

    @property
    def free(self) -> int:
        """Slots neither held nor handed over."""
        return self._free

    @property
    def waiting(self) -> int:
        """Takers waiting for a slot (handed-over ones are no longer waiting)."""
        return sum(1 for fut in self._waiters if not fut.done())

    def locked(self) -> bool:
        """True when a taker would have to wait."""
        return self._free == 0

    def try_take(self) -> bool:
        """Take a free slot without waiting: True when one was free (then the caller holds it)."""
        if self._free > 0:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting behind the takers already waiting when none is free. Cancelled while
        waiting, it holds none; cancelled after a slot was handed to it, it passes that slot on."""
        if self._free > 0:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot, but this taker is going away: the next one gets it
            else:
                fut.cancel()
                if fut in self._waiters:  # else a release already dropped it from the queue
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back: to the first taker still waiting, else to the free count."""
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        if self._free >= self.limit:
            raise ValueError("a slot was released more times than it was taken")
        self._free += 1
