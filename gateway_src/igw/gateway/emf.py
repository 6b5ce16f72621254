"""Cluster-level metrics for Amazon CloudWatch as Embedded Metric Format (EMF) log lines.

Every interval the gateway writes one EMF document per model (requests, 5xx error rate, P99
latency and TTFT over the interval), one per pool (average KV-cache use, ready pods), and, where
they moved, the replica's heartbeat writes and prunes per cluster and result, its retrievals answered
with another response's usage, the background responses' token bounds its local rate-limit buckets
did not hold and its answers relayed or refused with their usage unread, per model and reason, and
its pods' redirects refused, per model, and its searches for stored responses refused, per reason
(since session s44, prunes and refused holds since s45, redirects since s46, refused searches since
s47; before, on ``/metrics`` only) to the log
stream the CloudWatch agent collects (stdout in a container); CloudWatch turns them into metrics
in :data:`DEFAULT_NAMESPACE` without any API call from the gateway.

The values come from the gateway's own Prometheus families (interval deltas of the counters and
histogram buckets), so CloudWatch and Prometheus report the same traffic. Quantiles interpolate
linearly inside the histogram bucket, as Prometheus' ``histogram_quantile`` does.

Off the event loop, as ``/metrics`` is (:mod:`igw.gateway.metrics_render`): at 1,000 endpoints the
interval's documents took 30-45 ms of CPU to build (collecting the families, the EPP collector
whose pool gauges they read, and one pass over every sample per model), all of it on the loop until
session s42, so every interval stalled every request and stream of the process that long. Now
:meth:`EmfReporter.snapshot` runs on the loop (the batched updates folded, the endpoints' pool rows
and the ejections read, the timestamp taken: about a millisecond) and returns the rest, which
:func:`emf_context` runs on a worker thread; the lines are byte for byte those of :meth:`lines`.

Written by hand rather than with ``aws-embedded-metrics``: that library flushes through its own
asynchronous sinks and environment detection; here a document is one JSON line handed to the
gateway's writer, and :data:`EMF_SCHEMA` (the specification's structure) validates it in tests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, Final, Protocol

import orjson
from aiohttp import web
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from igw.gateway.emf_metrics import (
    CLUSTER_DIMENSION,
    DEFAULT_NAMESPACE,
    GATEWAY_METRICS,
    HEARTBEAT_METRICS,
    MODEL_DIMENSION,
    MODEL_METRICS,
    POOL_DIMENSION,
    POOL_METRICS,
    REASON_DIMENSION,
    RESULT_DIMENSION,
    SEARCH_REFUSAL_METRICS,
    UPSTREAM_NON_ANSWER_METRICS,
    UPSTREAM_REDIRECT_METRICS,
    USAGE_UNREAD_METRICS,
)
from igw.gateway.epp_compat import POOL_FAMILIES
from igw.gateway.metric_batch import collect_unfolded, folds_of
from igw.gateway.metrics_render import Snapshotting
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.ticker import Ticker

emf_log = logging.getLogger("igw.emf")

EMF_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["_aws"],
    "properties": {
        "_aws": {
            "type": "object",
            "required": ["Timestamp", "CloudWatchMetrics"],
            "properties": {
                "Timestamp": {"type": "integer", "minimum": 0},
                "CloudWatchMetrics": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["Namespace", "Dimensions", "Metrics"],
                        "properties": {
                            "Namespace": {"type": "string", "minLength": 1, "maxLength": 1024},
                            "Dimensions": {
                                "type": "array",
                                "items": {
                                    "type": "array",
                                    "items": {"type": "string", "minLength": 1},
                                    "maxItems": 30,
                                },
                            },
                            "Metrics": {
                                "type": "array",
                                "maxItems": 100,
                                "items": {
                                    "type": "object",
                                    "required": ["Name"],
                                    "properties": {
                                        "Name": {"type": "string", "minLength": 1, "maxLength": 1024},
                                        "Unit": {
                                            "enum": [
                                                "Seconds",
                                                "Microseconds",
                                                "Milliseconds",
                                                "Bytes",
                                                "Percent",
                                                "Count",
                                                "Count/Second",
                                                "None",
                                            ]
                                        },
                                        "StorageResolution": {"enum": [1, 60]},
                                    },
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}
"""The EMF specification's structure (the subset of units this emitter uses is listed)."""


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of cumulative ``(upper bound, count)`` buckets (ending with +Inf), or
    ``None`` without observations; linear inside a bucket, the last finite bound past it."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


