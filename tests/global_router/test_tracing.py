"""The global router's span of a request (:mod:`igw.global_router.tracing`), recorded by the SDK's
in-memory exporter: one ``SERVER`` span per inference and stored-response request, continuing the
client's ``traceparent``, whose context each cluster receives in place of the client's, so that a
tier-1 gateway's own span is its child. Real HTTP: a router replica in front of fake model servers
standing in for clusters (and, once, a real tracing tier-1 gateway)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from igw.cli.main import main
from igw.gateway.serving import serve_app
from igw.gateway.tracing import Tracing
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from igw.global_router.tracing import SERVICE_NAME
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.global_router.support import MODEL, global_doc

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
COMPLETION = {"model": MODEL, "prompt": "x", "max_tokens": 2}
JSON = {"Content-Type": "application/json"}


def _clusters(endpoints: list[str]) -> list[dict[str, Any]]:
    """``c0`` in ``east`` (tried first), the rest in ``west``."""
    return [
        {"name": f"c{i}", "region": "east" if i == 0 else "west", "endpoint": url, "models": [MODEL]}
        for i, url in enumerate(endpoints)
    ]


@contextlib.asynccontextmanager
async def router(*endpoints: str, tracing: Tracing | None) -> AsyncIterator[str]:
    """A router (open, region ``east``) whose clusters are ``endpoints`` in order; yields its URL."""
    doc = global_doc(_clusters(list(endpoints)), heartbeats={"required": False})
    app = create_global_app(parse_global_config(doc), read_heartbeats=False, tracing=tracing)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        yield url


def memory_tracing(exporter: InMemorySpanExporter, **kwargs: Any) -> Tracing:
    return Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0, service_name=SERVICE_NAME, **kwargs)


def router_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.instrumentation_scope is not None and s.instrumentation_scope.name == "igw.global_router"
    ]


def received_trace_headers(server: FakeModelServer) -> list[tuple[str | None, str | None]]:
    """The ``traceparent`` and ``tracestate`` of each inference or stored-response request ``server``
    received."""
    out = []
    for received in server.received:
        if received.path.startswith("/v1/"):
            headers = {k.lower(): v for k, v in received.headers.items()}
            out.append((headers.get("traceparent"), headers.get("tracestate")))
    return out


def client_headers(sampled: bool = True) -> dict[str, str]:
    return {
        **JSON,
        "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-{'01' if sampled else '00'}",
        "tracestate": "vendor=abc",
    }


async def _post(url: str, headers: dict[str, str]) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/v1/completions", data=orjson.dumps(COMPLETION), headers=headers) as resp,
    ):
        await resp.read()
        return resp.status


async def test_a_request_has_one_span_and_the_cluster_gets_its_context() -> None:
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("east")) as (east,),
        router(f"http://{east.key}", tracing=memory_tracing(exporter)) as url,
    ):
        assert await _post(url, client_headers()) == 200
        await wait_for(lambda: len(router_spans(exporter)) == 1, within=5, what="the router's span")
    [span] = router_spans(exporter)
    assert span.name == "POST /v1/completions"
    assert span.kind is SpanKind.SERVER
    assert span.resource.attributes["service.name"] == SERVICE_NAME
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == PARENT_ID
    attrs = dict(span.attributes or {})
    assert {k: attrs[k] for k in ("igw.cluster", "igw.region", "igw.attempts")} == {
        "igw.cluster": "c0",
        "igw.region": "east",
        "igw.attempts": 1,
    }
    assert attrs["http.response.status_code"] == 200
    assert attrs["gen_ai.request.model"] == MODEL
    assert span.status.status_code is StatusCode.UNSET
    # the cluster's parent is the router's span, not the client's; the caller's tracestate kept
    [(traceparent, tracestate)] = received_trace_headers(east)
    assert traceparent == f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert tracestate == "vendor=abc"


async def test_a_failed_over_request_counts_both_clusters_and_each_gets_the_span() -> None:
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("east", infer_status=503), FakeModelServer("west")) as (
            east,
            west,
        ),
        router(f"http://{east.key}", f"http://{west.key}", tracing=memory_tracing(exporter)) as url,
    ):
        assert await _post(url, client_headers()) == 200
        await wait_for(lambda: len(router_spans(exporter)) == 1, within=5, what="the router's span")
    [span] = router_spans(exporter)
    attrs = dict(span.attributes or {})
    assert (attrs["igw.attempts"], attrs["igw.cluster"], attrs["igw.region"]) == (2, "c1", "west")
    expected = f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert [tp for tp, _ in received_trace_headers(east) + received_trace_headers(west)] == [expected] * 2


async def test_an_answer_every_cluster_refused_marks_the_span_failed() -> None:
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("east", infer_status=503)) as (east,),
        router(f"http://{east.key}", tracing=memory_tracing(exporter)) as url,
    ):
        assert await _post(url, JSON) == 503
        await wait_for(lambda: len(router_spans(exporter)) == 1, within=5, what="the router's span")
    [span] = router_spans(exporter)
    assert span.parent is None  # no traceparent sent: the router starts the trace
    assert span.status.status_code is StatusCode.ERROR
    attrs = dict(span.attributes or {})
    assert (attrs["http.response.status_code"], attrs["error.type"]) == (503, "503")
    [(traceparent, _)] = received_trace_headers(east)
    assert traceparent is not None
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id, parent_id) == (
        "00",
        f"{span.context.trace_id:032x}",
        f"{span.context.span_id:016x}",
    )
    assert int(flags, 16) & 1  # sampled (the SDK also sets the random-trace-id flag of a new trace)


async def test_an_unsampled_caller_is_followed_and_the_cluster_told_so() -> None:
    """A ``traceparent`` whose sampled flag is 0: the router records nothing, and the cluster gets
    the trace with the flag still 0 (its gateway records nothing either), under the router's id."""
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("east")) as (east,),
        router(f"http://{east.key}", tracing=memory_tracing(exporter)) as url,
    ):
        assert await _post(url, client_headers(sampled=False)) == 200
    assert router_spans(exporter) == []
    [(traceparent, _)] = received_trace_headers(east)
    assert traceparent is not None
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "00")
    assert parent_id != PARENT_ID


