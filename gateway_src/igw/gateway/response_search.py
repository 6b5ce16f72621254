"""What bounds the search for a stored response that no scheduler here remembers.

A continuation (``previous_response_id``) or a stored response's retrieval whose pod this process
does not know is asked of the pool's pods one after another (:func:`igw.gateway.inference._forward`,
at most ``RESPONSE_SEARCH_LIMIT`` of them): up to 32 pod round trips for one request. Two things
bound what that costs the pods, which nothing bounded before session s33 but the tenant's request
limits:

- **An id nobody had is not searched for again at once.** A search in which every pod asked answered
  404 leaves the id here for :data:`UNFOUND_TTL_S`; a request for it in that time is answered 404
  ``response_not_found`` without asking a pod. A client polling a response that is gone (its pod
  restarted, the engine's store evicted it) cost every pod a round trip per poll; now one per
  :data:`UNFOUND_TTL_S`. The time is short because an id can appear later: vLLM stores a streamed,
  non-background response when it completes, so a client that reads the id from
  ``response.created`` and polls another replica before then finds it nowhere for a while. A pod
  found storing the id after all takes it off the list at once (every entry of it).
  An entry is the id *within* a search's context (:func:`search_context`: the caller scope and the
  pools searched, as the global router keys its list by scope and clusters): until session s46 tier 1
  listed the id alone, so one tenant's vain search answered every other tenant's retrieval of the id
  404 for the TTL, even one allowed pools the first may not search - whoever learnt an id (a log
  line) could deny its retrieval to its owner, again and again.
- **At most :data:`SEARCHES_IN_FLIGHT` searches at once per process.** A further one is answered 503
  ``response_search_busy`` with ``Retry-After`` 1 or 2 (1 s spread as every tier-1 refusal's,
  :mod:`igw.scheduling.retry_spread`; the OpenAI SDK retries a 503 by itself), never a
  404 that would tell the client its response is gone. Ids made up by a caller each cost a full
  search, so the limit is what bounds their load on the pods: at most that many searches' round
  trips in flight (a hedged retrieval's: up to :data:`~igw.gateway.hedged_search.HEDGE_WIDTH` each),
  whatever the request rate.

**A caller scope's share** (the global router since session s46, tier 1 since s46 too): a search
begun with a scope (:meth:`ResponseSearches.begin`) is refused when ``per_scope`` of that scope's run
already, so one tenant looping made-up ids holds at most that many of the ``limit`` places and the
others' searches still run (before, every place: every other tenant's search refused). Callers of the
one scope ``""`` (no tenant, no subject: a gateway without authentication) pass no scope.

**A pod that does not answer** (tier 1, since session s46, as the global router's clusters): a
retrieval's search waits :attr:`ResponseSearches.search_timeout_s` for each pod's answer head, then
asks the next pod (a stored response's answer starts at once; a frozen pod held the search, and its
place, until ``responseTimeout``, 600 s by default, and the search then ended on that pod's 504
without asking the others). Found elsewhere, that answer; else the stalled pod's 504, never a 404
(it may store the response), and the id is not listed as found nowhere. A continuation's place is
given back ``search_timeout_s`` after it was taken (:class:`SearchPlace`) if its forward has not
ended by then: a pod that has not answered 404 by then is generating the answer (vLLM answers an
unknown ``previous_response_id`` before any generation), no longer searching; held for the whole
answer, a tenant's long generations took its share of the places for minutes.

**A pod that was slow to search is asked last** (since session s47): a pod the search stopped
waiting for is remembered for :data:`SLOW_TTL_S` (:meth:`ResponseSearches.slow`, at most
:data:`SLOW_CAPACITY` pods) and the retrievals' searches in that time ask it after the others
(:meth:`ResponseSearches.ordered`); a pod that answers a search in time is forgotten at once. Until
then every search of another id paid each frozen pod's timeout before the holder again. A retrieval
that is not streamed is also hedged (:mod:`igw.gateway.hedged_search`).

**A search as a whole has a deadline** (since session s47): :data:`SEARCH_DEADLINE_S` from its start,
below the global router's per-cluster bound, hedged or one pod after another. Each pod's bound alone
let a search past enough frozen pods outlast the router's wait for the whole cluster (a 504 from the
router for a cluster whose gateway was healthy, and tier 2 could not tell such a cluster from a frozen
gateway). A pod still silent at the deadline: its 504 (``upstream_timeout``); pods never asked, none
silent: a 504 ``upstream_timeout`` saying so, never the 404 of those asked; the id is not listed as
found nowhere either way.

Per process, like the retry budget (each worker of ``igw serve --workers N`` its own): a search is
rare outside a replica's restart or a scale-out of the gateway itself.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

from igw.gateway.hedged_search import HEDGE_DELAY_S

UNFOUND_TTL_S: Final = 5.0
"""Seconds an id that no pod asked had is answered 404 without a search."""

UNFOUND_CAPACITY: Final = 4096
"""Unfound entries (an id within a search's context) kept at most, the oldest dropped first: ids made
up at any rate, by any number of callers, take bounded memory."""

SEARCHES_IN_FLIGHT: Final = 16
"""Searches one gateway process runs at once."""

SEARCHES_PER_SCOPE: Final = 4
"""Searches of one caller scope a process (a gateway's, a global router replica's) runs at once (a
quarter of its places)."""

SEARCH_TIMEOUT_S: Final = 2.0
"""Seconds a tier-1 search waits for one pod's answer head (a retrieval's: a stored response is
answered at once), and holds a continuation's place. Below the global router's per-cluster search
timeout (:data:`igw.global_router.server.SEARCH_TIMEOUT_S`, 5 s), so that a cluster whose gateway
passes a frozen pod (or two) on its way to the holder still answers the router in time; equal, the
router gave that cluster up first."""

SEARCH_DEADLINE_S: Final = 4.5
"""Seconds a tier-1 retrieval's, deletion's or cancel's search lasts at most, every pod asked
together (since session s47; before, only each pod's :data:`SEARCH_TIMEOUT_S` bounded it: past 8
frozen pods a ``GET`` took 6.3 s, a ``DELETE`` 16.0 s). Below the global router's per-cluster search
timeout (:data:`igw.global_router.server.SEARCH_TIMEOUT_S`, 5 s), with room for the hop: a cluster's
gateway answers a search the router makes in time whatever its pods do. A pod is asked only while
:data:`SEARCH_ASK_LEAST_S` or more of it is left, and for what is left of it at
most; one still silent at the deadline makes the answer its 504 unless another pod's answer wins."""

