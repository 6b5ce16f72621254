"""The OTLP export's health: span counts by result in ``/metrics``, and an unreachable collector
logged once a minute instead of on every retry (the real exporter against a closed loopback port)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.log_throttle import RepeatThrottle
from igw.gateway.trace_export import (
    EXPORTER_LOGGERS,
    CountingSpanExporter,
    ExportStats,
    throttle_exporter_logs,
)
from igw.gateway.tracing import Tracing
from igw.gateway.tracing_options import tracing_options
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.log_capture import captured_records
from tests.observability.live_gateway import MODEL, igw_serve, wait_ready
from tests.observability.otlp_receiver import otlp_receiver
from tests.security.helpers import ManualClock


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, list[logging.LogRecord]]]:
    with captured_records("tests.trace_export.throttled") as found:
        yield found


def test_repeats_are_held_then_one_passes_per_interval_with_the_count(
    captured: tuple[logging.Logger, list[logging.LogRecord]],
) -> None:
    logger, records = captured
    clock = ManualClock(1000.0)
    throttle = RepeatThrottle(interval_s=60.0, clock=clock)
    logger.addFilter(throttle)
    try:
        for delay in (1.0, 2.0, 4.0, 8.0):  # the retry's arguments differ; the template does not
            logger.warning("Transient error %s, retrying in %.2fs.", "refused", delay)
            clock.now += 5
        logger.error("Failed to export %s batch", "traces")  # another template passes at once
        clock.now += 45  # 65 s after the first
        logger.warning("Transient error %s, retrying in %.2fs.", "refused", 1.0)
        logger.warning("Transient error %s, retrying in %.2fs.", "refused", 2.0)
    finally:
        logger.removeFilter(throttle)
    lines = [r.getMessage() for r in records]
    assert lines == [
        "Transient error refused, retrying in 1.00s.",
        "Failed to export traces batch",
        "Transient error refused, retrying in 1.00s. [3 like this in the last 65 s not logged]",
    ]


def test_levels_are_throttled_apart(captured: tuple[logging.Logger, list[logging.LogRecord]]) -> None:
    logger, records = captured
    throttle = RepeatThrottle(interval_s=60.0, clock=ManualClock(1000.0))
    logger.addFilter(throttle)
    try:
        logger.warning("same")
        logger.error("same")
        logger.error("same")
    finally:
        logger.removeFilter(throttle)
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, "same"),
        (logging.ERROR, "same"),
    ]


def _finished_spans(count: int) -> tuple[ReadableSpan, ...]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for i in range(count):
        tracer.start_span(f"span-{i}").end()
    return memory.get_finished_spans()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens once the socket is closed: connections are refused


def _counts(stats: ExportStats) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(stats)
    page = generate_latest(registry).decode()
    return {
        f"{s.name}{dict(s.labels) or ''}": s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_unreachable_collector_counts_failed_spans_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    stats = ExportStats()
    exporter = CountingSpanExporter(
        OTLPSpanExporter(endpoint=f"http://127.0.0.1:{_closed_port()}/v1/traces", timeout=1.5), stats
    )
    throttle = RepeatThrottle()
    undo = throttle_exporter_logs(throttle)
    try:
        with caplog.at_level(logging.WARNING):
            assert exporter.export(_finished_spans(3)) is SpanExportResult.FAILURE
            first = [r for r in caplog.records if r.name in EXPORTER_LOGGERS]
            assert exporter.export(_finished_spans(2)) is SpanExportResult.FAILURE
            both = [r for r in caplog.records if r.name in EXPORTER_LOGGERS]
    finally:
        undo()
        exporter.shutdown()
    assert first, "the first failure must be logged"
    assert len(both) == len(first), [r.getMessage() for r in both]  # the second batch's lines are held
    assert _counts(stats) == {
        "igw_trace_export_spans_total{'result': 'exported'}": 0.0,
        "igw_trace_export_spans_total{'result': 'failed'}": 5.0,
        "igw_trace_export_spans_total{'result': 'dropped'}": 0.0,
        "igw_trace_export_failed_batches_total": 2.0,
    }
    for name in EXPORTER_LOGGERS:  # undone: the filter is gone from every logger
        assert throttle not in logging.getLogger(name).filters


def test_hostile_trace_headers_are_logged_once_not_once_a_request(caplog: pytest.LogCaptureFixture) -> None:
    """The SDK warns of each ``traceparent``/``tracestate`` it refuses, quoting the caller's text: a
    client sending them on every request wrote a line each (100 here) before session s49."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    hostile = [
        {"traceparent": parent + "-" + "a" * 10240},
        {"traceparent": parent, "tracestate": ",".join(f"k{i}=v" for i in range(33))},
        {"traceparent": parent, "tracestate": "k=" + "v" * 9000},
        {"traceparent": parent, "tracestate": "BAD KEY=value-from-the-client"},
    ]
    options = tracing_options(f"http://127.0.0.1:{_closed_port()}", 0.0, env={})
    assert options is not None
    tracing = Tracing.exporting(options)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(25):
                for headers in hostile:
                    tracing.start(headers, method="POST", path="/v1/completions", started=0.0).finish(200)
    finally:
        tracing.shutdown()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry.trace")]
    # each kind's first line, and its repeats' count when the throttle is closed at shutdown
    assert len(hostile) <= len(lines) <= 2 * len(hostile), lines
    assert sum("more like this" in line for line in lines) >= len(hostile) - 1


