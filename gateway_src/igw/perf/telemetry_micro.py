"""In-process micro-benchmark of ``igw perf gateway``: what the access log and the request metrics
cost per request, the way ``igw serve`` sets them up against the way it did before batching.

* Access log: one :class:`~igw.gateway.access_log.AccessRecord` emitted per request through the
  ``igw.access`` logger with the redacting formatter into ``os.devnull``. Before: a
  :class:`logging.StreamHandler` (format + write + flush per record) with logging's caller lookup;
  now: :class:`~igw.gateway.log_buffer.BatchedLineHandler`, which takes the line without a
  :class:`logging.LogRecord` (:func:`~igw.gateway.log_buffer.line_sink`). Both the calling thread's
  CPU time (what the event loop pays) and the whole process's (the writer thread included, up to
  the handler's close, which writes the rest) are reported.
* Request metrics: the updates of one streamed request (decision, pick, TTFT, 20 inter-token gaps,
  tokens in and out, request count and duration) on prometheus_client children directly (before)
  and through :class:`~igw.gateway.telemetry.GatewayMetrics`'s batched children, a fold (a
  ``/metrics`` read) included every 1,000 requests (now).

Rounds alternate between the variants; each variant's figure is its lowest round mean (the round
least disturbed by other jobs on the machine).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from igw.gateway.access_log import AccessRecord, access_log
from igw.gateway.log_buffer import BatchedLineHandler
from igw.gateway.redaction import RedactingFormatter
from igw.gateway.telemetry import GatewayMetrics

GAPS_PER_STREAM = 20
FOLD_EVERY = 1000


@dataclass(frozen=True, slots=True)
class TelemetryCost:
    name: str
    thread_us: float
    """Per request, CPU time of the calling (event-loop) thread."""
    process_us: float
    """Per request, CPU time of the whole process (helper threads included)."""


def _record(i: int) -> AccessRecord:
    return AccessRecord(
        request_id=f"{i:032x}",
        method="POST",
        path="/v1/completions",
        model="m",
        base_model="m",
        scheduler="s",
        status=200,
        endpoint="10.0.0.1:8000",
        attempts=1,
        scores={"10.0.0.1:8000": {"queue": 1.6, "kv-cache": 1.2, "prefix": 2.4, "total": 5.2}},
        decision_us=95.1,
        duration_ms=1.234,
        prompt_tokens=150,
        completion_tokens=4,
    )


def _log_round(batched: bool, records: int) -> tuple[float, float]:
    sink = open(os.devnull, "w")  # noqa: SIM115 - closed below, after the handler
    handler: logging.Handler = BatchedLineHandler(sink) if batched else logging.StreamHandler(sink)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    saved = (access_log.handlers[:], access_log.propagate, access_log.level, logging._srcfile)
    access_log.handlers[:] = [handler]
    access_log.propagate = False
    access_log.setLevel(logging.INFO)
    if batched:
        logging._srcfile = None
    made = [_record(i) for i in range(records)]
    try:
        p0, t0 = time.process_time(), time.thread_time()
        for record in made:
            record.emit()
        thread = time.thread_time() - t0
        handler.close()  # the batched handler writes what is still queued
        process = time.process_time() - p0
    finally:
        access_log.handlers[:], access_log.propagate, level, logging._srcfile = saved
        access_log.setLevel(level)
        sink.close()
    return thread / records * 1e6, process / records * 1e6


def _metrics_round(batched: bool, requests: int) -> tuple[float, float]:
    metrics = GatewayMetrics(lister=list, clock=time.monotonic)

    def child(metric: MetricWrapperBase, *labels: str) -> Any:
        return metrics.child(metric, *labels) if batched else metric.labels(*labels)

    m = metrics
    decision, picks = child(m.decision, "s"), child(m.picks, "s", "10.0.0.1:8000")
    ttft, itl = child(m.ttft, "m", "m"), child(m.itl, "m")
    tokens_in, tokens_out = child(m.tokens, "m", "in"), child(m.tokens, "m", "out")
    count, duration = child(m.requests, "m", "m", "200"), child(m.duration, "m", "m")
    gaps = [0.004 + 0.0001 * k for k in range(GAPS_PER_STREAM)]
    p0, t0 = time.process_time(), time.thread_time()
    for i in range(requests):
        decision.observe(0.0001)
        picks.inc()
        ttft.observe(0.05)
        for gap in gaps:
            itl.observe(gap)
        tokens_in.inc(150)
        tokens_out.inc(GAPS_PER_STREAM)
        count.inc()
        duration.observe(0.12)
        if batched and i % FOLD_EVERY == FOLD_EVERY - 1:
            metrics.fold()
    metrics.fold()
    thread = time.thread_time() - t0
    process = time.process_time() - p0
    return thread / requests * 1e6, process / requests * 1e6


def _best(
    run: Callable[[bool, int], tuple[float, float]], n: int, rounds: int
) -> dict[bool, tuple[float, float]]:
    found: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(rounds):
        for batched in (False, True):
            found[batched].append(run(batched, n))
    return {b: min(values) for b, values in found.items()}


def access_log_costs(*, records: int = 5000, rounds: int = 5) -> tuple[TelemetryCost, TelemetryCost]:
    """(before, now) per access-log record."""
    best = _best(_log_round, records, rounds)
    return (
        TelemetryCost("StreamHandler, caller lookup (before)", *best[False]),
        TelemetryCost("batched writer thread, line without a LogRecord", *best[True]),
    )


def metrics_costs(*, requests: int = 5000, rounds: int = 5) -> tuple[TelemetryCost, TelemetryCost]:
    """(before, now) per streamed request's metric updates."""
    best = _best(_metrics_round, requests, rounds)
    return (
        TelemetryCost("prometheus_client children (before)", *best[False]),
        TelemetryCost("batched, folded on read", *best[True]),
    )
