"""Fleet metrics of the global router as CloudWatch Embedded Metric Format (EMF) documents.

``igw global serve --emf-interval S`` writes, every ``S`` seconds, the interval's deltas of the
router's fleet counters (:class:`~igw.global_router.metrics.FleetMetrics`) as EMF lines on stdout:
routing decisions by cluster, region and reason; failover events by cluster and reason; recoveries
by cluster; rate-limit refusals by model and limit (summed over tenants, whose number is not
bounded by the configuration); per cluster the requests sent and the attempts that failed
there and moved on (by cause); outages of the heartbeat store by reason; and per cluster the answers
whose usage the router could not read (by reason) and the poll answers that named another response
(the last three since session s44); and the token bounds of background responses its local
rate-limit buckets did not hold (since session s45); per cluster its redirects refused (since
s46); per cluster its 401/407 answers to verified callers refused, and per reason the searches for
stored responses it refused (both since s47). The counters read are those
:data:`~igw.global_router.emf_metrics.FLEET_METRICS` names, so a metric added there is reported.
Documents come from :func:`igw.gateway.emf.emf_document`,
the same builder tier 1 uses, so both tiers share one structure and :data:`igw.gateway.emf.EMF_SCHEMA`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from prometheus_client import Counter

from igw.gateway.emf import emf_document
from igw.global_router.emf_metrics import DEFAULT_FLEET_NAMESPACE, FLEET_METRICS
from igw.global_router.metrics import FleetMetrics

_Key = tuple[str, tuple[tuple[str, str], ...]]


class FleetEmfReporter:
    """Builds the interval's fleet documents from one router replica's counters."""

    def __init__(
        self,
        metrics: FleetMetrics,
        *,
        namespace: str = DEFAULT_FLEET_NAMESPACE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._metrics = metrics
        self._namespace = namespace
        self._clock = clock
        self._previous: dict[_Key, float] = {}

    def documents(self) -> list[dict[str, Any]]:
        """This interval's documents, one per dimension combination that moved (the first call
        reports everything since start)."""
        return self._build(int(self._clock() * 1000))

    def snapshot(self) -> Callable[[], list[str]]:
        """The interval's timestamp read now, on the event loop; the returned call builds and
        serialises the documents on any thread (the counters are prometheus_client's, read under
        their locks), off the loop: at a fleet of hundreds of clusters the build is tens of ms."""
        timestamp = int(self._clock() * 1000)
        return lambda: [orjson.dumps(document).decode() for document in self._build(timestamp)]

    def _build(self, timestamp: int) -> list[dict[str, Any]]:
        current = dict(self._samples())
        delta = {k: v - self._previous.get(k, 0.0) for k, v in current.items()}
        self._previous = current
        m = self._metrics
        out: list[dict[str, Any]] = []

        def add(family: Counter, name: str, dims: tuple[tuple[str, str], ...]) -> None:
            sums: dict[tuple[str, ...], float] = defaultdict(float)
            for labels, value in _family_delta(delta, family):
                sums[tuple(labels.get(label, "") for label, _ in dims)] += value
            for values, total in sorted(sums.items()):
                if total > 0:
                    dimensions = {dim: v for (_, dim), v in zip(dims, values, strict=True)}
                    out.append(self._document(timestamp, dimensions, name, total))

        for metric in FLEET_METRICS:
            add(getattr(m, metric.family), metric.name, metric.dimensions)
        return out

    def lines(self) -> Iterator[str]:
        yield from self.snapshot()()

    def _samples(self) -> Iterator[tuple[_Key, float]]:
        # every counter the table names, read once (ClusterRequests shares RoutingDecisions')
        families = dict.fromkeys(metric.family for metric in FLEET_METRICS)
        for attribute in families:
            family: Counter = getattr(self._metrics, attribute)
            for metric in family.collect():
                for s in metric.samples:
                    if s.name.endswith("_total"):
                        yield (metric.name, tuple(sorted(s.labels.items()))), s.value

    def _document(
        self, timestamp: int, dimensions: dict[str, str], name: str, value: float
    ) -> dict[str, Any]:
        return emf_document(self._namespace, timestamp, dimensions, ((name, "Count"),), {name: value})


def _family_delta(delta: dict[_Key, float], family: Counter) -> Iterator[tuple[dict[str, str], float]]:
    name = next(iter(family.collect())).name
    for (family_name, labels), value in delta.items():
        if family_name == name:
            yield dict(labels), value