class EmfReporter:
    """Builds the interval's EMF documents from the gateway's metric families."""

    def __init__(
        self,
        *,
        requests: MetricWrapperBase,
        duration: MetricWrapperBase,
        ttft: MetricWrapperBase,
        pools: Collector,
        namespace: str = DEFAULT_NAMESPACE,
        clock: Callable[[], float] = time.time,
        ejections: Callable[[], Iterable[tuple[str, str, float]]] | None = None,
        retries: MetricWrapperBase | None = None,
        heartbeat_writes: MetricWrapperBase | None = None,
        usage_misnamed: MetricWrapperBase | None = None,
        usage_unread: MetricWrapperBase | None = None,
        heartbeat_cluster: str | None = None,
        heartbeat_prunes: MetricWrapperBase | None = None,
        holds_refused: MetricWrapperBase | None = None,
        upstream_redirects: MetricWrapperBase | None = None,
        searches_refused: MetricWrapperBase | None = None,
        upstream_non_answers: MetricWrapperBase | None = None,
    ) -> None:
        """``ejections``: ``(pool, endpoint, seconds left)`` of every endpoint outlier detection
        leaves out now (``EjectedPods``; ``None``: reported as 0). ``retries``: the retried attempts
        by scheduler (``Retries``; ``None``: not reported). ``heartbeat_writes``: the heartbeat
        writes by result (``HeartbeatWrites``), ``usage_misnamed``: the retrievals answered with
        another response's usage (``UsageMisnamed``), ``usage_unread``: the answers whose usage went
        unread by model and reason (``AnswerUsageUnread``); ``None``: not reported.
        ``heartbeat_cluster``: the cluster the heartbeats name, the writes' ``Cluster`` dimension
        (``None``: the writes are not reported; no heartbeat is configured, so none is written).
        ``heartbeat_prunes``: the prunes of stopped replicas' heartbeat fields by result
        (``HeartbeatPrunes``, reported as the writes are); ``holds_refused``: the holds the local
        rate-limit buckets refused (``RateLimitHoldsRefused``); ``upstream_redirects``: the pods'
        redirects refused, by model (``UpstreamRedirects``, since session s46);
        ``searches_refused``: the searches for stored responses refused, by reason
        (``ResponseSearchesRefused``, since session s47); ``upstream_non_answers``: the pods'
        answers that cannot be one refused, by model and reason (``UpstreamNonAnswers``, since
        session s50); ``None``: not reported."""
        self._requests, self._duration, self._ttft, self._pools = requests, duration, ttft, pools
        self._ejections = ejections
        self._retries = retries
        self._retries_name = None if retries is None else _family_name(retries)
        if heartbeat_cluster is None:
            heartbeat_writes = heartbeat_prunes = None
        self._heartbeat_cluster = heartbeat_cluster or ""
        self._replica_families = tuple(
            f
            for f in (
                heartbeat_writes,
                heartbeat_prunes,
                usage_misnamed,
                holds_refused,
                usage_unread,
                upstream_redirects,
                searches_refused,
                upstream_non_answers,
            )
            if f is not None
        )
        self._heartbeat_name = None if heartbeat_writes is None else _family_name(heartbeat_writes)
        self._prunes_name = None if heartbeat_prunes is None else _family_name(heartbeat_prunes)
        self._refused_name = None if holds_refused is None else _family_name(holds_refused)
        self._misnamed_name = None if usage_misnamed is None else _family_name(usage_misnamed)
        self._unread_name = None if usage_unread is None else _family_name(usage_unread)
        self._redirects_name = None if upstream_redirects is None else _family_name(upstream_redirects)
        self._searches_refused_name = None if searches_refused is None else _family_name(searches_refused)
        self._non_answers_name = None if upstream_non_answers is None else _family_name(upstream_non_answers)
        self._requests_name = _family_name(requests)
        self._duration_name = _family_name(duration)
        self._namespace = namespace
        self._clock = clock
        self._previous: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}

    def documents(self) -> list[dict[str, Any]]:
        """This interval's documents (the first call reports everything since start)."""
        return self.snapshot_documents()()

    def lines(self) -> Iterator[str]:
        yield from self.snapshot()()

    def snapshot(self) -> Callable[[], list[str]]:
        """This interval's inputs read now, on the event loop; the returned call builds and
        serialises the documents from them on any thread (it reads only the prometheus_client
        children, which are thread-safe). Calls of the returned functions must not overlap: each
        advances the interval (see :func:`emf_context`)."""
        build = self.snapshot_documents()
        return lambda: [orjson.dumps(document).decode() for document in build()]

    def snapshot_documents(self) -> Callable[[], list[dict[str, Any]]]:
        """:meth:`snapshot`, returning the documents themselves."""
        families = self._families()
        folds: dict[Callable[[], None], None] = {}
        for family in (*families, self._pools):
            fold = folds_of(family)
            if fold is not None:
                folds.setdefault(fold)
        for fold in folds:  # the batch lives on the loop: folded here, read anywhere after
            fold()
        pools: Collector = (
            self._pools.snapshot() if isinstance(self._pools, Snapshotting) else _Read(self._pools)
        )
        ejections = list(self._ejections()) if self._ejections is not None else []
        timestamp = int(self._clock() * 1000)
        return lambda: self._build(timestamp, pools, ejections)

    def _build(
        self, timestamp: int, pools: Collector, ejections: list[tuple[str, str, float]]
    ) -> list[dict[str, Any]]:
        current = dict(self._samples())
        delta = {k: v - self._previous.get(k, 0.0) for k, v in current.items()}
        self._previous = current
        by_model: dict[str, list[tuple[str, str, dict[str, str], float]]] = {}
        for (family, sample, labels), value in delta.items():
            lv = dict(labels)
            if "model" in lv and family not in (
                self._unread_name,
                self._redirects_name,
                self._non_answers_name,
            ):
                by_model.setdefault(lv["model"], []).append((family, sample, lv, value))
        out = [self._model_document(by_model[model], timestamp) for model in sorted(by_model)]
        out.extend(self._pool_documents(timestamp, delta, pools, ejections))
        out.extend(self._replica_documents(timestamp, delta))
        return [d for d in out if d is not None]

    def _families(self) -> tuple[MetricWrapperBase, ...]:
        retries = () if self._retries is None else (self._retries,)
        return (self._requests, self._duration, self._ttft, *retries, *self._replica_families)

    def _replica_documents(
        self, timestamp: int, delta: dict[tuple[str, str, tuple[tuple[str, str], ...]], float]
    ) -> Iterator[dict[str, Any]]:
        """The replica's own counters that moved in the interval: heartbeat writes and prunes per
        (cluster, result), a document without dimensions for the misnamed usage and the refused
        holds, the unread usage per (model, reason), the refused redirects per model, the refused
        non-answers per (model, reason) and the refused searches per reason."""
        heartbeat: dict[str, dict[str, float]] = {}
        replica: dict[str, float] = {}
        unread: dict[tuple[str, str], float] = {}
        redirects: dict[str, float] = {}
        non_answers: dict[tuple[str, str], float] = {}
        searches_refused: dict[str, float] = {}
        for (family, _, labels), value in delta.items():
            if family in (self._heartbeat_name, self._prunes_name):
                name = "HeartbeatWrites" if family == self._heartbeat_name else "HeartbeatPrunes"
                counts = heartbeat.setdefault(dict(labels).get("result", ""), {})
                counts[name] = counts.get(name, 0.0) + value
            elif family in (self._misnamed_name, self._refused_name):
                name = "UsageMisnamed" if family == self._misnamed_name else "RateLimitHoldsRefused"
                replica[name] = replica.get(name, 0.0) + value
            elif family == self._unread_name:
                lv = dict(labels)
                key = (lv.get("model", ""), lv.get("reason", ""))
                unread[key] = unread.get(key, 0.0) + value
            elif family == self._redirects_name:
                model = dict(labels).get("model", "")
                redirects[model] = redirects.get(model, 0.0) + value
            elif family == self._non_answers_name:
                lv = dict(labels)
                key = (lv.get("model", ""), lv.get("reason", ""))
                non_answers[key] = non_answers.get(key, 0.0) + value
            elif family == self._searches_refused_name:
                reason = dict(labels).get("reason", "")
                searches_refused[reason] = searches_refused.get(reason, 0.0) + value
        for result, counts in sorted(heartbeat.items()):
            values = {name: value for name, value in counts.items() if value > 0}
            if values:
                dimensions = {CLUSTER_DIMENSION: self._heartbeat_cluster, RESULT_DIMENSION: result}
                yield self._document(timestamp, dimensions, HEARTBEAT_METRICS, values)
        moved = {name: value for name, value in replica.items() if value > 0}
        if moved:
            yield self._document(timestamp, {}, GATEWAY_METRICS, moved)
        for (model, reason), value in sorted(unread.items()):
            if value > 0:
                dimensions = {MODEL_DIMENSION: model, REASON_DIMENSION: reason}
                values = {"AnswerUsageUnread": value}
                yield self._document(timestamp, dimensions, USAGE_UNREAD_METRICS, values)
        for model, value in sorted(redirects.items()):
            if value > 0:
                values = {"UpstreamRedirects": value}
                yield self._document(timestamp, {MODEL_DIMENSION: model}, UPSTREAM_REDIRECT_METRICS, values)
        for (model, reason), value in sorted(non_answers.items()):
            if value > 0:
                dimensions = {MODEL_DIMENSION: model, REASON_DIMENSION: reason}
                values = {"UpstreamNonAnswers": value}
                yield self._document(timestamp, dimensions, UPSTREAM_NON_ANSWER_METRICS, values)
        for reason, value in sorted(searches_refused.items()):
            if value > 0:
                values = {"ResponseSearchesRefused": value}
                yield self._document(timestamp, {REASON_DIMENSION: reason}, SEARCH_REFUSAL_METRICS, values)

    def _samples(self) -> Iterator[tuple[tuple[str, str, tuple[tuple[str, str], ...]], float]]:
        for family in self._families():
            for metric in collect_unfolded(family):
                for s in metric.samples:
                    if not s.name.endswith("_created"):
                        yield (metric.name, s.name, tuple(sorted(s.labels.items()))), s.value

    def _model_document(
        self, samples: list[tuple[str, str, dict[str, str], float]], timestamp: int
    ) -> dict[str, Any] | None:
        """The document of one model from its samples' deltas (``(family, sample, labels, delta)``)."""
        requests = errors = 0.0
        # Summed over the model's other labels (requested_model): one cumulative series per family.
        latency: dict[float, float] = {}
        ttft: dict[float, float] = {}
        model = ""
        for family, sample, lv, value in samples:
            model = lv["model"]
            if family == self._requests_name:
                requests += value
                if lv.get("code", "").startswith("5"):
                    errors += value
            elif sample.endswith("_bucket"):
                bound = float(lv["le"])
                buckets = latency if family == self._duration_name else ttft
                buckets[bound] = buckets.get(bound, 0.0) + value
        if requests <= 0:
            return None
        values: dict[str, float] = {"Requests": requests, "ErrorRate": 100.0 * errors / requests}
        for name, summed in (("LatencyP99", latency), ("TtftP99", ttft)):
            q = quantile(0.99, sorted(summed.items()))
            if q is not None:
                values[name] = round(q * 1000, 3)
        return self._document(timestamp, {MODEL_DIMENSION: model}, MODEL_METRICS, values)

    def _pool_documents(
        self,
        timestamp: int,
        delta: dict[tuple[str, str, tuple[tuple[str, str], ...]], float],
        pools: Collector,
        ejections: list[tuple[str, str, float]],
    ) -> Iterator[dict[str, Any] | None]:
        kv: dict[str, float] = {}
        ready: dict[str, float] = {}
        for metric in pools.collect():
            for s in metric.samples:
                if s.name == POOL_FAMILIES[0]:
                    kv[s.labels["name"]] = s.value
                elif s.name == POOL_FAMILIES[3]:
                    ready[s.labels["name"]] = s.value
        ejected: dict[str, int] = {}
        for pool, _, _ in ejections:
            ejected[pool] = ejected.get(pool, 0) + 1
        retried: dict[str, float] = {}
        for (family, _, labels), value in delta.items():
            if family == self._retries_name:
                pool = dict(labels).get("scheduler", "")
                retried[pool] = retried.get(pool, 0.0) + value
        for pool in sorted(ready):
            values = {"ReadyPods": ready[pool], "EjectedPods": float(ejected.get(pool, 0))}
            if self._retries is not None:
                values["Retries"] = retried.get(pool, 0.0)
            if pool in kv:
                values["KvCacheAverage"] = round(100.0 * kv[pool], 3)
            yield self._document(timestamp, {POOL_DIMENSION: pool}, POOL_METRICS, values)

    def _document(
        self,
        timestamp: int,
        dimensions: dict[str, str],
        metrics: tuple[tuple[str, str], ...],
        values: dict[str, float],
    ) -> dict[str, Any]:
        return emf_document(self._namespace, timestamp, dimensions, metrics, values)


