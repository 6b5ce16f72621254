"""The global router's OpenTelemetry span of a request: one ``SERVER`` span per inference or
stored-response request (``igw global serve --otel-endpoint``, as ``igw serve`` takes it).

The span continues the client's W3C ``traceparent`` (following its sampled flag) and its context is
what each cluster receives in ``traceparent``/``tracestate`` in place of the client's. Each
cluster tried has its own ``CLIENT`` child span, ``igw.cluster`` (its cluster, region, outcome -
the access log's word or the HTTP status - and status), whose context is the one that cluster
receives, so a cluster gateway's own server span (:mod:`igw.gateway.tracing`) is the child of the
attempt that reached it: one trace shows the router's time, each cluster it tried and tier 1's
phases below. A client leaving mid-answer ends the span 499, as the access log records it and as
tier 1's span records its own client leaving. Attributes are routing facts only (clusters, regions,
models, statuses), never a header value or a body.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Final

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from igw.gateway.inference_apis import operation_name
from igw.gateway.tracing import Tracing, caller_context

SERVICE_NAME: Final = "igw-global-router"
"""The router's ``service.name`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``)
names one; tier 1's is ``igw-gateway``."""
TRACE_HEADERS: Final = frozenset({"traceparent", "tracestate"})
"""The W3C trace-context headers: the client's are replaced by the router span's when tracing is on."""
_PROPAGATOR: Final = TraceContextTextMapPropagator()
CLIENT_CLOSED: Final = 499
"""The status of a request whose client left (the access log's, tier 1's)."""
CLIENT_LEFT: Final = frozenset({"client-gone", "cancelled"})
"""The access log's outcomes of an attempt the client left during
(:data:`igw.global_router.access_log.CLIENT_GONE`, :data:`~igw.global_router.access_log.CANCELLED`)."""
FAILED_OUTCOMES: Final = frozenset({"connect-failed", "past-max-request", "search-timeout"})
"""Word outcomes that mark an attempt span failed (as a 5xx answer does)."""
ATTEMPT_SPAN: Final = "igw.cluster"


class RouterTracing:
    """Starts the router's span of each request (held by the router when tracing is on)."""

    __slots__ = ("_tracer", "tracing")

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing
        self._tracer = tracing.provider.get_tracer("igw.global_router")

    def start(self, headers: Mapping[str, str], *, method: str, route: str, path: str) -> RouterSpan:
        """The span of one request (``route``: its route's template, the span's name and
        ``http.route``; ``path``: as requested, a stored response's id replaced by its reference,
        :func:`igw.gateway.response_ids.logged_path`), a child of the client's ``traceparent`` when
        it sent one."""
        return RouterSpan(self._tracer, headers, method=method, route=route, path=path)


class RouterSpan:
    """The router's span of one request, ended with its answer (:meth:`finish`)."""

    __slots__ = ("_attempt", "_ctx", "_gone", "_recording", "_span", "_tracer", "attempts")

    def __init__(
        self, tracer: trace.Tracer, headers: Mapping[str, str], *, method: str, route: str, path: str
    ) -> None:
        parent = caller_context(headers)  # its tracestate bounded
        attributes: dict[str, str] = {"http.request.method": method, "http.route": route, "url.path": path}
        if route == path:  # an inference route (a stored response's path holds its reference)
            attributes["gen_ai.operation.name"] = operation_name(path)
        self._span = tracer.start_span(
            f"{method} {route}", context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        self._tracer = tracer
        self._ctx = trace.set_span_in_context(self._span, parent)
        self._recording = self._span.is_recording()
        """False for a trace the sampler dropped: its context propagated, no attempt spans."""
        self._attempt: Span | None = None
        self._gone = False
        """The client left during an attempt: the span ends 499, whatever answer had started."""
        self.attempts = 0
        """Clusters an exchange was started with (a failover's retry, a search's next cluster)."""

    @property
    def recorded_trace_id(self) -> str | None:
        """The W3C trace id (32 hex digits) when this span is recorded, for the access log."""
        return f"{self._span.get_span_context().trace_id:032x}" if self._recording else None

    def attempt(self, cluster: str, region: str) -> None:
        """An exchange with ``cluster`` starts: counted, and (recorded) its ``CLIENT`` span started,
        whose context :meth:`inject` sends from now on."""
        self.attempts += 1
        self.attempt_done(None)  # a previous one never ended: ended without an outcome
        if not self._recording:
            return
        self._attempt = self._tracer.start_span(
            ATTEMPT_SPAN,
            context=self._ctx,
            kind=SpanKind.CLIENT,
            attributes={"igw.cluster": cluster, "igw.region": region, "igw.attempt": self.attempts},
        )

    def attempt_done(self, outcome: str | int | None) -> None:
        """The current attempt's ``outcome`` (the access log's word, or the HTTP status the cluster
        answered; ``None``: unknown); ends its span. Nothing without a current attempt (a cluster
        passed over without an exchange, ``pool-full``)."""
        if outcome is not None and str(outcome) in CLIENT_LEFT:
            self._gone = True
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if isinstance(outcome, int):
            span.set_attribute("igw.outcome", str(outcome))
            span.set_attribute("http.response.status_code", outcome)
            if outcome >= 400:
                span.set_attribute("error.type", str(outcome))
            if outcome >= 500:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {outcome}"))
        elif outcome is not None:
            span.set_attribute("igw.outcome", outcome)
            if outcome in CLIENT_LEFT:
                span.set_attribute("http.response.status_code", CLIENT_CLOSED)
            span.set_attribute("error.type", outcome.replace("-", "_"))
            if outcome in FAILED_OUTCOMES:
                span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Replace the client's trace-context headers with the current attempt's span's (the router
        span's before any), also when the sampler dropped the trace: its flag tells the cluster not
        to record either."""
        for name in TRACE_HEADERS:
            if name in headers:
                del headers[name]  # every copy (a multi-valued mapping's too)
        ctx = self._ctx if self._attempt is None else trace.set_span_in_context(self._attempt, self._ctx)
        _PROPAGATOR.inject(headers, context=ctx)

    def model(self, model: str) -> None:
        """The request's model (one some cluster serves)."""
        self._span.set_attribute("gen_ai.request.model", model)

    def finish(self, status: int, *, cluster: str | None, region: str | None) -> None:
        """End the span with the client's status and the cluster (and its region) that answered;
        only a 5xx marks it failed, as tier 1's server span. A client that left during an attempt
        ends it 499 (``error.type`` ``"499"``, tier 1's), not the status of the answer it left."""
        self.attempt_done(None)
        if self._gone:
            status = CLIENT_CLOSED
        span = self._span
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("igw.attempts", self.attempts)
        if cluster is not None:
            span.set_attribute("igw.cluster", cluster)
        if region is not None:
            span.set_attribute("igw.region", region)
        if status >= 400:
            span.set_attribute("error.type", str(status))
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
        span.end()
