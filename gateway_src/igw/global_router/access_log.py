"""The global router's access log: one JSON object per inference request, and per request about a
stored response (``GET``/``DELETE`` ``/v1/responses/{id}``, its ``cancel`` and ``input_items``), on
the ``igw.global_router.access`` logger (``spec.accessLog``: on by default, on stdout).

Written by tier 1's writer (:func:`igw.gateway.access_log.write_record`): queued unbuilt to the
batched handler ``igw global serve`` installs, built and redacted on its writer thread unless proven
clean by tier 1's rule (:func:`~igw.gateway.access_log.strings_clean`,
:func:`~igw.gateway.access_log.id_clean`), so a line has the same shape, the same redaction and costs
the event loop the same as tier 1's. Its ``request_id`` is the id the router forwarded to every
cluster it tried, so it joins each cluster's tier-1 line.

Fields (a field without a value is left out): ``request_id``, ``method``, ``path`` (without the query
string), ``ts``, ``model``, ``tenant`` (a verified caller's only), ``status``, ``error`` (the answer's
``X-Igw-Error-Code``, or ``client disconnected``), ``cluster`` and ``region`` (the cluster whose answer
was relayed), ``tried`` (each cluster tried, in order, with its outcome: the HTTP status it answered,
``connect-failed``, ``pool-full``, ``past-max-request``, ``client-gone``, ``cancelled`` (the client
left, its handler cancelled), ``shut-down`` (the router's stream grace over), and in a stored
response's search ``search-timeout`` (no answer within the search's bound: the next cluster asked)
or ``another-response`` (an answer about another response, or naming none: not relayed); and, for an
exchange that failed, its ``error``: the cause, as tier 1's line's ``error`` gives it -
``UpstreamBroken: the cluster's response has more than 100 header fields`` for a 502 - where the
answer's code says only ``upstream_error``; until session s49 never logged),
``bytes_in`` (the request body), ``bytes_out`` (the answer's body bytes written to the client, a
relayed answer's as a whole one's: no head, no chunk framing), ``ttfb_ms``, ``duration_ms``,
``stream``, ``client`` (the peer address), ``trace_id`` (the router span's, 32 hex digits, when
``--otel-endpoint`` is set and the request's trace is recorded: tier 1's field, to find its trace).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Final

import orjson

from igw.gateway.access_log import MS_DIGITS, _rounded, id_clean, strings_clean, write_record

router_access_log = logging.getLogger("igw.global_router.access")

RECORD_BYTES: Final = 640
"""A queued record's memory without its attempts (tier 1's
:data:`~igw.gateway.access_log.RECORD_BYTES`)."""
ATTEMPT_BYTES: Final = 200
"""Each attempt's share (a tuple of two short strings and the dict it becomes; rounded up), plus its
``error``'s length where it has one (:meth:`RouterAccessRecord.queued_bytes`)."""

CONNECT_FAILED: Final = "connect-failed"
POOL_FULL: Final = "pool-full"
PAST_MAX_REQUEST: Final = "past-max-request"
CLIENT_GONE: Final = "client-gone"
CANCELLED: Final = "cancelled"
SHUT_DOWN: Final = "shut-down"
ANOTHER_RESPONSE: Final = "another-response"
CLIENT_DISCONNECTED: Final = "client disconnected"


@dataclass(slots=True)
class RouterAccessRecord:
    """One request's fields, filled in as the request goes and written once it ended
    (:meth:`emit`); not changed after."""

    request_id: str
    method: str
    path: str
    client: str | None = None
    ts: float = field(default_factory=time.time)
    model: str | None = None
    tenant: str | None = None
    status: int = 0
    error: str | None = None
    cluster: str | None = None
    region: str | None = None
    tried: list[tuple[str, str, str | None]] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    ttfb_ms: float | None = None
    duration_ms: float | None = None
    stream: bool = False
    trace_id: str | None = None
    began: float = field(default_factory=time.perf_counter, repr=False, compare=False)
    """When the record was made, at the handler's start (:func:`time.perf_counter`): what a stored
    response's ``ttfb_ms`` is counted from; not in the line."""
    started_answer: object = field(default=None, repr=False, compare=False)
    """The client's answer once its head was sent (a stream, a large answer relayed as it comes): its
    bytes are counted from it when the handler is cancelled (the client gone); not in the line, and
    cleared before the record is queued."""

    def attempt(self, cluster: str, outcome: str | int, error: str | None = None) -> None:
        """Record one cluster tried and its outcome (an HTTP status, or one of the words above);
        ``error``: a failed exchange's cause (:attr:`~igw.gateway.upstream.ExchangeResult.error`)."""
        self.tried.append((cluster, str(outcome), error))

    def emit(self) -> None:
        """Write the line (INFO on :data:`router_access_log`)."""
        write_record(router_access_log, self)

    def queued_bytes(self) -> int:
        """An upper estimate of the memory held while the line waits (the writer's queue bound)."""
        causes = sum(len(error) for _, _, error in self.tried if error is not None)
        return RECORD_BYTES + ATTEMPT_BYTES * len(self.tried) + causes

    def render_line(self) -> tuple[str, bool]:
        """The line and whether redacting it would leave it as it is (on the writer's thread)."""
        return orjson.dumps(self.line_fields()).decode(), self.redaction_free()

    def redaction_free(self) -> bool:
        """Whether every string of the line is clean by tier 1's rule; a text field added here and
        not listed fails ``tests/global_router/test_access_log.py``."""
        strings = (
            self.method,
            self.path,
            self.client,
            self.model,
            self.tenant,
            self.error,
            self.cluster,
            self.region,
            self.trace_id,
        )
        if not strings_clean(strings):
            return False
        if not all(strings_clean(attempt) for attempt in self.tried):
            return False
        return id_clean(self.request_id)

    def line_fields(self) -> dict[str, object]:
        """Every field that has a value, in declaration order (timings rounded as tier 1's)."""
        out: dict[str, object] = {
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "ts": self.ts,
        }
        for name in ("model", "tenant"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["status"] = self.status
        for name in ("error", "cluster", "region"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["tried"] = [
            {"cluster": cluster, "outcome": outcome}
            if error is None
            else {"cluster": cluster, "outcome": outcome, "error": error}
            for cluster, outcome, error in self.tried
        ]
        out["bytes_in"] = self.bytes_in
        out["bytes_out"] = self.bytes_out
        if self.ttfb_ms is not None:
            out["ttfb_ms"] = _rounded(self.ttfb_ms, MS_DIGITS)
        if self.duration_ms is not None:
            out["duration_ms"] = _rounded(self.duration_ms, MS_DIGITS)
        out["stream"] = self.stream
        if self.client is not None:
            out["client"] = self.client
        if self.trace_id is not None:
            out["trace_id"] = self.trace_id
        return out
