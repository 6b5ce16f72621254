"""In-process micro-benchmark of ``igw perf gateway``: what request tracing costs the request path.

One request's telemetry is the sequence of :class:`~igw.gateway.observer.RequestObserver` calls the
request path makes (authenticated, routed, admitted, decided, attempt, propagate, exchanged,
finish). Measured in the same run, alternating rounds:

* the sequence without the three tracing-only hooks (``authenticated``, ``admitted``,
  ``propagate``) and tracing off: the baseline, what the request path did before tracing existed;
* the full sequence with tracing off (the default): the tracing hooks' cost when nothing is traced;
* tracing on with every trace sampled and an exporter that drops the spans (the SDK's span cost,
  not the network's), and with none sampled (only the context propagation).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from igw.gateway.observer import RequestObserver
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.tracing import Tracing
from igw.gateway.upstream import ExchangeResult
from igw.scheduling.types import DecisionKind, RoutingDecision


class _DroppingExporter(SpanExporter):
    """Counts every span and keeps none: the benchmark measures span creation, not export."""

    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


@dataclass(frozen=True, slots=True)
class ObserverCost:
    name: str
    mean_us: float
    """Per request, the lowest of the rounds' means (the round least disturbed by other load)."""
    spans_per_request: float
    """Spans the variant recorded per request (what its cost bought)."""


_DECISION = RoutingDecision(
    kind=DecisionKind.PICKED,
    endpoint="10.0.0.1:8000",
    fallbacks=("10.0.0.2:8000",),
    scores={
        "10.0.0.1:8000": {"queue": 1.6, "kv-cache": 1.2, "prefix": 2.4, "total": 5.2},
        "10.0.0.2:8000": {"queue": 1.0, "kv-cache": 0.8, "prefix": 0.0, "total": 1.8},
    },
    removed={"10.0.0.3:8000": "stale or failing metrics"},
)


def _request(metrics: GatewayMetrics, tracing: Tracing | None, *, hooks: bool) -> Callable[[], object]:
    response = web.Response(status=200)
    result = ExchangeResult(
        answer=response,
        status=200,
        ok=True,
        ttft_s=0.05,
        usage={"prompt_tokens": 12, "completion_tokens": 8},
    )
    client_headers = {"content-type": "application/json"}
    upstream_headers: CIMultiDict[str] = CIMultiDict(client_headers)  # built by the request path anyway

    def one() -> object:
        obs = RequestObserver(metrics, request_id="r", method="POST", path="/v1/chat/completions")
        if tracing is not None:
            obs.trace = tracing.start(
                client_headers, method="POST", path="/v1/chat/completions", started=obs.started
            )
        if hooks:
            obs.authenticated()
        obs.routed(model="m", scheduler="m", stream=False, base_model="m", configured=True)
        if hooks:
            obs.admitted()
        obs.decided("m", _DECISION, 2e-5, candidates=3)
        obs.attempt(1, "10.0.0.1:8000", scheduler="m")
        if hooks:
            obs.propagate(upstream_headers)
        obs.exchanged(result, prompt_tokens=12, completion_tokens=8)
        return obs.finish(response)

    return one


def observer_costs(*, requests: int, rounds: int = 9) -> list[ObserverCost]:
    """Per-request cost of the telemetry calls, without tracing hooks, tracing off and on."""
    metrics = GatewayMetrics(lister=list, clock=time.monotonic)
    exporters = {"sampled": _DroppingExporter(), "unsampled": _DroppingExporter()}
    sampled = Tracing(SimpleSpanProcessor(exporters["sampled"]), sample_ratio=1.0)
    unsampled = Tracing(SimpleSpanProcessor(exporters["unsampled"]), sample_ratio=0.0)
    variants = {
        "telemetry calls before tracing (baseline)": _request(metrics, None, hooks=False),
        "tracing off (default)": _request(metrics, None, hooks=True),
        "tracing on, every request sampled": _request(metrics, sampled, hooks=True),
        "tracing on, none sampled": _request(metrics, unsampled, hooks=True),
    }
    counted: list[_DroppingExporter | None] = [None, None, exporters["sampled"], exporters["unsampled"]]
    means: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(rounds):
            for name, fn in variants.items():
                t0 = time.perf_counter()
                for _ in range(requests):
                    fn()
                means[name].append((time.perf_counter() - t0) * 1e6 / requests)
    finally:
        sampled.shutdown()
        unsampled.shutdown()
    return [
        ObserverCost(name, min(values), 0 if n is None else n.exported / (requests * rounds))
        for (name, values), n in zip(means.items(), counted, strict=True)
    ]
