"""How the OTLP trace export is faring: counted in ``/metrics``, and its failures logged without a flood.

With the collector down, OpenTelemetry's OTLP/HTTP exporter logs a warning for every retry and an
error for every batch it gives up on: several lines every few seconds for as long as the outage
lasts, each the same. An operator needs the opposite: one line saying the export is failing, a
reminder now and then, and a number to alert on. So:

* :class:`CountingSpanExporter` wraps the real exporter and counts the spans each batch carried by
  its result; :class:`ExportStats` serves the counts as ``igw_trace_export_spans_total{result}``
  and ``igw_trace_export_failed_batches_total``.
* :class:`QueueBound`, in front of the SDK's batch processor, counts the spans that never reach the
  exporter (``result="dropped"``): while the exporter is stuck retrying a down collector, the
  processor's queue fills and the SDK throws spans away with nothing but a log line ("Queue full,
  dropping Span"). Before session s39 those were counted nowhere: 21,000 spans ended against a
  closed port read as 0 exported, 2,560 failed and nothing else.
* :class:`RepeatThrottle`, a :class:`logging.Filter` put on the SDK's and exporter's own loggers
  (:data:`EXPORTER_LOGGERS`), lets the first record of each message through, then one per
  ``interval_s`` carrying how many like it were held back.

The filter sits on the loggers rather than on a handler because the gateway does not own the
handlers (``igw serve`` configures the root logger; an embedding program may configure its own).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

from opentelemetry.context import Context
from opentelemetry.sdk.environment_variables import OTEL_BSP_MAX_QUEUE_SIZE
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from igw.gateway.log_throttle import RepeatThrottle

EXPORTER_LOGGERS: Final = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.sdk._shared_internal",
    __name__,
    "opentelemetry.trace.propagation.tracecontext",
    "opentelemetry.trace.span",
)
"""The loggers that repeat themselves while a collector is unreachable: the HTTP client's retries and
give-ups, the trace exporter's, the batch processor's, and this module's "queue full" line; and the
trace-context parser's, which warns of every caller's ``traceparent``/``tracestate`` it refuses
(over 512 or 8192 characters, over 32 members, a member it cannot read: ``Invalid key/value pair
(<the caller's key>, <its value>) found.``): until session s49 a line a request, up to 8 KiB of
the caller's text each, so any client could flood the log at its request rate."""

log = logging.getLogger(__name__)

DEFAULT_QUEUE_SIZE: Final = 2048
"""Spans that may wait for the exporter (the SDK's default; ``OTEL_BSP_MAX_QUEUE_SIZE`` overrides)."""


def queue_size(env: Mapping[str, str] = os.environ) -> int:
    """The batch processor's queue capacity, read as the SDK reads it: ``OTEL_BSP_MAX_QUEUE_SIZE``,
    the default when unset or not an integer (the SDK itself refuses a value below 1)."""
    try:
        return int(env.get(OTEL_BSP_MAX_QUEUE_SIZE, DEFAULT_QUEUE_SIZE))
    except ValueError:
        return DEFAULT_QUEUE_SIZE


class ExportStats(Collector):
    """Span and batch counts by export result; registered in the gateway's metric registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans_exported = 0
        self.spans_failed = 0
        self.spans_dropped = 0
        """Spans ended (and sampled) that never reached the exporter (:class:`QueueBound`)."""
        self.batches_failed = 0
        self.spans_handed = 0
        """Spans given to the exporter so far, counted as each batch starts (not when it ends: a
        batch may retry for the whole export timeout, and its spans have left the queue)."""

    def handed(self, spans: int) -> None:
        """A batch of ``spans`` left the queue for the exporter (called on the batch processor's thread)."""
        with self._lock:
            self.spans_handed += spans

    def record(self, spans: int, result: SpanExportResult) -> None:
        """Count one batch's result (called on the batch processor's thread)."""
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.spans_exported += spans
            else:
                self.spans_failed += spans
                self.batches_failed += 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._lock:
            exported, failed, batches = self.spans_exported, self.spans_failed, self.batches_failed
            dropped = self.spans_dropped
        spans = CounterMetricFamily(
            "igw_trace_export_spans",
            "Spans recorded for OTLP export, by result (failed: the exporter gave up on their batch after "
            "retries; dropped: never handed to the exporter, its queue was full or the gateway stopping).",
            labels=["result"],
        )
        spans.add_metric(["exported"], exported)
        spans.add_metric(["failed"], failed)
        spans.add_metric(["dropped"], dropped)
        yield spans
        yield CounterMetricFamily(
            "igw_trace_export_failed_batches",
            "Span batches the OTLP exporter gave up on (collector unreachable, refused or too slow).",
            value=batches,
        )


class CountingSpanExporter(SpanExporter):
    """Delegates to ``inner`` and records every batch's size and result in ``stats``."""

    def __init__(self, inner: SpanExporter, stats: ExportStats) -> None:
        self._inner = inner
        self._stats = stats
        self._lock = threading.Lock()
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._stats.handed(len(spans))
        try:
            result = self._inner.export(spans)
        except Exception:
            self._stats.record(len(spans), SpanExportResult.FAILURE)
            raise
        self._stats.record(len(spans), result)
        return result

    def shutdown(self) -> None:
        """Stop the inner exporter once: the gateway may stop it early, from a timer, to cut a final
        flush short (:meth:`igw.gateway.tracing.Tracing.shutdown`), and the SDK stops it again."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class QueueBound(SpanProcessor):
    """Passes ended spans to ``inner`` (a batch processor whose exporter is a
    :class:`CountingSpanExporter` on the same ``stats``) while fewer than ``capacity`` wait for the
    exporter, and counts the others as dropped.

    ``capacity`` is the batch processor's own queue size, so the processor never finds its queue
    full: every span it would have thrown away is turned away here instead, and counted. The SDK
    says only in a log line which spans it drops, and its queue and its drop counter are private
    (the counter reaches only an OpenTelemetry meter provider); counting here needs neither.
    A span turned away is the newest (the SDK drops the oldest): either way the trace has a hole.
    Per span: a subtraction, a comparison and an increment, under an uncontended lock (spans may end
    on any thread).
    """

    def __init__(self, inner: SpanProcessor, stats: ExportStats, capacity: int) -> None:
        self._inner = inner
        self._stats = stats
        self._capacity = capacity
        self._lock = threading.Lock()
        self._admitted = 0
        """Spans passed to ``inner``; ``_admitted - stats.spans_handed`` of them wait in its queue."""
        self._shut = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if not (context and context.trace_flags.sampled):
            return  # the batch processor ignores it too: not recorded for export
        stats = self._stats
        with self._lock:
            if self._shut or self._admitted - stats.spans_handed >= self._capacity:
                stats.spans_dropped += 1
                full = not self._shut
            else:
                self._admitted += 1
                full = None
        if full is None:
            self._inner.on_end(span)
        elif full:  # held to one line a minute by the RepeatThrottle on this module's logger
            log.warning(
                "trace export queue full (%d spans waiting for the exporter): dropping spans, counted "
                'in igw_trace_export_spans_total{result="dropped"}',
                self._capacity,
            )

    def shutdown(self) -> None:
        """Stop ``inner`` (its final flush), then count the spans it never handed to the exporter
        (the flush was cut short: :meth:`igw.gateway.tracing.Tracing.shutdown`) as dropped."""
        self._inner.shutdown()
        stats = self._stats
        with self._lock:
            self._shut = True
            left = self._admitted - stats.spans_handed
            if left > 0:
                stats.spans_dropped += left
                self._admitted -= left

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def throttle_exporter_logs(throttle: RepeatThrottle) -> Callable[[], None]:
    """Put ``throttle`` on every logger in :data:`EXPORTER_LOGGERS`; returns the undo (for tests and
    shutdown), which also logs the repeats still held (:meth:`RepeatThrottle.close`)."""
    loggers = [logging.getLogger(name) for name in EXPORTER_LOGGERS]
    for logger in loggers:
        logger.addFilter(throttle)

    def undo() -> None:
        for logger in loggers:
            logger.removeFilter(throttle)
        throttle.close()

    return undo