def emf_document(
    namespace: str,
    timestamp: int,
    dimensions: dict[str, str],
    metrics: tuple[tuple[str, str], ...],
    values: dict[str, float],
) -> dict[str, Any]:
    """One EMF document: the ``_aws`` directive naming the ``(name, unit)`` metrics present in
    ``values`` under one dimension set, with the dimension and metric values as members."""
    directive = {
        "Namespace": namespace,
        "Dimensions": [list(dimensions)],
        "Metrics": [{"Name": n, "Unit": u} for n, u in metrics if n in values],
    }
    return {"_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [directive]}, **dimensions, **values}


class EmfSource(Protocol):
    """Anything that yields this interval's EMF lines (one JSON document each)."""

    def lines(self) -> Iterator[str]: ...

    def snapshot(self) -> Callable[[], list[str]]:
        """The interval's inputs read on the event loop; the call returned makes the lines on a
        worker thread (the same lines :meth:`lines` gives)."""
        ...


class _Read(Collector):
    """A collector not known to be safe off the loop, collected on it."""

    def __init__(self, collector: Collector) -> None:
        self._metrics = list(collector.collect())

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def _family_name(metric: MetricWrapperBase) -> str:
    return next(iter(metric.collect())).name


def emf_reporter(
    metrics: GatewayMetrics,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    clock: Callable[[], float] = time.time,
    heartbeat_cluster: str | None = None,
    holds_refused: MetricWrapperBase | None = None,
) -> EmfReporter:
    """The reporter for one gateway's metrics; ``heartbeat_cluster``: the cluster its heartbeats name
    (``spec.extensions.globalHeartbeat.cluster``; ``None`` without heartbeats); ``holds_refused``:
    the request guard's counter of refused holds (``igw_ratelimit_holds_refused``), handed over by
    whoever made the guard's metrics (``igw serve``: :func:`igw.launch.guard_factory`), since
    ``igw.security`` registers it and the gateway does not import that package (``None``: not
    reported). Until session s46 it was looked up in the registry's private name index."""
    return EmfReporter(
        requests=metrics.requests,
        duration=metrics.duration,
        ttft=metrics.ttft,
        pools=metrics.epp,
        namespace=namespace,
        ejections=metrics.ejected,
        retries=metrics.retries,
        heartbeat_writes=metrics.heartbeat_writes,
        usage_misnamed=metrics.usage_misnamed,
        usage_unread=metrics.answer_usage_unread,
        heartbeat_cluster=heartbeat_cluster,
        heartbeat_prunes=metrics.heartbeat_prunes,
        holds_refused=holds_refused,
        upstream_redirects=metrics.upstream_redirects,
        searches_refused=metrics.searches_refused,
        upstream_non_answers=metrics.upstream_non_answers,
        clock=clock,
    )


def emf_context(
    reporter: EmfSource, *, interval_s: float
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp cleanup context logging the reporter's lines to ``igw.emf`` every ``interval_s``
    (and once more at shutdown, so the last interval is not lost)."""

    building: asyncio.Future[list[str]] | None = None

    async def tick() -> None:
        nonlocal building
        if building is not None and not building.done():
            # a tick cancelled at stop left its build running: the intervals must not overlap
            await asyncio.wait({building})
        build = reporter.snapshot()
        building = asyncio.ensure_future(asyncio.to_thread(build))
        for line in await asyncio.shield(building):
            emf_log.info(line)

    async def context(_app: web.Application) -> AsyncIterator[None]:
        ticker = Ticker(tick, interval_s=interval_s, name="igw-emf")
        ticker.start()
        try:
            yield
        finally:
            await ticker.stop()
            await tick()

    return context
