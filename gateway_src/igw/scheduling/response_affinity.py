"""Which endpoint stored which response: a Responses API request continuing an earlier response
(``previous_response_id``) goes to the pod that answered it.

Why the scheduler needs it: vLLM and SGLang keep the responses they store (``store``, vLLM with
``VLLM_ENABLE_RESPONSES_API_STORE``) in the serving process's memory, so a continuation finds its
conversation only on the pod that produced it; any other pod answers 404 ``Response with id ... not
found``. A load-aware pick sends a conversation's next turn wherever the queues are shortest, which
on a pool of N pods fails (N - 1) / N of the continuations.

The gateway tells the scheduler each stored response's id with the request's outcome
(``RequestOutcome.response_id``); a request whose ``RoutingRequest.previous_response_id`` is known
is picked among that endpoint alone, whatever its load (a 429 with ``Retry-After`` from a full pod
beats a certain 404 elsewhere). An id this scheduler does not know (made before a restart, by another
gateway replica, or forgotten past :data:`DEFAULT_CAPACITY`) is picked as any request is. The ids
travel to the other workers of an ``igw serve --workers N`` group as event notes (named
:data:`RESPONSE_NOTES`), since a conversation's turns come over different connections and so to
different workers; so does an endpoint's disowning (:meth:`ResponseAffinity.disown`, since session
s46: before, the other workers kept sending that response's polls to the pod that lied about it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from itertools import islice
from typing import Final

from igw.scheduling.cycle import CycleContext
from igw.scheduling.types import EndpointKey, EndpointView

RESPONSE_NOTES: Final = "@response-affinity"
"""The name a stored response's note travels under between the workers of a group (not a plugin's)."""

DISOWNED: Final = "disowned"
"""The second item of a note that forgets a response's endpoint in the other workers
(:meth:`ResponseAffinity.learn_pick`): ``[response id, "disowned"]``."""

RESPONSE_SEARCH: Final = "response-search"
"""The ``cause`` of the retry counters (tier 1's per pod, tier 2's per cluster) for one asked in a
search for a response no one here is known to store, that did not have it."""

DEFAULT_CAPACITY: Final = 65_536
"""Response ids remembered per scheduler, the least recently used forgotten first: about 8 MB of
ids and keys at most, and a conversation idle past that many newer responses has most likely been
evicted from the engine's own store too."""


class ResponseAffinity:
    """Response id -> the endpoint that stored it, bounded, least recently used forgotten first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.name = RESPONSE_NOTES
        """Its name among the schedulers' note sharers (:mod:`igw.scheduling.pick_notes`)."""
        self.capacity = capacity
        self._where: OrderedDict[str, EndpointKey] = OrderedDict()

    def __len__(self) -> int:
        return len(self._where)

    def remember(self, response_id: str, endpoint: EndpointKey) -> None:
        """``endpoint`` answered the response ``response_id``."""
        where = self._where
        where[response_id] = endpoint
        where.move_to_end(response_id)
        if len(where) > self.capacity:
            where.popitem(last=False)

    def most_recent(self, limit: int) -> list[tuple[str, EndpointKey]]:
        """The ``limit`` most recently used ``(response id, endpoint)`` pairs, least recent first (the
        order :meth:`remember` rebuilds them in): what a worker that joins late is told."""
        where = self._where
        return list(islice(reversed(where.items()), limit))[::-1]

    def endpoint_of(self, response_id: str) -> EndpointKey | None:
        """The endpoint that stored ``response_id`` (``None``: not known here); a continuation keeps
        its conversation's id among the recently used."""
        endpoint = self._where.get(response_id)
        if endpoint is not None:
            self._where.move_to_end(response_id)
        return endpoint

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """Picks teach it nothing: its notes are the stored responses, sent as their outcomes arrive."""
        return None

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Another worker's request stored a response on ``endpoint`` (``note`` is ``[response id]``),
        or found ``endpoint`` answering its retrieval with another response (``[response id,``
        :data:`DISOWNED```]``: :meth:`disown`); ``ValueError`` for any other note."""
        if (
            not isinstance(note, list | tuple)
            or len(note) not in (1, 2)
            or not isinstance(note[0], str)
            or not note[0]
            or (len(note) == 2 and note[1] != DISOWNED)
        ):
            raise ValueError(
                f"{RESPONSE_NOTES}: a note is [response id] or [response id, {DISOWNED!r}], "
                "the id a non-empty string"
            )
        if len(note) == 2:
            self.disown(note[0], endpoint)
        else:
            self.remember(note[0], endpoint)

    def disown(self, response_id: str, endpoint: EndpointKey) -> bool:
        """``endpoint``, remembered as ``response_id``'s, answered its retrieval with another response:
        no proof it stores that one, so it is forgotten there (the next request for it searches).
        Whether it was remembered there (and so is forgotten now)."""
        if self._where.get(response_id) != endpoint:
            return False
        del self._where[response_id]
        return True

    def forget(self, keys: Iterable[EndpointKey]) -> None:
        """Endpoints left the pool: the responses they stored went with them (a pod that comes back
        has an empty store)."""
        gone = set(keys)
        if gone:
            for response_id in [r for r, endpoint in self._where.items() if endpoint in gone]:
                del self._where[response_id]

    def adopt(self, previous: ResponseAffinity) -> None:
        """Share ``previous``'s memory (a reload rebuilt the scheduler): a conversation's next turn
        still finds its pod."""
        self._where = previous._where
