"""OpenTelemetry traces of inference requests: where a slow request spent its time.

One ``SERVER`` span per inference request (continuing the client's W3C ``traceparent``), with a
child span per phase of the request path:

* ``igw.auth``: authenticating the bearer token;
* ``igw.route``: reading and parsing the body, the canary rewrite, the body-based model match;
* ``igw.admit``: authorization and the tenant's rate limit;
* ``igw.schedule``: the endpoint picker (candidate count, winning pod, the winner's per-scorer
  scores, which pods filters removed and why);
* ``igw.queue``: waiting in the flow-control band's queue (only when the pool was saturated);
* ``igw.upstream`` (``CLIENT``, one per attempt): the exchange with a model server, whose context is
  sent to it in ``traceparent``/``tracestate``; its child ``igw.upstream.connect`` covers getting a
  connection and sending the request head (``igw.connection.reused`` says whether a pooled one was
  used), and the ``gen_ai.first_token`` event marks the first generated token relayed.

Model and token attributes follow the OpenTelemetry GenAI semantic conventions
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.response.model``,
``gen_ai.usage.input_tokens``/``output_tokens``). Attributes hold routing facts only (models, pod
addresses, scores, statuses), never a header value, a prompt or a token.

Phases that finish before the next begins are recorded after the fact with their measured start and
end times (the request path only reports "this phase is done" through its
:class:`~igw.gateway.observer.RequestObserver`); the upstream spans are live because their context
has to travel to the model server. Tracing is off unless an OTLP endpoint is configured
(:mod:`igw.gateway.tracing_options` decides); off means no :class:`RequestTrace` exists and the
request path makes no tracer call at all.
"""

from __future__ import annotations

import contextvars
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceState,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes, AttributeValue

from igw.gateway.inference_apis import operation_name
from igw.gateway.log_throttle import RepeatThrottle
from igw.gateway.telemetry import CLIENT_CLOSED
from igw.gateway.trace_export import (
    CountingSpanExporter,
    ExportStats,
    QueueBound,
    queue_size,
    throttle_exporter_logs,
)
from igw.gateway.tracing_options import SERVICE_NAME, TracingOptions, env_sampler_ratio
from igw.scheduling.types import RoutingDecision

FIRST_TOKEN_EVENT: Final = "gen_ai.first_token"
CLIENT_GONE_ERROR: Final = "client_gone"
"""The attempt span's ``error.type`` when its client left (the global router's word for it): not
the ``upstream_error`` of a pod that failed, which the leaving's error text would otherwise give."""
_PROPAGATOR: Final = TraceContextTextMapPropagator()
TRACE_HEADERS: Final = frozenset({"traceparent", "tracestate"})
"""The W3C trace-context headers: with tracing on, a model server gets the gateway's, never the caller's."""
TRACESTATE_BUDGET: Final = 512
"""Characters of a caller's ``tracestate`` a tier passes on (the W3C minimum a vendor should
propagate); members past it are dropped by :func:`caller_context`."""
TRACESTATE_LARGE_MEMBER: Final = 128
"""A ``tracestate`` member longer than this is the first to go when the header is over budget (W3C
Trace Context 3.3.1.5)."""
_CURRENT_ATTEMPT: contextvars.ContextVar[RequestTrace | None] = contextvars.ContextVar(
    "igw_trace_attempt", default=None
)
"""The trace whose upstream attempt the current task is making (read by the upstream client's
connect hooks, which run in the task that sends the request)."""


