"""Everything the request path reports about one request, behind one object.

:class:`RequestObserver` owns the request's access-log record and its Prometheus series, so the
request path (:mod:`igw.gateway.inference`) states *what happened* (``routed``, ``decided``,
``attempt``, ``finish``...) and never touches a metric or a log field itself. Each request is
finished exactly once: :meth:`finish` (a response was produced) or :meth:`client_gone` (the client
left first).

With tracing on, the observer also holds the request's :class:`~igw.gateway.tracing.RequestTrace`
and tells it the same facts; with tracing off ``trace`` is ``None`` and each method pays one
attribute test, never a tracer call.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, TypeVar

from aiohttp import web

from igw.gateway.access_log import AccessRecord
from igw.gateway.forwarded_answer import ForwardedAnswer
from igw.gateway.telemetry import CLIENT_CLOSED, UNKNOWN_MODEL, GatewayMetrics, ModelSeries
from igw.gateway.upstream import ExchangeResult
from igw.scheduling.types import RoutingDecision

if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping

    from igw.gateway.tracing import RequestTrace

Answer = TypeVar("Answer", bound=web.StreamResponse | ForwardedAnswer)
"""What a request is answered with (its ``status`` is recorded)."""
FORWARD_CLIENT_GONE: Final = "client disconnected; upstream request cancelled"
"""The access log's ``error`` for a client that left while its request was forwarded."""
QUEUED_CLIENT_GONE: Final = "client disconnected while queued by flow control; nothing was sent"
"""The access log's ``error`` for a client that left while its request waited in flow control."""


