""" "Why this pod": the last N scheduling decisions, kept in a bounded ring buffer for operators.

Each entry says which endpoints were candidates, every scored endpoint's per-scorer (weighted)
scores and total, which endpoints were excluded before scoring and by what (a filter, stale
metrics, the context window), the picker's choice and its fallbacks. Entries hold routing facts
only - request id, model, scheduler, endpoint keys and numbers - never a prompt, a header or a
token, so the page cannot leak credentials.

Off unless the gateway is started with a decision-log size (``igw serve --debug-decisions N``);
:mod:`igw.gateway.debug_api` serves it to callers presenting the operator token, and a request that
carries the token in :data:`DEBUG_TOKEN_HEADER` gets its own decision back in
:data:`DECISION_HEADER` (the token header is never forwarded to the model server).
"""

from __future__ import annotations

import hmac
import time
from collections import deque
from itertools import islice
from typing import Any, Final

import orjson

from igw.errors import IgwGatewayError
from igw.scheduling.types import RoutingDecision

MAX_CAPACITY: Final = 10_000
"""Upper bound on the ring size, so a mistyped flag cannot hold unbounded memory."""
DEBUG_TOKEN_HEADER: Final = "X-Igw-Debug-Token"
DECISION_HEADER: Final = "X-Igw-Decision"
HEADER_TOP_N: Final = 5
"""Scored endpoints listed in :data:`DECISION_HEADER` (the header stays small on large pools)."""
ENTRY_TOP_N: Final = 32
"""Scored endpoints (best first), fallbacks and removed endpoints an entry lists; ``scored_total``,
``fallbacks_total`` and ``removed_total`` count them all. The picker bounds the scored and fallback
lists; the removed ones are as many as the pool's stale endpoints. Until session s42 an entry listed
every one: with half of a 1,000-endpoint pool stale (a scrape outage on some nodes) an entry held
500 removed endpoints, 98 MB per 1,000 entries (1 GB at :data:`MAX_CAPACITY`, copied on the request
path), and ``/debug/decisions?limit=1000`` serialised 32 MB on the event loop (0.27 s)."""


class DecisionLog:
    """A ring buffer of the latest ``capacity`` decisions (older ones are dropped), readable with
    ``token``."""

    def __init__(self, capacity: int, *, token: str) -> None:
        if not 1 <= capacity <= MAX_CAPACITY:
            raise IgwGatewayError(f"decision log capacity must be 1..{MAX_CAPACITY}, got {capacity}")
        self.capacity = capacity
        self._token = token.encode()
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)

    def record(
        self,
        *,
        request_id: str,
        scheduler: str,
        model: str | None,
        candidates: int,
        decision: RoutingDecision,
        elapsed_s: float | None,
        queued_s: float | None = None,
        asked_alone: str | None = None,
    ) -> None:
        """Append one decision (the scores mapping is copied into plain JSON-ready values; at most
        :data:`ENTRY_TOP_N` of each list, so an entry's size does not grow with the pool).

        ``queued_s``: the decision was the re-pick that dispatched a request after it waited this
        long in its flow-control queue (the saturated decision that queued it is its own entry);
        ``elapsed_s`` is ``None`` when the pick was not timed (the queue's re-picks).

        ``asked_alone``: the decision was no choice among the pool but the pick among this endpoint
        alone, made when a continuation's search sent the request to it, a pod of another canary
        version's pool (:meth:`~igw.scheduling.scheduler.Scheduler.pick_sent`); the request went
        there whatever ``chosen`` says (``null`` or ``outcome`` other than ``picked``: a filter,
        outlier detection or saturation would have left it out). Until session s50 such picks
        were in no entry: the log did not say why, or that, that pool's pod was asked."""
        ranked = [
            {"endpoint": key, "rank": rank, "scores": {name: round(v, 6) for name, v in per.items()}}
            for rank, (key, per) in enumerate(islice(decision.scores.items(), ENTRY_TOP_N))
        ]
        entry = {
            "time": time.time(),
            "request_id": request_id,
            "scheduler": scheduler,
            "model": model,
            "outcome": decision.kind.value,
            "chosen": decision.endpoint,
            "fallbacks": list(decision.fallbacks[:ENTRY_TOP_N]),
            "fallbacks_total": len(decision.fallbacks),
            "candidates": candidates,
            "scored": ranked,
            "scored_total": len(decision.scores),
            "removed": [
                {"endpoint": key, "by": why} for key, why in islice(decision.removed.items(), ENTRY_TOP_N)
            ],
            "removed_total": len(decision.removed),
            "reason": decision.reason,
            "decision_us": None if elapsed_s is None else round(elapsed_s * 1e6, 1),
        }
        if queued_s is not None:
            entry["queued_ms"] = round(queued_s * 1000, 3)
        if asked_alone is not None:
            entry["asked_alone"] = asked_alone
        self._entries.append(entry)

    def opens(self, presented: str | None) -> bool:
        """Whether ``presented`` is the operator token (compared in constant time)."""
        # ``surrogateescape``: a header's bytes that are not UTF-8 arrive as surrogates, which a plain
        # ``encode()`` refused with an exception (a 500 and a logged traceback for any client)
        return presented is not None and hmac.compare_digest(
            presented.encode(errors="surrogateescape"), self._token
        )

    def latest(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Newest first, at most ``limit`` (all kept entries when ``None``)."""
        entries = list(self._entries)
        entries.reverse()
        return entries if limit is None else entries[:limit]


def decision_header(decision: RoutingDecision) -> str:
    """A compact JSON summary of one decision for :data:`DECISION_HEADER`: the choice, the top
    :data:`HEADER_TOP_N` endpoints with their per-scorer scores, what excluded the first
    :data:`HEADER_TOP_N` removed ones and how many were removed.

    The removed endpoints are bounded like the scored ones: until session s42 the header named every
    one, about 45 bytes each, so with 500 of a 1,000-endpoint pool stale it was 22 KB, over the 8 KB a
    response header line may have at aiohttp's client (a 400 ``Got more than 8190 bytes``) and at
    proxies' default buffers: the request with the debug token failed exactly when it was needed."""
    top = list(decision.scores.items())[:HEADER_TOP_N]
    summary = {
        "chosen": decision.endpoint,
        "scored": {key: {name: round(v, 4) for name, v in per.items()} for key, per in top},
        "removed": dict(islice(decision.removed.items(), HEADER_TOP_N)),
        "removed_total": len(decision.removed),
    }
    return orjson.dumps(summary).decode()
