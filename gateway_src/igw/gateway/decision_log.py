""" "Why this pod": the last N scheduling decisions, kept in a bounded ring buffer for operators.

Each entry says which endpoints were candidates, every scored endpoint's per-scorer (weighted)
scores and total, which endpoints were excluded before scoring and by what (a filter, stale
metrics, the context window), the picker's choice and its fallbacks. Entries hold routing facts
only - request id, model, scheduler, endpoint keys and numbers - never a prompt, a header or a
token, so the page cannot leak credentials.

Off unless the gateway is started with a decision-log size (``igw serve --debug-decisions N``);
:mod:`igw.gateway.debug_api` serves it behind an operator token.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Final

from igw.errors import IgwGatewayError
from igw.scheduling.types import RoutingDecision

MAX_CAPACITY: Final = 10_000
"""Upper bound on the ring size, so a mistyped flag cannot hold unbounded memory."""


class DecisionLog:
    """A ring buffer of the latest ``capacity`` decisions (older ones are dropped)."""

    def __init__(self, capacity: int) -> None:
        if not 1 <= capacity <= MAX_CAPACITY:
            raise IgwGatewayError(f"decision log capacity must be 1..{MAX_CAPACITY}, got {capacity}")
        self.capacity = capacity
        self._entries: deque[dict[str, Any]] = deque(maxlen=capacity)

    def record(
        self,
        *,
        request_id: str,
        scheduler: str,
        model: str | None,
        candidates: int,
        decision: RoutingDecision,
        elapsed_s: float,
    ) -> None:
        """Append one decision (the scores mapping is copied into plain JSON-ready values)."""
        ranked = [
            {"endpoint": key, "rank": rank, "scores": {name: round(v, 6) for name, v in per.items()}}
            for rank, (key, per) in enumerate(decision.scores.items())
        ]
        entry = {
            "time": time.time(),
            "request_id": request_id,
            "scheduler": scheduler,
            "model": model,
            "outcome": decision.kind.value,
            "chosen": decision.endpoint,
            "fallbacks": list(decision.fallbacks),
            "candidates": candidates,
            "scored": ranked,
            "removed": [{"endpoint": key, "by": why} for key, why in decision.removed.items()],
            "reason": decision.reason,
            "decision_us": round(elapsed_s * 1e6, 1),
        }
        self._entries.append(entry)

    def latest(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Newest first, at most ``limit`` (all kept entries when ``None``)."""
        entries = list(self._entries)
        entries.reverse()
        return entries if limit is None else entries[:limit]