class Tracing:
    """The gateway's tracer provider, and the start of every request's trace."""

    def __init__(
        self,
        processor: SpanProcessor,
        *,
        sample_ratio: float | None = None,
        export_stats: ExportStats | None = None,
        undo_log_throttle: Callable[[], None] | None = None,
        exporter: SpanExporter | None = None,
        flush_timeout_s: float | None = None,
        service_name: str = SERVICE_NAME,
        trust_parent_sampling: bool = False,
    ) -> None:
        """``service_name``: ``service.name`` unless the ``OTEL_*`` variables name one (the global
        router's spans are ``igw-global-router``'s, so the two tiers tell apart in a trace).
        ``trust_parent_sampling`` (with a ``sample_ratio``): follow the sampled flag of the caller's
        ``traceparent``; without it the caller's trace is continued but whether it is recorded is
        drawn here at ``sample_ratio`` (:func:`edge_sampler`). Without a ``sample_ratio``: with
        ``trust_parent_sampling`` the SDK's ``OTEL_TRACES_SAMPLER`` decides; without it that
        variable's ratio is drawn here as a ``sample_ratio`` would be
        (:func:`~igw.gateway.tracing_options.env_sampler_ratio`: the SDK's samplers followed the
        caller's flag), and with the variable unset every request is recorded."""
        self._exporter = exporter
        self._flush_timeout_s = flush_timeout_s
        """With ``exporter``: how long :meth:`shutdown`'s final flush may take before the exporter
        is stopped (``None``: as long as the SDK waits)."""
        self.export_stats = export_stats
        """The exporter's span counts, for the gateway's ``/metrics`` (``None``: not an OTLP export)."""
        self._undo_log_throttle = undo_log_throttle
        sampler: Sampler | None = None  # None: the SDK's, from OTEL_TRACES_SAMPLER(_ARG)
        if sample_ratio is None and not trust_parent_sampling:
            # the SDK's samplers follow the caller's flag (its default parentbased_always_on let a
            # caller's -00 keep its request unrecorded): the variable's ratio is drawn here instead
            env_ratio = env_sampler_ratio(os.environ)
            sample_ratio = 1.0 if env_ratio is None else env_ratio
        if sample_ratio is not None:
            sampler = edge_sampler(sample_ratio, trust_parent=trust_parent_sampling)
        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, SDK defaults
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": service_name}))
        self.provider = TracerProvider(resource=resource, sampler=sampler)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("igw.gateway")

    @classmethod
    def exporting(cls, options: TracingOptions, *, service_name: str = SERVICE_NAME) -> Tracing:
        """Batch-export to ``options.endpoint`` over OTLP/HTTP (protobuf) from a background thread;
        spans that find the batch queue full are counted as dropped (:class:`QueueBound`)."""
        # deferred: optional dependency weight: the exporter (and requests) load only with tracing on
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        stats = ExportStats()
        exporter = CountingSpanExporter(
            OTLPSpanExporter(endpoint=options.endpoint, timeout=options.export_timeout_s), stats
        )
        undo = throttle_exporter_logs(RepeatThrottle())
        capacity = queue_size()
        return cls(
            QueueBound(BatchSpanProcessor(exporter, max_queue_size=capacity), stats, capacity),
            sample_ratio=options.sample_ratio,
            export_stats=stats,
            undo_log_throttle=undo,
            exporter=exporter,
            flush_timeout_s=options.export_timeout_s,
            service_name=service_name,
            trust_parent_sampling=options.trust_parent_sampling,
        )

    def start(
        self,
        headers: Mapping[str, str],
        *,
        method: str,
        path: str,
        started: float,
        route: str | None = None,
    ) -> RequestTrace:
        """The trace of one request, continuing the client's ``traceparent`` when it sent one.
        ``route``: a stored-response route's template (the span's name and ``http.route``; ``path``
        then as :func:`igw.gateway.response_ids.logged_path` writes it); ``None``: an inference
        route, ``path`` its own template."""
        return RequestTrace(self.tracer, headers, method=method, path=path, started=started, route=route)

    def connect_hooks(self) -> CurrentAttemptHooks:
        """Hooks for the upstream client that time ``igw.upstream.connect``."""
        return CurrentAttemptHooks()

    def shutdown(self) -> None:
        """Export what is still buffered, then stop the exporter; with a ``flush_timeout_s`` (an OTLP
        export: the exporter's own timeout) the exporter is stopped once that has passed, which ends
        its retries, and the spans still queued are dropped (counted as such). Without the cut the
        SDK's batch processor kept retrying batch after batch of a collector that is down for 30 s,
        its own fixed bound, three times what the documentation promised and past the 10 s the
        pod's grace period keeps for the exit (before session s39)."""
        stop: threading.Timer | None = None
        if self._exporter is not None and self._flush_timeout_s is not None:
            stop = threading.Timer(self._flush_timeout_s, self._exporter.shutdown)
            stop.daemon = True
            stop.start()
        try:
            self.provider.shutdown()
        finally:
            if stop is not None:
                stop.cancel()
            if self._undo_log_throttle is not None:
                self._undo_log_throttle()


