"""The global router's OpenTelemetry span of a request: one ``SERVER`` span per inference or
stored-response request (``igw global serve --otel-endpoint``, as ``igw serve`` takes it).

The span continues the client's W3C ``traceparent`` (following its sampled flag) and its context is
what each cluster receives in ``traceparent``/``tracestate`` in place of the client's, so a cluster
gateway's own server span (:mod:`igw.gateway.tracing`) is the router span's child: one trace shows
the router's time, each cluster it tried (``igw.attempts``) and tier 1's phases below. Attributes are
routing facts only (clusters, regions, models, statuses), never a header value or a body.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Final

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from igw.gateway.inference_apis import operation_name
from igw.gateway.tracing import Tracing

SERVICE_NAME: Final = "igw-global-router"
"""The router's ``service.name`` unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``)
names one; tier 1's is ``igw-gateway``."""
TRACE_HEADERS: Final = frozenset({"traceparent", "tracestate"})
"""The W3C trace-context headers: the client's are replaced by the router span's when tracing is on."""
_PROPAGATOR: Final = TraceContextTextMapPropagator()


class RouterTracing:
    """Starts the router's span of each request (held by the router when tracing is on)."""

    __slots__ = ("_tracer", "tracing")

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing
        self._tracer = tracing.provider.get_tracer("igw.global_router")

    def start(self, headers: Mapping[str, str], *, method: str, route: str, path: str) -> RouterSpan:
        """The span of one request (``route``: its route's template, the span's name; ``path``: as
        requested), a child of the client's ``traceparent`` when it sent one."""
        return RouterSpan(self._tracer, headers, method=method, route=route, path=path)


class RouterSpan:
    """The router's span of one request, ended with its answer (:meth:`finish`)."""

    __slots__ = ("_ctx", "_span", "attempts")

    def __init__(
        self, tracer: trace.Tracer, headers: Mapping[str, str], *, method: str, route: str, path: str
    ) -> None:
        parent = _PROPAGATOR.extract(headers)
        attributes: dict[str, str] = {"http.request.method": method, "url.path": path}
        if route == path:  # an inference route (a stored response's path holds its id)
            attributes["gen_ai.operation.name"] = operation_name(path)
        self._span = tracer.start_span(
            f"{method} {route}", context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        self._ctx = trace.set_span_in_context(self._span, parent)
        self.attempts = 0
        """Clusters an exchange was started with (a failover's retry, a search's next cluster)."""

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Replace the client's trace-context headers with the router span's (also when the sampler
        dropped it: its flag tells the cluster not to record either)."""
        for name in TRACE_HEADERS:
            if name in headers:
                del headers[name]  # every copy (a multi-valued mapping's too)
        _PROPAGATOR.inject(headers, context=self._ctx)

    def model(self, model: str) -> None:
        """The request's model (one some cluster serves)."""
        self._span.set_attribute("gen_ai.request.model", model)

    def finish(self, status: int, *, cluster: str | None, region: str | None) -> None:
        """End the span with the client's status and the cluster (and its region) that answered;
        only a 5xx marks it failed, as tier 1's server span."""
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