SEARCH_ASK_LEAST_S: Final = HEDGE_DELAY_S
"""Seconds of a search's deadline (:data:`SEARCH_DEADLINE_S`) that must be left for a pod to be asked:
a pod is judged slow when silent this long (the hedge's delay), so a pod asked later could not answer
in time to show it is not."""

SEARCH_REFUSAL_REASONS: Final = ("unfound", "busy", "scope_busy")
"""Why a search for a stored response was refused without asking a pod (a cluster): an id the
caller's search found nowhere moments ago (:meth:`ResponseSearches.recently_unfound`), and the two
of :meth:`ResponseSearches.busy`. The ``reason`` of both tiers' ``response_searches_refused_total``
counters, each series there from the start."""

SLOW_TTL_S: Final = 60.0
"""Seconds a pod a search stopped waiting for is asked last by the searches after it."""

SLOW_CAPACITY: Final = 1024
"""Slow pods remembered at most, the oldest forgotten first (a fleet larger than this has more pods
than a search asks: ``RESPONSE_SEARCH_LIMIT``)."""

SEARCH_TIMEOUT: Final = "search-timeout"
"""The ``cause`` of ``igw_upstream_retries_total`` for a pod a search stopped waiting for."""


def search_context(scope: str, pools: Iterable[str]) -> str:
    """What a search's outcome is listed within besides the id (:meth:`ResponseSearches.unfound`):
    the caller ``scope`` (:func:`~igw.gateway.guards.caller_scope`; one tenant's misses never answer
    another's request) and the names of the ``pools`` searched (a caller allowed other models asks
    other pods), each part length-prefixed so that no two differ only in where one ends."""
    names = ",".join(f"{len(name)}:{name}" for name in sorted(set(pools)))
    return f"{len(scope)}:{scope}|{names}"