class _RatioDraw(Sampler):
    """Records ``ratio`` of the spans it is asked about by a random draw, not by the trace id: a
    caller's trace id is the caller's choice, and :class:`TraceIdRatioBased` records every id whose
    low 64 bits are small (``00-<16 hex>0000000000000000-...-00`` is recorded at any ratio)."""

    def __init__(self, ratio: float) -> None:
        self._ratio = ratio

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        keep = random.random() < self._ratio  # a sampling draw, not a secret
        parent = trace.get_current_span(parent_context).get_span_context()
        return SamplingResult(
            Decision.RECORD_AND_SAMPLE if keep else Decision.DROP,
            attributes if keep else None,
            parent.trace_state if parent.is_valid else None,
        )

    def get_description(self) -> str:
        return f"RatioDraw{{{self._ratio}}}"


def edge_sampler(ratio: float, *, trust_parent: bool) -> Sampler:
    """The sampler of a tier that ``ratio`` of the requests are recorded at.

    A trace started here: by its (random) trace id. A caller's trace (its ``traceparent``): with
    ``trust_parent``, as its sampled flag says (the W3C parent-based rule); otherwise drawn at
    ``ratio`` as if started here, the caller's trace id and parent kept. Why: the caller's flag is
    the caller's word, so an untrusted client sending ``-01`` on every request had each recorded
    (with its five to seven spans exported) at a ratio of 0.01, 100 times the export the operator
    sized, and one sending ``-00`` kept its requests out of every trace (before session s49). A
    tier behind a trusted one (tier 1 behind the global router, a pod behind tier 1) trusts it to
    keep whole traces; the spans below the server span follow it (a local parent) either way."""
    if trust_parent:
        return ParentBased(TraceIdRatioBased(ratio))
    draw = _RatioDraw(ratio)
    return ParentBased(TraceIdRatioBased(ratio), remote_parent_sampled=draw, remote_parent_not_sampled=draw)


def caller_context(headers: Mapping[str, str]) -> Context:
    """The caller's trace context (``traceparent``/``tracestate``), its ``tracestate`` cut to
    :data:`TRACESTATE_BUDGET` characters as W3C Trace Context 3.3.1.5 allows: members over
    :data:`TRACESTATE_LARGE_MEMBER` characters dropped first, then members from the end.

    Why: the state goes on to every cluster and pod the request reaches, and a valid one of 32
    members and 8192 characters was passed on whole (before session s49), one client's bytes
    on every upstream request."""
    parent = _PROPAGATOR.extract(headers)
    span_context = trace.get_current_span(parent).get_span_context()
    state = span_context.trace_state
    if not span_context.is_valid or len(state.to_header()) <= TRACESTATE_BUDGET:
        return parent
    members = [
        (key, value) for key, value in state.items() if len(key) + 1 + len(value) <= TRACESTATE_LARGE_MEMBER
    ]
    while members and sum(len(k) + len(v) + 2 for k, v in members) - 1 > TRACESTATE_BUDGET:
        members.pop()
    bounded = SpanContext(
        span_context.trace_id,
        span_context.span_id,
        is_remote=True,
        trace_flags=span_context.trace_flags,
        trace_state=TraceState(members),
    )
    return trace.set_span_in_context(NonRecordingSpan(bounded), parent)


def _wall_ns(trace_: RequestTrace, perf: float) -> int:
    return trace_.wall0_ns + int((perf - trace_.perf0) * 1e9)


