"""``utilization-detector``: GIE v1.5's utilization-based saturation detector, and its filter.

Saturation of a set of endpoints (GIE ``saturationdetector/utilization``): the mean over endpoints of
``max(waiting / queueDepthThreshold, kvUsage / kvCacheUtilThreshold)``, where an endpoint without
metrics, or with metrics older than ``metricsStalenessThreshold``, counts as 1.0 (fully saturated),
and an empty set is 1.0. The pool is saturated at 1.0 and above. A signal the engine does not publish
contributes 0 to the ``max`` (it cannot show saturation), as in the scheduler's own rule.

Referenced from ``saturationDetector: {pluginRef: ...}`` it replaces the scheduler's admission rule;
referenced in a scheduling profile it is a **filter** keeping endpoints with fresh metrics,
``waiting < queueDepthThreshold × (1 + headroom)`` and ``kvUsage < kvCacheUtilThreshold × (1 +
headroom)``; when that would remove every endpoint it keeps them all (GIE).
Parameters: ``queueDepthThreshold`` (5), ``kvCacheUtilThreshold`` (0.8), ``metricsStalenessThreshold``
(duration, ``200ms``), ``headroom`` (0.0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.config.durations import parse_duration
from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "utilization-detector"
DEFAULT_QUEUE_DEPTH = 5
DEFAULT_KV_UTIL = 0.8
DEFAULT_STALENESS_S = 0.2
DEFAULT_HEADROOM = 0.0


class UtilizationDetector(PluginHooks):
    type_name = TYPE

    def __init__(
        self,
        *,
        name: str = TYPE,
        queue_depth: int = DEFAULT_QUEUE_DEPTH,
        kv_util: float = DEFAULT_KV_UTIL,
        staleness_s: float = DEFAULT_STALENESS_S,
        headroom: float = DEFAULT_HEADROOM,
    ) -> None:
        if queue_depth < 1 or not 0.0 < kv_util <= 1.0 or staleness_s <= 0 or headroom < 0:
            raise ValueError(
                "utilization-detector: thresholds must be positive (kv in (0, 1]), headroom >= 0"
            )
        self.name = name
        self.queue_depth = queue_depth
        self.kv_util = kv_util
        self.staleness_s = staleness_s
        self.headroom = headroom

    def _fresh(self, e: EndpointView, now: float) -> bool:
        age = e.metrics_age(now)
        return e.metrics is not None and not e.scrape_failing and age is not None and age <= self.staleness_s

    def endpoint_saturation(self, e: EndpointView, *, now: float) -> float:
        """``max(waiting / queue threshold, kv / kv threshold)``; 1.0 without fresh metrics."""
        if not self._fresh(e, now) or e.metrics is None:
            return 1.0
        m = e.metrics
        queue = 0.0 if m.waiting is None else m.waiting / self.queue_depth
        kv = 0.0 if m.kv_usage is None else m.kv_usage / self.kv_util
        return max(queue, kv)

    def saturation(self, endpoints: Sequence[EndpointView], *, now: float) -> float:
        """Mean endpoint saturation; 1.0 for an empty set. Saturated at >= 1.0."""
        if not endpoints:
            return 1.0
        return sum(self.endpoint_saturation(e, now=now) for e in endpoints) / len(endpoints)

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        q_limit = self.queue_depth * (1.0 + self.headroom)
        kv_limit = self.kv_util * (1.0 + self.headroom)
        kept = []
        for e in endpoints:
            if not self._fresh(e, ctx.now) or e.metrics is None:
                continue
            m = e.metrics
            if (m.waiting is None or m.waiting < q_limit) and (m.kv_usage is None or m.kv_usage < kv_limit):
                kept.append(e)
        return kept or list(endpoints)


def factory(name: str, params: Mapping[str, Any], path: str) -> UtilizationDetector:
    r = ParamReader(params, path=path)
    queue = r.integer("queueDepthThreshold", DEFAULT_QUEUE_DEPTH, minimum=1)
    kv = r.number("kvCacheUtilThreshold", DEFAULT_KV_UTIL, minimum=0.01, maximum=1.0)
    staleness = r.duration("metricsStalenessThreshold", DEFAULT_STALENESS_S, parse=parse_duration)
    headroom = r.number("headroom", DEFAULT_HEADROOM, minimum=0.0)
    r.finish()
    return UtilizationDetector(
        name=name, queue_depth=queue, kv_util=kv, staleness_s=staleness, headroom=headroom
    )