class RequestObserver:
    """Telemetry of one inference request: access-log record plus metrics, written as it goes."""

    __slots__ = (
        "_done",
        "_requested_label",
        "key",
        "metrics",
        "model_label",
        "on_finish",
        "record",
        "requested_label",
        "series",
        "started",
        "trace",
    )

    def __init__(
        self, metrics: GatewayMetrics, *, request_id: str, method: str, path: str, key: str | None = None
    ) -> None:
        self.metrics = metrics
        self.record = AccessRecord(request_id=request_id, method=method, path=path)
        self.key = request_id if key is None else key
        """The request's name in the scheduler's state (``RoutingRequest.request_id`` and its
        outcomes'): unique, where ``request_id`` may be the client's ``X-Request-Id``, which two
        requests in flight can share (before session s35 the scheduler took them for one)."""
        self.started = time.perf_counter()
        self.model_label = UNKNOWN_MODEL
        """The ``model`` label of this request's series: only configured models, never client input."""
        self.requested_label = UNKNOWN_MODEL
        """The ``requested_model`` label: the configured name a canary rewrite matched, else ``model``."""
        self._requested_label: str | None = None
        """What :meth:`rewritten` chose for ``requested_label`` (``None``: no rewrite)."""
        self.trace: RequestTrace | None = None
        """The request's spans (set by the request path when tracing is on)."""
        self.series: ModelSeries | None = None
        """The request's per-model series once :meth:`exchanged` looked them up (its labels are
        final by then), so :meth:`finish` does not look them up again."""
        self.on_finish: Callable[[int, float, str | None], None] | None = None
        """Called with the final status, the duration and the model of the version asked last (set by
        the request path for canary rewrites)."""
        self._done = False

    @property
    def request_id(self) -> str:
        return self.record.request_id

    def authenticated(self) -> None:
        """The caller's credentials were checked (the body is read next)."""
        if self.trace is not None:
            self.trace.phase_done("igw.route")

    def admitted(self) -> None:
        """Authorization and the tenant's rate limit let the request through."""
        if self.trace is not None:
            self.trace.phase_done("igw.schedule")

    def rewritten(self, requested_model: str, *, named: bool) -> None:
        """A canary rewrite sent the request to another model than ``requested_model``, the name the
        client sent: the access log and the trace carry that name. The ``requested_model`` label
        carries it only when the rule names it (``named``: a configured name); a fallback rule
        catches any name a client makes up, and each made-up name became series of its own (about
        80 lines of ``/metrics`` per name, for ever, before session s39), so those count as
        :data:`~igw.gateway.telemetry.UNKNOWN_MODEL`."""
        self.record.requested_model = requested_model
        self._requested_label = requested_model if named else UNKNOWN_MODEL

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
            # A rewrite rule's configured name, or UNKNOWN_MODEL (rewritten): bounded either way.
            self.requested_label = self._requested_label or model
        self.record.model, self.record.base_model, self.record.scheduler = model, base_model, scheduler
        self.record.stream = stream
        if self.trace is not None:
            requested = self.record.requested_model
            self.trace.routed(requested_model=requested, model=model, scheduler=scheduler, stream=stream)

    def version_asked(self, model: str, base_model: str, scheduler: str) -> None:
        """A continuation's search asked another canary version's pod (``model`` in ``scheduler``'s
        pool, since session s49): the access log's ``model``, ``base_model`` and ``scheduler``, the
        per-model series and the canary's per-target series name that version, the one that answered
        when no later attempt follows (until then they named the version drawn, whose pool did not
        store the response). Configured names only, as :meth:`routed`'s."""
        self.record.model, self.record.base_model, self.record.scheduler = model, base_model, scheduler
        self.model_label = model

    def decided(
        self, scheduler: str, decision: RoutingDecision, elapsed_s: float, *, candidates: int = 0
    ) -> None:
        self.metrics.decision_child(scheduler).observe(elapsed_s)
        self.record.decision_us = elapsed_s * 1e6  # rounded in the line
        self.record.reason = decision.reason or None
        self.record.scores = decision.scores or None  # rounded only if the access log is written
        if self.trace is not None:
            self.trace.scheduled(scheduler, decision, candidates=candidates)

    def decided_later(self, scheduler: str, elapsed_s: float) -> None:
        """A forced choice (``Scheduler.pick``'s ``on_decided``): the time the request waited for
        its endpoint now; the decision's reason and scores when it settles (:meth:`scored`), before
        the access log is written. Not used with a trace (``decided`` puts the decision in it)."""
        self.metrics.decision_child(scheduler).observe(elapsed_s)
        self.record.decision_us = elapsed_s * 1e6  # rounded in the line

    def scored(self, decision: RoutingDecision) -> None:
        """A forced choice's complete decision, once settled: its reason and scores for the access
        log (what :meth:`decided` records of them)."""
        self.record.reason = decision.reason or None
        self.record.scores = decision.scores or None

    def held(self, scheduler: str, decision: RoutingDecision, *, candidates: int = 0) -> None:
        """Flow control queued the request without running the scheduler (no decision latency)."""
        self.record.reason = decision.reason or None
        if self.trace is not None:
            self.trace.scheduled(scheduler, decision, candidates=candidates)

    def waited(self, waited_s: float, outcome: RoutingDecision | str) -> None:
        """The request left the flow-control queue: dispatched (``outcome`` is the new decision) or
        shed (``outcome`` names why)."""
        self.record.queue_ms = waited_s * 1000
        if self.trace is not None:
            decision = outcome if isinstance(outcome, RoutingDecision) else None
            label = outcome if isinstance(outcome, str) else "dispatched"
            self.trace.queued(priority=self.record.priority, outcome=label, decision=decision)

    def rejected(self, reason: str) -> None:
        """Refused before reaching a model server (``saturated``, ``no_endpoints``, ``context_length``)."""
        self.metrics.child(self.metrics.rejections, self.model_label, reason).inc()
        if self.trace is not None:
            self.trace.rejected(reason)

    def attempt(self, number: int, endpoint: str, *, scheduler: str | None) -> None:
        self.record.attempts, self.record.endpoint = number, endpoint
        if scheduler is not None:
            self.metrics.picks_child(scheduler, endpoint).inc()
        if self.trace is not None:
            self.trace.attempt(number, endpoint)

    def propagate(self, headers: MutableMapping[str, str]) -> None:
        """Put the trace context of the current attempt in the headers sent to the model server."""
        if self.trace is not None:
            self.trace.inject(headers)

    def connect_failed(self, endpoint: str, error: str) -> None:
        self.record.error = f"connect to {endpoint} failed: {error}"
        if self.trace is not None:
            self.trace.upstream_done(
                status=None, ttft_s=None, error=error, input_tokens=None, output_tokens=None
            )

    def retrying(self, scheduler: str, cause: str, *, status: int | None) -> None:
        """The attempt just made failed in a way ``retry.retryOn`` covers (``cause``, the condition's
        name; ``status``: the refusal's, ``None`` for a connect failure) and the request goes to the
        next-best endpoint. The access log's ``error`` names the refusal (a connect failure's
        already names its endpoint), so the line of a request served by its retry still shows it."""
        self.metrics.child(self.metrics.retries, scheduler, cause).inc()
        if status is None:
            return  # a connect failure: its error and its span's end are recorded already
        self.record.error = f"{self.record.endpoint} answered {status}: retried ({cause})"
        if self.trace is not None:
            self.trace.upstream_done(
                status=status, ttft_s=None, error=f"retried: {cause}", input_tokens=None, output_tokens=None
            )

    def retry_overflowed(self, scheduler: str) -> None:
        """The attempt's refusal would have been retried, but the retry budget was spent."""
        self.metrics.child(self.metrics.retry_overflow, scheduler).inc()

    def failed(self, error: str, *, stream_broken: bool = False) -> None:
        """The request went wrong (``stream_broken``: after the response had started)."""
        self.record.error = error
        if stream_broken:
            self.metrics.child(self.metrics.stream_errors, self.model_label).inc()
        if self.trace is not None:
            self.trace.failed(error)

    def exchanged(self, result: ExchangeResult, *, prompt_tokens: int, completion_tokens: int) -> None:
        """The upstream exchange finished: latency series, token counters, errors."""
        series = self.series = self.metrics.model_series(self.model_label, self.requested_label)
        if result.ttft_s is not None:
            series.ttft.observe(result.ttft_s)
            self.record.ttft_ms = result.ttft_s * 1000
        if result.gaps:
            series.itl.observe_many(result.gaps)  # one call per stream (metric_batch), not one per gap
        usage = result.usage or {}
        if "prompt_tokens" in usage:
            series.tokens("in").inc(usage["prompt_tokens"])
        if "completion_tokens" in usage:
            series.tokens("out").inc(usage["completion_tokens"])
        if self.trace is not None:
            self.trace.upstream_done(
                status=result.status,
                ttft_s=result.ttft_s,
                error=result.error,
                input_tokens=usage.get("prompt_tokens"),
                output_tokens=usage.get("completion_tokens"),
            )
        if result.error:
            self.failed(result.error, stream_broken=result.streamed)
        if result.large_error:
            self.large_error_answer()
        self.record.prompt_tokens, self.record.completion_tokens = prompt_tokens, completion_tokens

    def large_error_answer(self) -> None:
        """Count a model server's error answer relayed as it arrived (past the error buffer): once
        its relay ended, to its end (:meth:`exchanged`) or cut short (its client left,
        ``routeTimeout`` or a shutdown ended it: :func:`igw.gateway.inference._charge_relayed`)."""
        self.metrics.child(self.metrics.large_error_answers, self.model_label).inc()

    def usage_unread(self, reason: str) -> None:
        """Count an attempt's answer the pod compressed whose usage could not be read (``reason``:
        :attr:`igw.gateway.upstream.ExchangeResult.usage_unread`), each attempt's, a retried one's
        too: the token limits did not charge it, or the client got a 502 for it."""
        self.metrics.child(self.metrics.answer_usage_unread, self.model_label, reason).inc()

    def upstream_redirect(self) -> None:
        """Count an attempt's redirect refused (:attr:`igw.gateway.upstream.ExchangeResult.redirect`),
        a retried one's too."""
        self.metrics.child(self.metrics.upstream_redirects, self.model_label).inc()

    def upstream_non_answer(self, reason: str) -> None:
        """Count an attempt's answer refused as no answer to its API (``reason``:
        :attr:`igw.gateway.upstream.ExchangeResult.not_an_answer`), a retried one's too."""
        self.metrics.child(self.metrics.upstream_non_answers, self.model_label, reason).inc()

    def finish(self, response: Answer) -> Answer:
        """Record the final status and emit; returns ``response`` so handlers can ``return`` it."""
        if not self._done:
            self._done = True
            self._emit(response.status)
            if self.trace is not None:
                self.trace.finish(response.status, error=self.record.error)
        return response

    def client_gone(self, error: str = FORWARD_CLIENT_GONE) -> None:
        """The client went away: the upstream request was cancelled (its connection closed), or,
        with ``error`` saying so, the request left flow control's queue before it was sent."""
        if not self._done:
            self._done = True
            self.record.error = error
            self.metrics.child(self.metrics.client_disconnects, self.model_label).inc()
            self._emit(CLIENT_CLOSED)
            if self.trace is not None:
                self.trace.finish(CLIENT_CLOSED, error=self.record.error)

    def _emit(self, status: int) -> None:
        elapsed = time.perf_counter() - self.started
        if self.trace is not None:
            self.record.trace_id = self.trace.recorded_trace_id
        self.record.status = status
        self.record.duration_ms = elapsed * 1000
        series = self.series
        if series is None:
            series = self.metrics.model_series(self.model_label, self.requested_label)
        series.requests(status).inc()
        series.duration.observe(elapsed)
        if self.on_finish is not None:
            self.on_finish(status, elapsed, self.record.model)
        self.record.emit()