class RequestTrace:
    """The spans of one request, written as its :class:`~igw.gateway.observer.RequestObserver` hears
    what happened."""

    __slots__ = (
        "_attempt",
        "_connect",
        "_ctx",
        "_mark",
        "_pending",
        "_recording",
        "_server",
        "_tracer",
        "perf0",
        "wall0_ns",
    )

    def __init__(
        self,
        tracer: trace.Tracer,
        headers: Mapping[str, str],
        *,
        method: str,
        path: str,
        started: float,
        route: str | None = None,
    ) -> None:
        self._tracer = tracer
        self.perf0 = started
        self.wall0_ns = time.time_ns() - int((time.perf_counter() - started) * 1e9)
        parent = caller_context(headers)
        attributes: dict[str, AttributeValue] = {"http.request.method": method, "url.path": path}
        if route is None:  # an inference route
            attributes["gen_ai.operation.name"] = operation_name(path)
        else:  # a stored response's (its path holds the id's reference, never the id)
            attributes["http.route"] = route
        self._server = tracer.start_span(
            f"{method} {route or path}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=self.wall0_ns,
            attributes=attributes,
        )
        self._ctx: Context = trace.set_span_in_context(self._server, parent)
        self._recording = self._server.is_recording()
        """False for a trace the sampler dropped: only its context is propagated, no child spans."""
        self._mark = started
        self._pending: str | None = "igw.auth"
        """The phase in progress since ``_mark``; recorded as failed if the request ends in it."""
        self._attempt: Span | None = None
        self._connect: Span | None = None

    def _phase(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        now = time.perf_counter()
        span = self._tracer.start_span(
            name, context=self._ctx, start_time=_wall_ns(self, self._mark), attributes=attributes
        )
        span.end(end_time=_wall_ns(self, now))
        self._mark = now

    @property
    def recorded_trace_id(self) -> str | None:
        """The W3C trace id (32 hex digits) when this trace is recorded, for the access log."""
        return f"{self._server.get_span_context().trace_id:032x}" if self._recording else None

    def phase_done(
        self, next_phase: str | None, attributes: Mapping[str, AttributeValue] | None = None
    ) -> None:
        """The pending phase finished now; ``next_phase`` starts."""
        if self._pending is not None and self._recording:
            self._phase(self._pending, attributes)
        self._pending = next_phase

    def routed(self, *, requested_model: str | None, model: str | None, scheduler: str, stream: bool) -> None:
        if not self._recording:
            return
        attributes: dict[str, AttributeValue] = {"igw.scheduler": scheduler, "igw.stream": stream}
        if requested_model or model:
            self._server.set_attribute("gen_ai.request.model", requested_model or model or "")
        if model:
            attributes["gen_ai.request.model"] = model
            self._server.set_attribute("gen_ai.response.model", model)
        if requested_model and requested_model != model:
            attributes["igw.requested_model"] = requested_model
        self.phase_done("igw.admit", attributes)

    def scheduled(self, scheduler: str, decision: RoutingDecision, *, candidates: int) -> None:
        """``igw.schedule`` with what the picker saw and chose."""
        if not self._recording:
            return
        self.phase_done(None, _decision_attributes(scheduler, decision, candidates))

    def queued(self, *, priority: int | None, outcome: str, decision: RoutingDecision | None) -> None:
        """``igw.queue``: from the saturated decision until dispatch or shedding."""
        if not self._recording:
            return
        attributes: dict[str, AttributeValue] = {"igw.flow.outcome": outcome}
        if priority is not None:
            attributes["igw.flow.priority"] = priority
        if decision is not None and decision.endpoint is not None:
            attributes["igw.scheduling.endpoint"] = decision.endpoint
        self._pending = "igw.queue"
        self.phase_done(None, attributes)

    def attempt(self, number: int, endpoint: str) -> None:
        """Start the ``igw.upstream`` span of one attempt (ending the previous one)."""
        self._pending = None
        _CURRENT_ATTEMPT.set(self)  # before any return: no earlier request's trace stays current
        if not self._recording:
            return
        self._end_attempt(None)
        host, _, port = endpoint.rpartition(":") if "://" not in endpoint else (endpoint, "", "")
        attributes: dict[str, AttributeValue] = {"igw.attempt": number, "server.address": host}
        if port.isdigit():
            attributes["server.port"] = int(port)
        self._attempt = self._tracer.start_span(
            "igw.upstream", context=self._ctx, kind=SpanKind.CLIENT, attributes=attributes
        )

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Set ``traceparent`` (and ``tracestate``) for the model server: the attempt's span context,
        in place of every copy the caller sent. The caller's ``tracestate`` goes only as the span
        context carries it: dropped with a ``traceparent`` that is not valid (a new trace starts)
        and when it is itself not valid (over 32 members or 8192 characters: the SDK), where until session
        s49 the caller's header, up to the header size limit, was forwarded as sent beside the new
        trace's ``traceparent`` (the SDK injects no ``tracestate`` when it has none)."""
        for name in TRACE_HEADERS:
            if name in headers:
                del headers[name]  # every copy (a multi-valued mapping's too)
        span = self._attempt if self._attempt is not None else self._server
        _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span, self._ctx))

    def connect_started(self) -> None:
        if self._attempt is not None and self._connect is None:
            ctx = trace.set_span_in_context(self._attempt, self._ctx)
            self._connect = self._tracer.start_span("igw.upstream.connect", context=ctx)
            self._connect.set_attribute("igw.connection.reused", False)

    def connection_reused(self) -> None:
        if self._connect is not None:
            self._connect.set_attribute("igw.connection.reused", True)

    def connect_done(self, error: str | None = None) -> None:
        if self._connect is not None:
            if error is not None:
                self._connect.set_status(Status(StatusCode.ERROR, error))
            self._connect.end()
            self._connect = None

    def upstream_done(
        self,
        *,
        status: int | None,
        ttft_s: float | None,
        error: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
    ) -> None:
        """The exchange finished: first-token event, status, token usage."""
        span = self._attempt
        if span is not None:
            if status is not None:
                span.set_attribute("http.response.status_code", status)
            if ttft_s is not None:
                span.add_event(
                    FIRST_TOKEN_EVENT,
                    {"igw.ttft_ms": round(ttft_s * 1000, 3)},
                    timestamp=_wall_ns(self, self.perf0 + ttft_s),
                )
        for key, value in (
            ("gen_ai.usage.input_tokens", input_tokens),
            ("gen_ai.usage.output_tokens", output_tokens),
        ):
            if value is not None:
                self._server.set_attribute(key, value)
        self._end_attempt(error)

    def failed(self, error: str) -> None:
        """The request failed after it was routed (connect exhausted, timeout, broken stream)."""
        self._end_attempt(error)
        self._server.set_status(Status(StatusCode.ERROR, error))

    def rejected(self, reason: str) -> None:
        self._server.set_attribute("igw.rejection", reason)

    def _end_attempt(self, error: str | None, error_type: str | None = None) -> None:
        self.connect_done(error)
        if self._attempt is not None:
            if error is not None:
                self._attempt.set_status(Status(StatusCode.ERROR, error))
                self._attempt.set_attribute("error.type", error_type or _error_type(error))
            self._attempt.end()
            self._attempt = None

    def finish(self, status: int, *, error: str | None = None) -> None:
        """End the request's span with its HTTP status (``error``: what went wrong, if anything).

        Like the HTTP semantic conventions, only 5xx marks a server span as failed (plus a stream
        broken after it started, see :meth:`failed`); every status >= 400 sets ``error.type``.
        """
        if self._pending is not None and status >= 400 and self._recording:
            self._phase(self._pending, {"error.type": str(status)})
        self._pending = None
        gone = CLIENT_GONE_ERROR if status == CLIENT_CLOSED else None
        self._end_attempt(error if status >= CLIENT_CLOSED else None, gone)
        self._server.set_attribute("http.response.status_code", status)
        if status >= 400:
            self._server.set_attribute("error.type", str(status))
        if status >= 500:
            self._server.set_status(Status(StatusCode.ERROR, error or f"HTTP {status}"))
        self._server.end()


