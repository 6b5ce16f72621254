"""When the per-endpoint counters of an endpoint that left its pool are dropped from ``/metrics``.

``igw_endpoint_picks_total`` and ``igw_endpoint_ejections_total`` are counters labelled by scheduler
and endpoint (``host:port``). Kept for the life of the process they grew with every pod address
the gateway ever routed to: with autoscaling or a Deployment's rollouts, 1,000 successive pod
addresses left 2,000 dead samples (200 KB) on every ``/metrics`` page, and their children in memory.

An endpoint's series are dropped once it has been out of every pool for :data:`DEPARTED_GRACE_S`,
not at once: Prometheus reads the final count of a pod that just left (the chart scrapes every
15 s), and a pod that drops out of discovery for a moment (a readiness probe failing under load)
and returns keeps counting instead of restarting from 0. One that returns after its series were
dropped starts from 0, which ``rate()`` and ``increase()`` read as a counter reset.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

DEPARTED_GRACE_S: Final = 300.0
"""Seconds an endpoint must have been out of its pool before its counters are dropped."""

EndpointLabels = tuple[str, str]
"""``(scheduler, endpoint)``: the labels of one endpoint's counters."""


class DepartedEndpoints:
    """Since when each endpoint with counters has been missing from the pools."""

    def __init__(self, grace_s: float = DEPARTED_GRACE_S) -> None:
        self.grace_s = grace_s
        self._since: dict[EndpointLabels, float] = {}

    def expired(
        self, tracked: Iterable[EndpointLabels], present: Collection[EndpointLabels], now: float
    ) -> list[EndpointLabels]:
        """The ``tracked`` endpoints (those with counters) absent from ``present`` (every pool's
        endpoints now) for at least the grace period: their series are to be dropped. An absent
        endpoint starts its grace period now; one present again is no longer departed."""
        since = self._since
        gone: list[EndpointLabels] = []
        for labels in tracked:
            if labels in present:
                since.pop(labels, None)
                continue
            left = since.setdefault(labels, now)
            if now - left >= self.grace_s:
                gone.append(labels)
        for labels in gone:
            del since[labels]
        return gone
