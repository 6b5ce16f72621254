"""How the OTLP trace export is faring: counted in ``/metrics``, and its failures logged without a flood.

With the collector down, OpenTelemetry's OTLP/HTTP exporter logs a warning for every retry and an
error for every batch it gives up on: several lines every few seconds for as long as the outage
lasts, each the same. An operator needs the opposite: one line saying the export is failing, a
reminder now and then, and a number to alert on. So:

* :class:`CountingSpanExporter` wraps the real exporter and counts the spans each batch carried by
  its result; :class:`ExportStats` serves the counts as ``igw_trace_export_spans_total{result}``
  and ``igw_trace_export_failed_batches_total``.
* :class:`RepeatThrottle`, a :class:`logging.Filter` put on the SDK's and exporter's own loggers
  (:data:`EXPORTER_LOGGERS`), lets the first record of each message through, then one per
  ``interval_s`` carrying how many like it were held back.

The filter sits on the loggers rather than on a handler because the gateway does not own the
handlers (``igw serve`` configures the root logger; an embedding program may configure its own).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

EXPORTER_LOGGERS: Final = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.sdk._shared_internal",
)
"""The loggers that repeat themselves while a collector is unreachable: the HTTP client's retries and
give-ups, the trace exporter's, and the batch processor's ("Queue full, dropping ...")."""

REPEAT_INTERVAL_S: Final = 60.0
"""At most one line per message per minute while a failure lasts."""


class ExportStats(Collector):
    """Span and batch counts by export result; registered in the gateway's metric registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans_exported = 0
        self.spans_failed = 0
        self.batches_failed = 0

    def record(self, spans: int, result: SpanExportResult) -> None:
        """Count one batch (called on the batch processor's thread)."""
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.spans_exported += spans
            else:
                self.spans_failed += spans
                self.batches_failed += 1

    def collect(self) -> Iterator[CounterMetricFamily]:
        with self._lock:
            exported, failed, batches = self.spans_exported, self.spans_failed, self.batches_failed
        spans = CounterMetricFamily(
            "igw_trace_export_spans",
            "Spans handed to the OTLP exporter, by result (failed: the batch was dropped after retries).",
            labels=["result"],
        )
        spans.add_metric(["exported"], exported)
        spans.add_metric(["failed"], failed)
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


class RepeatThrottle(logging.Filter):
    """Passes a message's first record, then at most one per ``interval_s``, noting how many were held.

    Records are alike when they share logger, level and message template (``record.msg``, before
    its arguments are merged): a retry's changing delay or status code does not make it new.
    """

    def __init__(
        self, interval_s: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}
        """(logger, level, template) -> (when one last passed, how many were held since)."""

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self._interval_s:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            self._seen[key] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} [{last[1]} like this in the last {now - last[0]:.0f} s not logged]"
        return True


def throttle_exporter_logs(throttle: RepeatThrottle) -> Callable[[], None]:
    """Put ``throttle`` on every logger in :data:`EXPORTER_LOGGERS`; returns the undo (for tests and
    shutdown)."""
    loggers = [logging.getLogger(name) for name in EXPORTER_LOGGERS]
    for logger in loggers:
        logger.addFilter(throttle)

    def undo() -> None:
        for logger in loggers:
            logger.removeFilter(throttle)

    return undo