class ResponseSearches:
    """The ids recently searched for in vain, and the searches in flight (the module docstring)."""

    __slots__ = (
        "_contexts",
        "_scopes",
        "_slow",
        "_unfound",
        "capacity",
        "hedge_delay_s",
        "in_flight",
        "limit",
        "per_scope",
        "search_deadline_s",
        "search_timeout_s",
        "ttl_s",
    )

    def __init__(
        self,
        *,
        limit: int = SEARCHES_IN_FLIGHT,
        ttl_s: float = UNFOUND_TTL_S,
        capacity: int = UNFOUND_CAPACITY,
        per_scope: int | None = None,
        search_timeout_s: float = SEARCH_TIMEOUT_S,
        hedge_delay_s: float = HEDGE_DELAY_S,
        search_deadline_s: float = SEARCH_DEADLINE_S,
    ) -> None:
        if limit < 1 or capacity < 1 or ttl_s <= 0 or (per_scope is not None and per_scope < 1):
            raise ValueError("limit, capacity and per_scope must be at least 1, ttl_s positive")
        self.limit = limit
        self.per_scope = per_scope
        """Searches one caller scope may run at once (``None``: no share, the ``limit`` alone)."""
        self._scopes: dict[str, int] = {}
        """Scope -> its searches in flight (those begun with a scope; none kept at 0)."""
        self.ttl_s = ttl_s
        self.search_timeout_s = search_timeout_s
        """How long a tier-1 search waits for one pod, and holds a continuation's place."""
        self.search_deadline_s = search_deadline_s
        """How long a tier-1 retrieval's (deletion's, cancel's) search lasts at most, every pod asked
        together (:data:`SEARCH_DEADLINE_S`)."""
        self.hedge_delay_s = hedge_delay_s
        """How long a hedged retrieval's search waits for the pod asked last before it asks the next
        too (:mod:`igw.gateway.hedged_search`)."""
        self.capacity = capacity
        self.in_flight = 0
        """Searches begun and not ended."""
        self._unfound: OrderedDict[tuple[str, str], float] = OrderedDict()
        """(Id, context) -> when its search ended with every pod asked answering 404, oldest first."""
        self._contexts: dict[str, set[str]] = {}
        """Id -> the contexts it is listed within (:attr:`_unfound`'s keys, by id: :meth:`found`)."""
        self._slow: OrderedDict[str, float] = OrderedDict()
        """Pod -> when a search last stopped waiting for it, oldest first (:meth:`slow`)."""

    def slow(self, endpoint: str, *, now: float) -> None:
        """A search stopped waiting for ``endpoint``'s answer: asked last for :data:`SLOW_TTL_S`."""
        slow = self._slow
        slow[endpoint] = now
        slow.move_to_end(endpoint)
        while len(slow) > SLOW_CAPACITY:
            slow.popitem(last=False)

    def answered(self, endpoint: str) -> None:
        """``endpoint`` answered a search in time: no longer asked last."""
        self._slow.pop(endpoint, None)

    def ordered(self, candidates: list[str], *, now: float) -> list[str]:
        """``candidates`` in their order, those a search stopped waiting for less than
        :data:`SLOW_TTL_S` ago last (in the order they were found slow, the longest ago first)."""
        slow = self._slow
        while slow:
            oldest, when = next(iter(slow.items()))
            if now - when < SLOW_TTL_S:
                break
            del slow[oldest]
        if not slow:
            return candidates
        asked = set(candidates)
        return [key for key in candidates if key not in slow] + [key for key in slow if key in asked]

    def recently_unfound(self, response_id: str, *, now: float, within: str = "") -> bool:
        """Whether a search for ``response_id`` in the context ``within`` (:func:`search_context`)
        found it nowhere less than ``ttl_s`` ago."""
        key = (response_id, within)
        when = self._unfound.get(key)
        if when is None:
            return False
        if now - when < self.ttl_s:
            return True
        self._forget(key)
        return False

    def unfound(self, response_id: str, *, now: float, within: str = "") -> None:
        """Every pod a search for ``response_id`` in the context ``within`` asked answered 404."""
        unfound = self._unfound
        key = (response_id, within)
        unfound[key] = now
        unfound.move_to_end(key)
        self._contexts.setdefault(response_id, set()).add(within)
        while len(unfound) > self.capacity:
            self._forget(next(iter(unfound)))

    def found(self, response_id: str) -> None:
        """A pod stores ``response_id`` (it may have been made since a search missed it): off the
        list in every context (the searches that missed it may ask that pod too)."""
        for within in self._contexts.pop(response_id, ()):
            del self._unfound[(response_id, within)]

    def _forget(self, key: tuple[str, str]) -> None:
        """Take one entry off the list."""
        del self._unfound[key]
        response_id, within = key
        contexts = self._contexts[response_id]
        contexts.discard(within)
        if not contexts:
            del self._contexts[response_id]

    def busy(self, scope: str | None = None) -> str | None:
        """Why a search (of ``scope``, when given) may not begin now: ``"busy"`` when :attr:`limit`
        are in flight, ``"scope_busy"`` when ``per_scope`` of that scope's are; else ``None``."""
        if self.in_flight >= self.limit:
            return "busy"
        if scope is not None and self.per_scope is not None and self._scopes.get(scope, 0) >= self.per_scope:
            return "scope_busy"
        return None

    def begin(self, scope: str | None = None) -> bool:
        """Take a place for one search (of ``scope``); False, nothing taken, when :meth:`busy`."""
        if self.busy(scope) is not None:
            return False
        self.in_flight += 1
        if scope is not None:
            self._scopes[scope] = self._scopes.get(scope, 0) + 1
        return True

    def end(self, scope: str | None = None) -> None:
        """A search begun with :meth:`begin` (with the same ``scope``) ended, whatever its outcome."""
        self.in_flight -= 1
        if scope is not None:
            left = self._scopes.pop(scope, 0) - 1
            if left > 0:
                self._scopes[scope] = left

    def take(self, scope: str | None, *, release_after_s: float) -> SearchPlace | None:
        """A place for one search (of ``scope``), given back when released or ``release_after_s``
        after it was taken, whichever comes first; ``None``, nothing taken, when :meth:`busy`."""
        if not self.begin(scope):
            return None
        return SearchPlace(self, scope, release_after_s=release_after_s)


class SearchPlace:
    """A continuation's place among a process's :class:`ResponseSearches`, given back when its
    forward ends or ``release_after_s`` after it was taken, whichever comes first (the module
    docstring: its search is over by then)."""

    __slots__ = ("_scope", "_searches", "_timer")

    def __init__(self, searches: ResponseSearches, scope: str | None, *, release_after_s: float) -> None:
        self._searches: ResponseSearches | None = searches
        self._scope = scope
        self._timer = asyncio.get_running_loop().call_later(release_after_s, self.release)

    def release(self) -> None:
        """Give the place back (once; later calls do nothing)."""
        searches, self._searches = self._searches, None
        if searches is not None:
            self._timer.cancel()
            searches.end(self._scope)
