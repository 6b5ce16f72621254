"""Everything the request path reports about one request, behind one object.

:class:`RequestObserver` owns the request's access-log record and its Prometheus series, so the
request path (:mod:`igw.gateway.inference`) states *what happened* (``routed``, ``decided``,
``attempt``, ``finish``...) and never touches a metric or a log field itself. Each request is
finished exactly once: :meth:`finish` (a response was produced) or :meth:`client_gone` (the client
left first).
"""

from __future__ import annotations

import time
from typing import Final

from aiohttp import web

from igw.gateway.access_log import AccessRecord
from igw.gateway.telemetry import UNKNOWN_MODEL, GatewayMetrics
from igw.gateway.upstream import ExchangeResult
from igw.scheduling.types import RoutingDecision

CLIENT_CLOSED: Final = 499
"""Status recorded (metrics, access log) for requests the client abandoned (nginx's convention)."""


class RequestObserver:
    """Telemetry of one inference request: access-log record plus metrics, written as it goes."""

    __slots__ = ("_done", "metrics", "model_label", "record", "started")

    def __init__(self, metrics: GatewayMetrics, *, request_id: str, method: str, path: str) -> None:
        self.metrics = metrics
        self.record = AccessRecord(request_id=request_id, method=method, path=path)
        self.started = time.perf_counter()
        self.model_label = UNKNOWN_MODEL
        """The ``model`` label of this request's series: only configured models, never client input."""
        self._done = False

    @property
    def request_id(self) -> str:
        return self.record.request_id

    def routed(
        self,
        *,
        model: str | None,
        scheduler: str,
        stream: bool,
        base_model: str | None = None,
        configured: bool = False,
    ) -> None:
        """The body was parsed and the request matched a scheduler (or the default backend)."""
        if configured and model is not None:
            self.model_label = model
        self.record.model, self.record.base_model, self.record.scheduler = model, base_model, scheduler
        self.record.stream = stream

    def decided(self, scheduler: str, decision: RoutingDecision, elapsed_s: float) -> None:
        self.metrics.child(self.metrics.decision, scheduler).observe(elapsed_s)
        self.record.decision_us = round(elapsed_s * 1e6, 1)
        self.record.reason = decision.reason or None
        self.record.scores = decision.scores or None  # rounded only if the access log is written

    def rejected(self, reason: str) -> None:
        """Refused before reaching a model server (``saturated``, ``no_endpoints``, ``context_length``)."""
        self.metrics.child(self.metrics.rejections, self.model_label, reason).inc()

    def attempt(self, number: int, endpoint: str, *, scheduler: str | None) -> None:
        self.record.attempts, self.record.endpoint = number, endpoint
        if scheduler is not None:
            self.metrics.child(self.metrics.picks, scheduler, endpoint).inc()

    def connect_failed(self, endpoint: str, error: str, *, retrying_on: str | None) -> None:
        self.record.error = f"connect to {endpoint} failed: {error}"
        if retrying_on is not None:
            self.metrics.child(self.metrics.retries, retrying_on).inc()

    def failed(self, error: str, *, stream_broken: bool = False) -> None:
        """The request went wrong (``stream_broken``: after the response had started)."""
        self.record.error = error
        if stream_broken:
            self.metrics.child(self.metrics.stream_errors, self.model_label).inc()

    def exchanged(self, result: ExchangeResult, *, prompt_tokens: int, completion_tokens: int) -> None:
        """The upstream exchange finished: latency series, token counters, errors."""
        m = self.metrics
        if result.ttft_s is not None:
            m.child(m.ttft, self.model_label).observe(result.ttft_s)
            self.record.ttft_ms = round(result.ttft_s * 1000, 3)
        itl = m.child(m.itl, self.model_label)
        for gap in result.gaps:
            itl.observe(gap)
        usage = result.usage or {}
        if "prompt_tokens" in usage:
            m.child(m.tokens, self.model_label, "in").inc(usage["prompt_tokens"])
        if "completion_tokens" in usage:
            m.child(m.tokens, self.model_label, "out").inc(usage["completion_tokens"])
        if result.error:
            self.failed(result.error, stream_broken=result.streamed)
        self.record.prompt_tokens, self.record.completion_tokens = prompt_tokens, completion_tokens

    def finish(self, response: web.StreamResponse) -> web.StreamResponse:
        """Record the final status and emit; returns ``response`` so handlers can ``return`` it."""
        if not self._done:
            self._done = True
            self._emit(response.status)
        return response

    def client_gone(self) -> None:
        """The client went away: the upstream request was cancelled (its connection closed)."""
        if not self._done:
            self._done = True
            self.record.error = "client disconnected; upstream request cancelled"
            self.metrics.child(self.metrics.client_disconnects, self.model_label).inc()
            self._emit(CLIENT_CLOSED)

    def _emit(self, status: int) -> None:
        elapsed = time.perf_counter() - self.started
        self.record.status = status
        self.record.duration_ms = round(elapsed * 1000, 3)
        m = self.metrics
        m.child(m.requests, self.model_label, str(status)).inc()
        m.child(m.duration, self.model_label).observe(elapsed)
        self.record.emit()
