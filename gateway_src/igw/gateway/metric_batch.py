"""Per-request metric updates kept as plain numbers and folded into prometheus_client when read.

Every inference request increments several counters and observes several histograms (a streamed
one, one inter-token gap per event). prometheus_client takes a lock and, for a histogram, walks the
bucket bounds on every ``inc``/``observe``; it has no batch API. Here the request path adds to a
number (a counter) or to one bucket's count and the sum (a histogram, the bucket found by binary
search), and :meth:`MetricBatch.fold` hands the totals to the prometheus_client children in one
``inc`` per touched bucket. :class:`FoldingCounter` and :class:`FoldingHistogram` fold before they
are collected, so every reader - ``/metrics``, the registry's ``get_sample_value``, the EPP aliases,
the EMF reporter, the heartbeat - sees every update made before the read.

Updates and folds both run on the gateway's event loop thread (the request path, the ``/metrics``
handler's read of the values and the periodic reporters), so no lock is needed. ``/metrics`` folds on
the loop and then collects on a worker thread with :func:`collect_unfolded`, which reads only the
prometheus_client children (thread-safe), never the batch (:mod:`igw.gateway.metrics_render`).

Why by hand: the folding adds to a histogram child's bucket and sum values directly (its ``_buckets``
and ``_sum``, the only way to add N observations at once); ``tests/gateway/test_metric_batch.py``
compares the exposition with prometheus_client's own ``observe`` on the same values, so a
prometheus_client release that changes those internals fails a test instead of miscounting.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mypy_extensions import mypyc_attr
from prometheus_client import Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

_SORTED_FROM = 64
"""From this many values on :meth:`PendingObservations.observe_many` sorts them; below, a loop of
binary searches costs less than the sort, its list and the walk of every bound."""


class PendingCount:
    """A counter child's increments since the last fold."""

    __slots__ = ("amount", "target")

    def __init__(self, target: Any) -> None:
        self.target = target
        self.amount = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.amount += amount

    def fold(self) -> None:
        amount, self.amount = self.amount, 0.0
        if amount:
            self.target.inc(amount)


class PendingObservations:
    """A histogram child's observations since the last fold: a count per bucket and their sum."""

    __slots__ = ("bounds", "counts", "target", "total")

    def __init__(self, target: Any, bounds: tuple[float, ...]) -> None:
        if len(target._buckets) != len(bounds):
            raise TypeError("prometheus_client's histogram layout is not the one this module folds into")
        self.target = target
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0

    def observe(self, value: float) -> None:
        if value != value:  # NaN: no bucket holds it; let prometheus_client count it its own way
            self.target.observe(value)
            return
        # The first bound >= value: prometheus_client's bucket for ``value`` (``value <= bound``).
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_many(self, values: Sequence[float]) -> None:
        """Observe every one of ``values`` (a stream's inter-token gaps, one per event), each counted
        in the bucket :meth:`observe` would count it in: one call per stream instead of one per gap,
        on the work that runs after a stream's last write, before the connection's next request is
        read. A few values are binned in one loop; from :data:`_SORTED_FROM` on they are sorted
        once and each bucket's share is found by one binary search per bound (C work, not a step
        per value)."""
        total = sum(values)
        if total != total:  # a NaN among them (or infinities of both signs): one at a time
            for value in values:
                self.observe(value)
            return
        counts = self.counts
        bounds = self.bounds
        if len(values) < _SORTED_FROM:
            left = bisect.bisect_left
            for value in values:
                counts[left(bounds, value)] += 1
        else:
            ordered = sorted(values)
            right = bisect.bisect_right
            below = 0
            for i in range(len(bounds)):
                # values <= the bound: prometheus_client's ``le`` bucket (``observe``'s bisect_left)
                upto = right(ordered, bounds[i])
                counts[i] += upto - below
                below = upto
        self.total += total

    def fold(self) -> None:
        counts = self.counts
        if not any(counts):
            return
        self.counts = [0] * len(counts)
        total, self.total = self.total, 0.0
        self.target._sum.inc(total)
        for bucket, count in zip(self.target._buckets, counts, strict=True):
            if count:
                bucket.inc(count)


class MetricBatch:
    """The pending updates of one metrics instance (see the module docstring)."""

    def __init__(self) -> None:
        self._pending: dict[int, PendingCount | PendingObservations] = {}
        """By ``id``: a dict, so :meth:`discard` of one child costs no scan of the others."""

    def pending(self, metric: MetricWrapperBase, child: Any) -> PendingCount | PendingObservations | Any:
        """A batched stand-in for ``child`` (a child of ``metric``), or ``child`` itself when ``metric``
        is neither a counter nor a histogram."""
        found: PendingCount | PendingObservations
        if isinstance(metric, Histogram):
            found = PendingObservations(child, _bounds(metric))
        elif isinstance(metric, Counter):
            found = PendingCount(child)
        else:
            return child
        self._pending[id(found)] = found
        return found

    def discard(self, pending: Any) -> None:
        """Stop folding ``pending`` (a stand-in :meth:`pending` returned; its child was removed from
        its family): an update it still held is dropped with the series."""
        self._pending.pop(id(pending), None)

    def fold(self) -> None:
        for pending in self._pending.values():
            pending.fold()


def _bounds(metric: Histogram) -> tuple[float, ...]:
    bounds = tuple(float(b) for b in metric._upper_bounds)
    if bounds[-1] != math.inf:
        raise TypeError("a prometheus_client histogram ends with the +Inf bucket")
    return bounds


@mypyc_attr(native_class=False)  # mypyc: it subclasses prometheus_client's, so it stays a Python class
class _FoldsOnCollect(MetricWrapperBase):
    """Folds the batch's pending updates (``folds``) before the family is collected."""

    folds: Callable[[], None] | None = None

    def collect(self) -> Iterable[Metric]:
        if self.folds is not None:
            self.folds()
        return super().collect()

    def collect_unfolded(self) -> Iterable[Metric]:
        """The family as the last fold left it, folding nothing: for a collection on another thread
        than the event loop's (the batch is not thread-safe; prometheus_client's children are),
        after the loop folded the batch (:mod:`igw.gateway.metrics_render`)."""
        return super().collect()


def folds_of(metric: object) -> Callable[[], None] | None:
    """What ``metric`` folds before it is collected (its batch's fold), if it is a folding family."""
    return metric.folds if isinstance(metric, _FoldsOnCollect) else None


def collect_unfolded(metric: MetricWrapperBase) -> Iterable[Metric]:
    """``metric``'s samples without folding its batch (:meth:`_FoldsOnCollect.collect_unfolded`);
    any other prometheus_client metric collects as usual (it holds no batch)."""
    if isinstance(metric, _FoldsOnCollect):
        return metric.collect_unfolded()
    return metric.collect()


@mypyc_attr(native_class=False)  # mypyc: a prometheus_client subclass, a Python class
class FoldingCounter(_FoldsOnCollect, Counter):
    """A :class:`~prometheus_client.Counter` whose ``collect`` first folds its batch's pending updates."""


@mypyc_attr(native_class=False)  # mypyc: a prometheus_client subclass, a Python class
class FoldingHistogram(_FoldsOnCollect, Histogram):
    """A :class:`~prometheus_client.Histogram` whose ``collect`` first folds its batch's pending updates."""