def test_shutdown_with_the_collector_silent_ends_within_the_exporter_timeout() -> None:
    """A collector that accepts connections and never answers: the final flush at shutdown took the
    SDK's own 30 s bound (batch after batch, each retried for the exporter's timeout), where the
    documentation and the pod's grace period allow the exporter's timeout. Now the exporter is
    stopped when that has passed, and every span handed over is counted."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections complete in the kernel; nothing ever reads or answers
        port = silent.getsockname()[1]
        env = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1.5"}
        options = tracing_options(f"http://127.0.0.1:{port}", 1.0, env=env)
        assert options is not None
        assert options.export_timeout_s == 1.5
        tracing = Tracing.exporting(options)
        try:
            for i in range(2000):  # four batches of 512 queued
                tracing.tracer.start_span(f"span-{i}").end()
        finally:
            started = time.monotonic()
            tracing.shutdown()
            took = time.monotonic() - started
    stats = tracing.export_stats
    assert stats is not None
    assert took < 4.0, f"shutdown took {took:.1f} s with a 1.5 s exporter timeout"
    assert (stats.spans_exported, stats.spans_failed) == (0, 2000)


def test_spans_the_full_queue_turns_away_are_counted_as_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The collector down, the exporter retries its first batch while the request path goes on
    ending spans: the batch processor's queue (here 64) fills and the rest are thrown away. The SDK
    only logged "Queue full, dropping Span": 1,000 spans read as 0 exported and 112 failed after
    shutdown, 888 counted nowhere (before session s39). Now every span ended is counted exactly
    once: exported, failed or dropped."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    options = tracing_options(endpoint, 1.0, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    assert options is not None
    tracing = Tracing.exporting(options)
    stats = tracing.export_stats
    assert stats is not None
    try:
        with caplog.at_level(logging.WARNING):
            for i in range(1000):
                tracing.tracer.start_span(f"span-{i}").end()
        queued_at_most = 64 + 16 * 4  # the queue, and the batches popped meanwhile
        assert stats.spans_dropped >= 1000 - queued_at_most
        assert _counts(stats)["igw_trace_export_spans_total{'result': 'dropped'}"] == stats.spans_dropped
        full = [r.getMessage() for r in caplog.records if "queue full" in r.getMessage()]
        assert len(full) == 1, full  # one line (the throttle holds the repeats), naming the counter
        assert 'igw_trace_export_spans_total{result="dropped"}' in full[0]
    finally:
        tracing.shutdown()
    assert stats.spans_exported + stats.spans_failed + stats.spans_dropped == 1000
    tracing.tracer.start_span("after shutdown").end()  # the processor ignores it: dropped too
    assert stats.spans_dropped + stats.spans_failed == 1001


def test_the_export_timeout_is_read_as_the_sdk_reads_it() -> None:
    def timeout(**env: str) -> float:
        options = tracing_options("http://collector:4318", None, env=env)
        assert options is not None
        return options.export_timeout_s

    assert timeout() == 10.0
    assert timeout(OTEL_EXPORTER_OTLP_TIMEOUT="3") == 3.0
    assert timeout(OTEL_EXPORTER_OTLP_TIMEOUT="3", OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="2.5") == 2.5
    assert timeout(OTEL_EXPORTER_OTLP_TIMEOUT="soon") == 10.0


def test_an_exporter_that_raises_is_counted_as_failed() -> None:
    class Broken(InMemorySpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            raise RuntimeError("boom")

    stats = ExportStats()
    with pytest.raises(RuntimeError):
        CountingSpanExporter(Broken(), stats).export(_finished_spans(4))
    assert (stats.spans_failed, stats.batches_failed, stats.spans_exported) == (4, 1, 0)


async def test_serve_reports_exported_spans_in_metrics(tmp_path: Path) -> None:
    pods = [{"name": "p0", "preset": "llama-3.1-8b/h100", "served_model_name": MODEL}]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 5, "pods": pods})
    async with otlp_receiver() as receiver, run_fleet(spec, admin=False) as fleet:
        env = {"OTEL_BSP_SCHEDULE_DELAY": "50"}  # export each batch within 50 ms
        args = ("--otel-endpoint", receiver.url, "--otel-sample-ratio", "1")
        async with (
            igw_serve(tmp_path, [fleet.pods[0].key], *args, env=env) as url,
            aiohttp.ClientSession() as http,
        ):
            await wait_ready(http, url)
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            resp = await http.post(url + "/v1/chat/completions", json=body)
            assert resp.status == 200, await resp.text()
            exported = 0.0
            for _ in range(100):
                page = await (await http.get(url + "/metrics")).text()
                samples = {
                    (s.name, s.labels.get("result", "")): s.value
                    for family in text_string_to_metric_families(page)
                    for s in family.samples
                }
                exported = samples.get(("igw_trace_export_spans_total", "exported"), 0.0)
                if exported >= 6:
                    break
                await asyncio.sleep(0.05)
    assert exported >= 6  # the server span and its five children at least
    assert samples[("igw_trace_export_spans_total", "failed")] == 0
    assert samples[("igw_trace_export_failed_batches_total", "")] == 0
    assert len(receiver.spans) >= exported
