"""The ``/metrics`` page, rendered on a worker thread from values read on the event loop.

At 1,000 endpoints in 20 pools the page is 1.4 MB, about 16,000 lines, and prometheus_client took
170-400 ms of CPU to build and format it. Until session s42 that ran on the event loop, so every
scrape (Prometheus every 15-30 s, often two replicas, plus each worker of a group answering for the
host) stalled every request and stream of the process for the whole render.

The render is split where the threads' rules are:

* On the loop (:meth:`MetricsPage.snapshot`, about a millisecond at 1,000 endpoints): the batched
  request metrics are folded into prometheus_client (:mod:`igw.gateway.metric_batch`, not
  thread-safe; the per-endpoint counters' fold drops the departed endpoints'), and every
  collector that reads the gateway's live state (the endpoints, which the loop mutates) reads it
  into immutable rows (its ``snapshot()``); any other custom collector (small, one family or
  two) is collected whole.
* On a worker thread: the families are built from those rows, prometheus_client's own metrics are
  collected (their values are read under their locks, made for multi-threaded writers) and
  everything is formatted, byte for byte what :func:`prometheus_client.generate_latest` of the
  registry gives (a gauge's ``set_function`` callable is called there too: it must only read). The
  loop takes the interpreter back at every switch interval (5 ms), so a request waits about that
  long for a scrape (plus, on a busy machine, its wait for a core), not for the whole render.

Scrapes that arrive while a page is being rendered share that render (two Prometheus replicas, the
management port and a worker's peers asking at once cost one render, not one each): the page they
get was read at most one render earlier than they asked. A scrape after the render ended gets a new
one, so a counter read right after a request always counts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from igw.gateway.metric_batch import collect_unfolded, folds_of


@runtime_checkable
class Snapshotting(Protocol):
    """A collector over live state that can read it at once and be collected later, anywhere."""

    def snapshot(self) -> Collector:
        """The collector's inputs read now, as a collector that holds no live state."""
        ...


Part = Callable[[], Iterable[Metric]]
"""One collector's share of a page, collected on the worker thread."""


class _Snapshot(Collector):
    """A registry's collectors as read on the event loop, in the registry's order."""

    def __init__(self, parts: list[Part]) -> None:
        self._parts = parts

    def collect(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part()


def _collected(metrics: list[Metric]) -> Part:
    return lambda: metrics


def _later(metric: MetricWrapperBase) -> Part:
    return lambda: collect_unfolded(metric)


def registry_collectors(registry: CollectorRegistry) -> list[Collector]:
    """The collectors registered in ``registry``, in the order its ``collect`` visits them.

    prometheus_client offers no public way to list them; ``_collector_to_names`` has held them since
    its first releases. A release that changes that fails here, loudly, not with an empty page."""
    found = getattr(registry, "_collector_to_names", None)
    if not isinstance(found, dict):
        raise TypeError(
            "prometheus_client's CollectorRegistry no longer lists its collectors as this module reads"
        )
    with registry._lock:
        return list(found)


class MetricsPage:
    """Renders ``registry``'s exposition off the event loop (see the module's docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._rendering: asyncio.Future[bytes] | None = None
        if getattr(registry, "_target_info", None):
            raise TypeError("a registry with target_info is not rendered by MetricsPage")
        registry_collectors(registry)  # fails now, not at the first scrape

    def snapshot(self) -> Collector:
        """Everything the page shows, read now (on the event loop): a collector any thread may collect.

        Every batch of pending updates is folded first, each once (a family folds its whole batch,
        which a collection of the registry repeated for every family of it)."""
        collectors = registry_collectors(self._registry)
        folds: dict[Callable[[], None], None] = {}
        for collector in collectors:
            fold = folds_of(collector)
            if fold is not None:
                folds.setdefault(fold)
        for fold in folds:
            fold()
        parts: list[Part] = []
        for collector in collectors:
            if isinstance(collector, Snapshotting):
                parts.append(collector.snapshot().collect)
            elif isinstance(collector, MetricWrapperBase):
                parts.append(_later(collector))
            else:  # unknown to be thread-safe: read on the loop
                parts.append(_collected(list(collector.collect())))
        return _Snapshot(parts)

    async def render(self) -> bytes:
        """The page in the Prometheus text format, formatted on a worker thread; a scrape that
        arrives while one is being rendered gets that one."""
        rendering = self._rendering
        if rendering is None:
            rendering = self._rendering = asyncio.ensure_future(
                asyncio.to_thread(generate_latest, self.snapshot())
            )
            rendering.add_done_callback(self._rendered)
        # shielded: a scrape whose client left must not cancel the render the others wait for
        return await asyncio.shield(rendering)

    def _rendered(self, rendering: asyncio.Future[bytes]) -> None:
        if self._rendering is rendering:
            self._rendering = None
        if not rendering.cancelled():
            rendering.exception()  # retrieved: a failed render no scrape awaited is not logged as lost
