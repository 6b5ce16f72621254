"""``igw_log_lines_dropped_total{stream}``: log lines the batched writers dropped, on ``/metrics``.

A :class:`~igw.gateway.log_buffer.BatchedLineHandler` drops what a stream that takes no lines (a
stalled log shipper, a full pipe) leaves queued past its byte bound, and until session s43 the count
reached only one line on that same stream, written once it moved again: while the stall lasted - the
time an operator wants to know about it - nothing said that access, EMF or diagnostic lines were
being lost. This collector reads the running totals of the handlers that ``igw serve`` and
``igw global serve`` install (the root logger's, on stderr; ``igw.access`` and ``igw.emf``'s, on
stdout) at scrape time, so the request path keeps paying one comparison per line. Lines whose write
raised (a closed pipe: ``BrokenPipeError``) count too: they are as lost.

Both ``stream`` labels are always there (0 until a drop), so ``increase(...[5m]) > 0`` can alert from
the first drop on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.registry import Collector

from igw.gateway.log_buffer import BatchedLineHandler

FAMILY: Final = "igw_log_lines_dropped"
"""The counter's name without ``_total`` (``prometheus_client`` adds it)."""
STREAMS: Final = ("stdout", "stderr")
LOGGERS: Final = ("", "igw.access", "igw.emf")
"""The loggers whose batched handlers are counted: the root logger (diagnostics, on stderr) and the
access log and EMF lines (on stdout)."""


class LogDropStats(Collector):
    """Lines dropped by this process's batched log writers, by stream."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        dropped = dict.fromkeys(STREAMS, 0)
        seen: set[int] = set()
        for name in LOGGERS:
            for handler in logging.getLogger(name).handlers:
                if isinstance(handler, BatchedLineHandler) and id(handler) not in seen:
                    seen.add(id(handler))
                    dropped[handler.label] = dropped.get(handler.label, 0) + handler.dropped + handler.failed
        family = CounterMetricFamily(
            FAMILY,
            "Log lines dropped because the stream took none while the writer's queue held its byte bound "
            "(a stalled log shipper or a full pipe) or refused them (a closed pipe); stdout: access and "
            "EMF lines, stderr: diagnostics.",
            labels=["stream"],
        )
        for stream, count in dropped.items():
            family.add_metric([stream], count)
        yield family
