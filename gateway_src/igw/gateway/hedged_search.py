"""A retrieval's search for a stored response, hedged: the next pod is asked when one is slow.

A tier-1 search for a stored response no scheduler here remembers asks the pools' pods for it
(:func:`igw.gateway.inference._forward`, :mod:`igw.gateway.response_search`). Asked one after
another, each frozen pod before the holder cost the client the search timeout
(:data:`~igw.gateway.response_search.SEARCH_TIMEOUT_S`): a few of them, and the global router's
per-cluster search bound (:data:`igw.global_router.server.SEARCH_TIMEOUT_S`) passed first, a 504
although that cluster held the response (docs/gateway.md has the numbers). A retrieval that is not
streamed (``GET`` of a response or its input items) is hedged instead: when the pod asked last has
not answered within :data:`HEDGE_DELAY_S` the next is asked too, at most :data:`HEDGE_WIDTH` at
once; a pod's answer (a 404 among them) asks the next at once. The first answer the caller's
``decide`` takes wins, and the attempts still in flight are cancelled (their upstream connections
closed, never returned to the pool half-read) before :func:`hedged` returns, which names those that
had been silent for :data:`HEDGE_DELAY_S` or more (the caller has them asked last for a while, as
the pods a search stopped waiting for). Frozen pods before the holder cost the client one search
timeout, not one each, and the searches after it, which ask those pods last, none.

Each attempt holds its answer (``hold_bytes`` of :func:`igw.gateway.upstream.exchange`): nothing
reaches the client before the winner is chosen. A streamed replay (``?stream=true``) and a
continuation keep the sequential search: their answers are relayed as they arrive, so two attempts
could not both be in flight without two writers to one client, and a continuation's attempt on the
pod that holds it is a generation (hedged, the others' 404s are all they would save). ``DELETE`` and
``cancel`` stay sequential too: they change what the pod stores, and an answer the hedge could not
hold would have to be asked for again (:attr:`~igw.gateway.upstream.ExchangeResult.unheld`).
A retrieval of a response whose pod is remembered asks that pod alone first, then, if it is silent for
the search timeout, hedges over the others (``_holder_first`` in :mod:`igw.gateway.inference`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

HEDGE_DELAY_S: Final = 0.3
"""Seconds a hedged search waits for the pod asked last before it asks the next one too. A pod that
stores the response answers a retrieval at once (no generation: a read of its store), and one that
does not answers 404 at once, so a pod silent this long is probably stalled; short enough that two
stalled pods before the holder cost under a second, long enough that a healthy fleet is asked one pod
at a time."""

HEDGE_WIDTH: Final = 3
"""Attempts of one hedged search in flight at most: the pod round trips a search of made-up ids
costs at once stay bounded (``SEARCHES_IN_FLIGHT`` x this per process)."""

T = TypeVar("T")

WIN: Final = "win"
"""``decide``'s verdict: this outcome ends the search (the others in flight are cancelled)."""
NEXT: Final = "next"
"""``decide``'s verdict: the search goes on (a miss: the next pod is asked at once)."""
LAST: Final = "last"
"""``decide``'s verdict: no further pod is asked, but the attempts in flight may still win."""


async def hedged(
    candidates: Sequence[str],
    ask: Callable[[str], Awaitable[T]],
    decide: Callable[[str, T | BaseException], str],
    *,
    delay_s: float = HEDGE_DELAY_S,
    width: int = HEDGE_WIDTH,
    ask_until: float | None = None,
    silent_s: float | None = None,
) -> list[str]:
    """Ask ``candidates`` in their order with ``ask`` (the next one once the one asked last has not
    answered within ``delay_s``, or at once when an attempt ended, ``width`` in flight at most) and
    hand each outcome - its result, or the exception it raised - to ``decide`` as it comes (those
    that end together in the candidates' order), until ``decide`` answers :data:`WIN` or every
    attempt has ended. The attempts in flight then are cancelled and awaited: when this returns, none
    runs; it returns those of them asked ``silent_s`` (``None``: ``delay_s``) or more before (silent
    that long: a search passes its per-pod timeout, so that only a pod silent as long as one the
    search stopped waiting for is asked last, since session s48). Cancelled
    itself (the client left), it cancels them the same way. ``ask_until`` (:func:`time.monotonic`):
    no candidate is asked from then on (a search's deadline: the attempts in flight end by their own
    bound, and the search with them, some candidates never asked)."""
    if width < 1 or delay_s < 0:
        raise ValueError("width must be at least 1, delay_s not negative")
    silent_after = delay_s if silent_s is None else silent_s
    order = {key: index for index, key in enumerate(candidates)}
    waiting = iter(candidates)
    pending: dict[asyncio.Task[T], str] = {}
    loop = asyncio.get_running_loop()
    asked: dict[str, float] = {}  # candidate -> when it was asked
    more = True  # candidates left to ask
    try:
        while True:
            if more and ask_until is not None and time.monotonic() >= ask_until:
                more = False  # past the search's deadline: the candidates left are not asked
            if more and len(pending) < width:
                key = next(waiting, None)
                if key is None:
                    more = False
                else:
                    pending[asyncio.ensure_future(ask(key))] = key
                    asked[key] = loop.time()
            if not pending:
                return []
            hedge = more and len(pending) < width
            done, _ = await asyncio.wait(
                pending, timeout=delay_s if hedge else None, return_when=asyncio.FIRST_COMPLETED
            )
            for task in sorted(done, key=lambda ended: order[pending[ended]]):
                key = pending.pop(task)
                failed = task.exception()
                verdict = decide(key, failed if failed is not None else task.result())
                if verdict == WIN:
                    now = loop.time()
                    return [key for key in pending.values() if now - asked[key] >= silent_after]
                if verdict == LAST:
                    more = False
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            for task in pending:  # ended with the winner, or cancelled: their outcomes let go
                if not task.cancelled():
                    task.exception()
