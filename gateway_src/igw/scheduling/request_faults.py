"""Which requests failed where, so that a request failing at two places is taken for the fault.

Why: passive failure detection (a pod's outlier detection at tier 1, a cluster's at tier 2) counts
each failed request against the place that answered it. A request whose body makes every engine
fail (a "poison" request: an input that crashes its request processing, a 500) fails wherever it
goes, and the OpenAI and Anthropic SDKs retry a 500 twice by themselves: one caller repeating such
a request made healthy places look failing and drained them (docs/operating.md, sessions s33-s34).

:class:`RequestFaultMemory` keeps, for :data:`REQUEST_MEMORY_S`, the places (pods, clusters: any
hashable key) each failed request body failed at, by the body's digest. The caller routes the same
body again away from those places (:meth:`RequestFaultMemory.failed_at`) and reports each failure
with its digest (:meth:`RequestFaultMemory.record`); once the body failed at a second place it is the
request's fault: that failure is not counted, the first place's is taken back by the caller, and the
body's later failures count nowhere. If it succeeds at the second place, the first failure stands. A
failing place still fails distinct requests, which each count once.

One class for both tiers, so the rule and its bounds are one fact. It knows nothing of what a
failure count is: the caller keeps those and takes back what :meth:`record` names.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

REQUEST_MEMORY_S: Final = 60.0
"""Seconds the places a request failed at are kept (a client's retries come within seconds)."""

REQUEST_MEMORY_CAPACITY: Final = 4096
"""Failed requests kept at most, the oldest dropped first (bounded memory whatever the failure rate)."""

Place = TypeVar("Place", bound=Hashable)


class _FailedRequest(Generic[Place]):
    """The places one request body failed at, and whether it is taken for the fault."""

    __slots__ = ("at", "places", "poison")

    def __init__(self, place: Place, at: float) -> None:
        self.places = {place}
        self.at = at
        """When it first failed: kept :data:`REQUEST_MEMORY_S` from then."""
        self.poison = False
        """It failed at two places: its failures count against none."""


class RequestFaultMemory(Generic[Place]):
    """Failed request digests and the places they failed at (the module's rule)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: OrderedDict[int, _FailedRequest[Place]] = OrderedDict()
        """Request digest -> where it failed, oldest first; empty while nothing failed, so a caller
        checking it first digests no body."""

    def active(self, now: float) -> bool:
        """Whether a request failed in the last :data:`REQUEST_MEMORY_S` (older ones are dropped
        here): only then is a request's body worth digesting to look it up."""
        entries = self.entries
        while entries:
            if now - next(iter(entries.values())).at <= REQUEST_MEMORY_S:
                return True
            entries.popitem(last=False)
        return False

    def failed_at(self, digest: int, *, now: float) -> frozenset[Place]:
        """The places the request with ``digest`` failed at in the last :data:`REQUEST_MEMORY_S`
        (for its next try to avoid); empty if none."""
        seen = self.entries.get(digest)
        if seen is None:
            return frozenset()
        if now - seen.at > REQUEST_MEMORY_S:
            del self.entries[digest]
            return frozenset()
        return frozenset(seen.places)

    def record(self, place: Place, digest: int, *, now: float) -> frozenset[Place] | None:
        """The request ``digest`` failed at ``place``. ``None``: the failure is the place's (the
        body's first failure here, or the same place again with no other tried); else the request's
        fault and not to be counted: the places it failed at, this one included, when it is taken
        for the fault by this failure (the caller takes back the others' counts, once), or an empty
        set when it already was."""
        entries = self.entries
        seen = entries.get(digest)
        if seen is None or now - seen.at > REQUEST_MEMORY_S:
            entries[digest] = _FailedRequest(place, now)
            entries.move_to_end(digest)
            while len(entries) > REQUEST_MEMORY_CAPACITY:
                entries.popitem(last=False)
            return None
        if seen.poison:
            seen.places.add(place)
            return frozenset()
        if place in seen.places:
            return None  # the same place again (no other to try): its failure counts
        seen.poison = True
        seen.places.add(place)
        return frozenset(seen.places)

    def adopt(self, previous: RequestFaultMemory[Place]) -> None:
        """Share ``previous``'s entries (a reload rebuilt its owner)."""
        self.entries = previous.entries