async def test_with_tracing_off_the_callers_trace_headers_go_on_untouched() -> None:
    async with running(FakeModelServer("east")) as (east,), router(f"http://{east.key}", tracing=None) as url:
        assert await _post(url, client_headers()) == 200
    assert received_trace_headers(east) == [(f"00-{TRACE_ID}-{PARENT_ID}-01", "vendor=abc")]


async def test_a_stored_response_search_has_a_span_counting_each_cluster_asked() -> None:
    exporter = InMemorySpanExporter()
    stored = {"id": "resp_kept", "object": "response", "status": "completed", "output": []}
    east, west = FakeModelServer("east"), FakeModelServer("west")
    west.stored_responses["resp_kept"] = stored
    async with (
        running(east, west),
        router(f"http://{east.key}", f"http://{west.key}", tracing=memory_tracing(exporter)) as url,
        aiohttp.ClientSession() as http,
        http.get(url + "/v1/responses/resp_kept", headers=client_headers()) as resp,
    ):
        await resp.read()
        await wait_for(lambda: len(router_spans(exporter)) == 1, within=5, what="the router's span")
    assert resp.status == 200
    [span] = router_spans(exporter)
    assert span.name == "GET /v1/responses/{response_id}"  # the route, not the id
    attrs = dict(span.attributes or {})
    assert attrs["url.path"] == "/v1/responses/resp_kept"
    assert (attrs["igw.attempts"], attrs["igw.cluster"], attrs["http.response.status_code"]) == (2, "c1", 200)
    expected = f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert [tp for tp, _ in received_trace_headers(east) + received_trace_headers(west)] == [expected] * 2


async def test_tier_1s_span_is_the_router_spans_child(gateway: Callable[..., Any]) -> None:
    """Router and a real tier-1 gateway, both tracing into one exporter: one trace, tier 1's server
    span parented on the router's (its upstream span on its own, as before)."""
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("pod")) as (pod,),
        gateway(
            config_doc([scheduler("pool", MODEL)]),
            {"pool": [pod.key]},
            tracing=Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0),
        ) as gw,
        router(gw.url, tracing=memory_tracing(exporter)) as url,
    ):
        assert await _post(url, client_headers()) == 200
        await wait_for(
            lambda: sum(s.kind is SpanKind.SERVER for s in exporter.get_finished_spans()) == 2,
            within=5,
            what="both tiers' server spans",
        )
    servers = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    [tier2] = router_spans(exporter)
    [tier1] = [s for s in servers if s is not tier2]
    assert tier1.resource.attributes["service.name"] != tier2.resource.attributes["service.name"]
    assert tier1.context.trace_id == tier2.context.trace_id
    assert tier1.parent is not None
    assert tier1.parent.span_id == tier2.context.span_id


def test_global_serve_takes_the_tracing_flags_as_igw_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--otel-sample-ratio`` without a receiver is refused before the router starts (exit 2), as
    ``igw serve`` refuses it; so is an endpoint that is not an http(s) URL."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "global.yaml"
    config.write_text(orjson.dumps(global_doc()).decode())
    argv = ["global", "serve", "--config", str(config), "--port", "0"]
    assert main([*argv, "--otel-sample-ratio", "0.1"]) == 2
    assert "igw global serve: --otel-sample-ratio needs --otel-endpoint" in capsys.readouterr().err
    assert main([*argv, "--otel-endpoint", "collector:4318"]) == 2
    assert "--otel-endpoint must be an http(s) URL" in capsys.readouterr().err