def _error_type(error: str) -> str:
    """A low-cardinality ``error.type``: the exception name that starts our error strings."""
    head = error.split(":", 1)[0].strip()
    return head if head and " " not in head else "upstream_error"


def _decision_attributes(
    scheduler: str, decision: RoutingDecision, candidates: int
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "igw.scheduler": scheduler,
        "igw.scheduling.candidates": candidates,
        "igw.scheduling.outcome": decision.kind.value,
    }
    if decision.reason:
        attributes["igw.scheduling.reason"] = decision.reason
    if decision.endpoint is not None:
        attributes["igw.scheduling.endpoint"] = decision.endpoint
        for scorer, value in (decision.scores.get(decision.endpoint) or {}).items():
            attributes[f"igw.scheduling.score.{scorer}"] = value
    if decision.fallbacks:
        attributes["igw.scheduling.fallbacks"] = list(decision.fallbacks)
    if decision.removed:
        attributes["igw.scheduling.removed"] = [f"{key} ({why})" for key, why in decision.removed.items()]
    return attributes


class CurrentAttemptHooks:
    """The upstream client's connect hooks (:class:`igw.gateway.upstream_client.ConnectHooks`),
    applied to the trace of the attempt being made: the client calls them in the task that sends the
    request, where that attempt's trace is current."""

    __slots__ = ()

    def connect_started(self) -> None:
        current = _CURRENT_ATTEMPT.get()
        if current is not None:
            current.connect_started()

    def connection_reused(self) -> None:
        current = _CURRENT_ATTEMPT.get()
        if current is not None:
            current.connection_reused()

    def connect_done(self, error: str | None = None) -> None:
        current = _CURRENT_ATTEMPT.get()
        if current is not None:
            current.connect_done(error)
