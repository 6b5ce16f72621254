"""Structured access log: one JSON object per inference request on the ``igw.access`` logger.

Fields: ``ts`` (unix), ``request_id``, ``method``, ``path``, ``model``, ``base_model``, ``scheduler``,
``status``, ``endpoint`` (the one that served, after any retry), ``attempts``, ``scores`` (the
per-scorer weighted scores of the chosen endpoint and its fallbacks), ``decision_us``,
``reason`` (the scheduler's notes: stale endpoints excluded, imputed signals...), ``duration_ms``,
``ttft_ms``, ``stream``, ``prompt_tokens``, ``completion_tokens``, ``error``; for a request that
waited in a flow-control queue ``priority`` (its band), ``tenant`` (its fairness key) and
``queue_ms``; for a canary-split request ``requested_model`` (the name the client sent); for a
request whose OpenTelemetry trace was recorded ``trace_id`` (32 hex digits), to find its trace.

Where ``igw serve`` set the logger up (its batched handler only), the line is queued without a
:class:`logging.LogRecord` (:func:`igw.gateway.log_buffer.line_sink`); otherwise it is logged.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import orjson

from igw.gateway.log_buffer import line_sink

access_log = logging.getLogger("igw.access")


@dataclass(slots=True)
class AccessRecord:
    request_id: str
    method: str
    path: str
    ts: float = field(default_factory=time.time)
    model: str | None = None
    base_model: str | None = None
    scheduler: str | None = None
    status: int = 0
    endpoint: str | None = None
    attempts: int = 0
    scores: Mapping[str, Mapping[str, float]] | None = None
    decision_us: float | None = None
    reason: str | None = None
    duration_ms: float | None = None
    ttft_ms: float | None = None
    stream: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    priority: int | None = None
    tenant: str | None = None
    queue_ms: float | None = None
    requested_model: str | None = None
    trace_id: str | None = None

    def emit(self) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        # Not dataclasses.asdict: it deep-copies ``scores`` (~100 calls per request, the largest
        # share of the gateway's own per-request CPU when profiled); a shallow read is enough here.
        record = {k: v for k, v in zip(_FIELDS, _VALUES(self), strict=True) if v is not None}
        if self.scores:
            record["scores"] = {k: {n: round(v, 4) for n, v in s.items()} for k, s in self.scores.items()}
        line = orjson.dumps(record).decode()
        sink = line_sink(access_log)
        if sink is None:
            access_log.info(line)
        else:  # igw serve's set-up: queued as a line, without a LogRecord
            sink.emit_line(line)


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(AccessRecord))
_VALUES = operator.attrgetter(*_FIELDS)
"""Every field's value in one call (a tuple, in :data:`_FIELDS` order)."""
