"""A minimal OTLP/HTTP traces receiver on loopback: decodes each protobuf export request with
``opentelemetry-proto`` and keeps the spans, flattened, for assertions."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from igw.gateway.serving import serve_app


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status_code: int
    resource: dict[str, Any]


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    """Yield a receiver listening at ``receiver.url`` (base URL; traces arrive at ``/v1/traces``)."""
    receiver = Receiver(url="")

    async def traces(request: web.Request) -> web.Response:
        receiver.content_types.append(request.content_type)
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    receiver.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            events=tuple(e.name for e in span.events),
                            status_code=span.status.code,
                            resource=resource,
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        receiver.url = url
        yield receiver
