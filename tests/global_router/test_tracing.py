"""The global router's span of a request (:mod:`igw.global_router.tracing`), recorded by the SDK's
in-memory exporter: one ``SERVER`` span per inference and stored-response request, continuing the
client's ``traceparent``, whose context each cluster receives in place of the client's, so that a
tier-1 gateway's own span is its child. Real HTTP: a router replica in front of fake model servers
standing in for clusters (and, once, a real tracing tier-1 gateway)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from igw.cli.main import main
from igw.gateway.response_ids import response_ref
from igw.gateway.serving import serve_app
from igw.gateway.tracing import Tracing
from igw.gateway.tracing_options import TracingConfigError, tracing_options
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from igw.global_router.tracing import SERVICE_NAME, RouterTracing
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.global_router.support import MODEL, global_doc
from tests.observability.otlp_receiver import otlp_receiver

OTLP_SERVER = ProtoSpan.SpanKind.SPAN_KIND_SERVER

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
COMPLETION = {"model": MODEL, "prompt": "x", "max_tokens": 2}
JSON = {"Content-Type": "application/json"}
ACCESS_LOGGER = "igw.global_router.access"


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [orjson.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]


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


def _router_scope(span: ReadableSpan) -> bool:
    return span.instrumentation_scope is not None and span.instrumentation_scope.name == "igw.global_router"


def router_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The router's server spans (one a request)."""
    return [s for s in exporter.get_finished_spans() if _router_scope(s) and s.kind is SpanKind.SERVER]


def attempt_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The router's per-cluster attempt spans, in the order they ended."""
    return [s for s in exporter.get_finished_spans() if _router_scope(s) and s.kind is SpanKind.CLIENT]


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
    [attempt] = attempt_spans(exporter)
    assert attempt.name == "igw.cluster"
    assert attempt.parent is not None
    assert attempt.parent.span_id == span.context.span_id
    assert {k: v for k, v in (attempt.attributes or {}).items()} == {
        "igw.cluster": "c0",
        "igw.region": "east",
        "igw.attempt": 1,
        "igw.outcome": "200",
        "http.response.status_code": 200,
    }
    # the cluster's parent is the router's attempt span, not the client's; the caller's tracestate kept
    [(traceparent, tracestate)] = received_trace_headers(east)
    assert traceparent == f"00-{TRACE_ID}-{attempt.context.span_id:016x}-01"
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
    first, second = attempt_spans(exporter)
    assert [a.parent.span_id if a.parent else None for a in (first, second)] == [span.context.span_id] * 2
    assert [(a.attributes or {}).get("igw.outcome") for a in (first, second)] == ["503", "200"]
    assert first.status.status_code is StatusCode.ERROR
    assert (first.attributes or {})["error.type"] == "503"
    # each cluster was sent its own attempt's context
    assert [tp for tp, _ in received_trace_headers(east) + received_trace_headers(west)] == [
        f"00-{TRACE_ID}-{a.context.span_id:016x}-01" for a in (first, second)
    ]


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
    [attempt] = attempt_spans(exporter)
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id, parent_id) == (
        "00",
        f"{span.context.trace_id:032x}",
        f"{attempt.context.span_id:016x}",
    )
    assert int(flags, 16) & 1  # sampled (the SDK also sets the random-trace-id flag of a new trace)


async def test_an_unsampled_caller_is_followed_and_the_cluster_told_so() -> None:
    """A ``traceparent`` whose sampled flag is 0: the router records nothing, and the cluster gets
    the trace with the flag still 0 (its gateway records nothing either), under the router's id."""
    exporter = InMemorySpanExporter()
    tracing = memory_tracing(exporter, trust_parent_sampling=True)
    async with (
        running(FakeModelServer("east")) as (east,),
        router(f"http://{east.key}", tracing=tracing) as url,
    ):
        assert await _post(url, client_headers(sampled=False)) == 200
    assert router_spans(exporter) == []
    [(traceparent, _)] = received_trace_headers(east)
    assert traceparent is not None
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "00")
    assert parent_id != PARENT_ID


@pytest.mark.parametrize(("ratio", "flags", "recorded"), [(0.0, "01", False), (1.0, "00", True)])
async def test_an_untrusted_callers_sampled_flag_is_not_followed(
    ratio: float, flags: str, recorded: bool
) -> None:
    """By default the router draws whether the caller's trace is recorded (its id kept): a client's
    ``-01`` at a ratio of 0 had the router and every cluster record it, before session s49."""
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=ratio, service_name=SERVICE_NAME)
    headers = {**client_headers(), "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-{flags}"}
    async with (
        running(FakeModelServer("east")) as (east,),
        router(f"http://{east.key}", tracing=tracing) as url,
    ):
        assert await _post(url, headers) == 200
    assert len(router_spans(exporter)) == int(recorded)
    [(traceparent, _)] = received_trace_headers(east)
    assert traceparent is not None
    _, trace_id, _, sent_flags = traceparent.split("-")
    assert trace_id == TRACE_ID
    assert int(sent_flags, 16) & 1 == int(recorded)


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
    # the id is a capability: its one-way reference only (until session s50 url.path held it)
    assert attrs["url.path"] == f"/v1/responses/{{response_id:{response_ref('resp_kept')}}}"
    assert attrs["http.route"] == "/v1/responses/{response_id}"
    assert not [s for s in exporter.get_finished_spans() if "resp_kept" in str(dict(s.attributes or {}))]
    assert (attrs["igw.attempts"], attrs["igw.cluster"], attrs["http.response.status_code"]) == (2, "c1", 200)
    asked = attempt_spans(exporter)
    assert [((a.attributes or {})["igw.cluster"], (a.attributes or {})["igw.outcome"]) for a in asked] == [
        ("c0", "404"),
        ("c1", "200"),
    ]
    assert [tp for tp, _ in received_trace_headers(east) + received_trace_headers(west)] == [
        f"00-{TRACE_ID}-{a.context.span_id:016x}-01" for a in asked
    ]


async def test_tier_1s_span_is_the_child_of_the_attempt_that_reached_it(gateway: Callable[..., Any]) -> None:
    """A router failing over from a refusing cluster to a real tier-1 gateway, both tiers tracing
    into one exporter: one trace, two attempt spans under the router's server span, and tier 1's
    server span parented on the second attempt (since session s49; on the router's server span
    before, so which cluster's try led to it was not in the trace)."""
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("pod"), FakeModelServer("refusing", infer_status=503)) as (pod, refusing),
        gateway(
            config_doc([scheduler("pool", MODEL)]),
            {"pool": [pod.key]},
            tracing=Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0),
        ) as gw,
        router(f"http://{refusing.key}", gw.url, tracing=memory_tracing(exporter)) as url,
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
    first, second = attempt_spans(exporter)
    assert [a.parent.span_id if a.parent else None for a in (first, second)] == [tier2.context.span_id] * 2
    assert [(a.attributes or {})["igw.cluster"] for a in (first, second)] == ["c0", "c1"]
    assert tier1.parent is not None
    assert tier1.parent.span_id == second.context.span_id


async def test_a_client_leaving_mid_stream_ends_the_span_499_as_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client closes its connection mid-stream: the access line says 499, and so does the span
    (until session s49 the span said 200, the status of the answer already started), its attempt
    ``client-gone``; the line carries the span's trace id."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    exporter = InMemorySpanExporter()
    async with (
        running(FakeModelServer("east", tokens=50, token_delay_s=0.1)) as (east,),
        router(f"http://{east.key}", tracing=memory_tracing(exporter)) as url,
    ):
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                url + "/v1/completions", data=orjson.dumps({**COMPLETION, "stream": True}), headers=JSON
            ) as resp,
        ):
            assert resp.status == 200
            assert await resp.content.readany()
        await wait_for(lambda: len(router_spans(exporter)) == 1, within=5, what="the router's span")
    [line] = access_lines(caplog)
    assert line["status"] == 499
    [span] = router_spans(exporter)
    attrs = dict(span.attributes or {})
    assert (attrs["http.response.status_code"], attrs["error.type"]) == (499, "499")
    assert span.status.status_code is StatusCode.UNSET  # a client's leaving is not the router's failure
    [attempt] = attempt_spans(exporter)
    outcome = (attempt.attributes or {})["igw.outcome"]
    assert outcome in ("client-gone", "cancelled")
    assert (attempt.attributes or {})["error.type"] == str(outcome).replace("-", "_")
    assert line["trace_id"] == f"{span.context.trace_id:032x}"


def test_an_attempt_the_client_left_ends_the_span_499_whatever_answer_had_started() -> None:
    """The ``ClientGone`` path (a write to the client failing, the handler not cancelled) returns
    the answer already started, 200: the span still ends 499, as the access line (until session s49
    it said 200). Driven directly: over loopback every probe's handler was cancelled instead (the
    test above), whose span was already 499."""
    exporter = InMemorySpanExporter()
    tracer = RouterTracing(memory_tracing(exporter))
    span = tracer.start({}, method="POST", route="/v1/completions", path="/v1/completions")
    span.attempt("c0", "east")
    span.attempt_done("client-gone")
    span.finish(200, cluster="c0", region="east")
    [server] = router_spans(exporter)
    attrs = dict(server.attributes or {})
    assert (attrs["http.response.status_code"], attrs["error.type"], attrs["igw.cluster"]) == (
        499,
        "499",
        "c0",
    )
    [attempt] = attempt_spans(exporter)
    assert (attempt.attributes or {})["error.type"] == "client_gone"


@pytest.mark.parametrize("traced", ["recorded", "unsampled", "off"])
async def test_the_access_line_carries_the_trace_id_when_recorded(
    caplog: pytest.LogCaptureFixture, traced: str
) -> None:
    """Tier 1's ``trace_id`` field: the router span's trace id when it is recorded; none when the
    caller's trace is not sampled or tracing is off."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    exporter = InMemorySpanExporter()
    tracing = None if traced == "off" else memory_tracing(exporter, trust_parent_sampling=True)
    async with (
        running(FakeModelServer("east")) as (east,),
        router(f"http://{east.key}", tracing=tracing) as url,
    ):
        assert await _post(url, client_headers(sampled=traced != "unsampled")) == 200
        await wait_for(lambda: len(access_lines(caplog)) == 1, within=5, what="the access line")
    [line] = access_lines(caplog)
    if traced == "recorded":
        assert line["trace_id"] == TRACE_ID
    else:
        assert "trace_id" not in line


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


def test_the_router_cuts_a_long_callers_tracestate_to_512_characters() -> None:
    """The router passes on at most 512 characters of the caller's ``tracestate`` (members over 128
    characters dropped first, then from the end): a 32-member, 8192-character one went on whole."""
    tracing = RouterTracing(memory_tracing(InMemorySpanExporter()))
    state = ",".join(["huge=" + "z" * 250] + [f"m{i}=" + "v" * 240 for i in range(31)])
    span = tracing.start(
        {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": state},
        method="POST",
        route="/v1/completions",
        path="/v1/completions",
    )
    sent: dict[str, str] = {}
    span.inject(sent)
    span.finish(200, cluster=None, region=None)
    assert sent["traceparent"].split("-")[1] == TRACE_ID
    assert "tracestate" not in sent  # every member is over 128 characters: none left
    span = tracing.start(
        {
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            "tracestate": ",".join(f"m{i}=" + "v" * 100 for i in range(10)),
        },
        method="POST",
        route="/v1/completions",
        path="/v1/completions",
    )
    sent = {}
    span.inject(sent)
    span.finish(200, cluster=None, region=None)
    assert sent["tracestate"] == ",".join(f"m{i}=" + "v" * 100 for i in range(4))  # 4 x 104 + 3 = 419


@pytest.mark.parametrize(
    ("sampler", "arg", "flags", "recorded"),
    [
        ("parentbased_always_on", None, "00", True),
        ("parentbased_traceidratio", "0", "01", False),
        ("parentbased_always_off", None, "01", False),
    ],
)
async def test_an_sdk_sampler_variable_does_not_follow_an_untrusted_callers_flag(
    monkeypatch: pytest.MonkeyPatch, sampler: str, arg: str | None, flags: str, recorded: bool
) -> None:
    """``OTEL_TRACES_SAMPLER`` names the fraction recorded, not whose word decides: without
    ``--otel-trust-parent-sampling`` a caller's ``-00`` does not hide its request from a
    ``parentbased_always_on`` router, nor its ``-01`` force one at a ratio of 0 (until session s50 the
    SDK's parent-based sampler followed the flag). Spans exported through the real OTLP exporter."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is None:
        monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    else:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    headers = {**client_headers(), "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-{flags}"}
    async with otlp_receiver() as receiver:
        options = tracing_options(receiver.url, None)
        assert options is not None
        tracing = Tracing.exporting(options, service_name=SERVICE_NAME)
        async with (
            running(FakeModelServer("east")) as (east,),
            router(f"http://{east.key}", tracing=tracing) as url,
        ):
            assert await _post(url, headers) == 200
        # leaving the router shut its tracing down: what was recorded is exported
    exported = [s for s in receiver.spans if s.resource.get("service.name") == SERVICE_NAME]
    assert bool(exported) is recorded
    assert all(s.trace_id == TRACE_ID for s in exported)
    [(traceparent, _)] = received_trace_headers(east)
    assert traceparent is not None
    assert int(traceparent.rsplit("-", 1)[1], 16) & 1 == int(recorded)


def test_an_sdk_sampler_variable_of_no_known_ratio_is_refused_by_name() -> None:
    """A sampler this gateway cannot read a ratio from (the SDK put ``parentbased_always_on``, which
    follows the caller's flag, in its place) or a ratio that is not one: refused at start-up, named."""
    endpoint = "http://collector:4318"
    for env, words in (
        ({"OTEL_TRACES_SAMPLER": "xray"}, "OTEL_TRACES_SAMPLER must be one of"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
            "OTEL_TRACES_SAMPLER_ARG must be a number between 0 and 1",
        ),
    ):
        with pytest.raises(TracingConfigError, match=words):
            tracing_options(endpoint, None, env)
        options = tracing_options(endpoint, None, env, trust_parent_sampling=True)  # the SDK's own
        assert options is not None


async def test_tier_1_gives_a_stored_response_request_a_span_under_the_router_s_attempt(
    gateway: Callable[..., Any],
) -> None:
    """A retrieval, its input items and its deletion through a router whose first cluster does not
    store the response, both tiers exporting to one real OTLP receiver: tier 1's server span, named
    by the route's template, is the child of the router's attempt that reached it, its pod gets its
    attempt's context, and no span holds the id. Until session s50 tier 1 made no span for these
    routes: the router's attempt had no child and the pod got the router's context."""
    rid = "resp_a_stored_one_0123456789"
    stored = {"id": rid, "object": "response", "status": "completed", "output": []}
    async with otlp_receiver() as receiver:
        options = tracing_options(receiver.url, 1.0)
        assert options is not None
        async with (
            running(FakeModelServer("other"), FakeModelServer("pod")) as (other, pod),
            gateway(
                config_doc([scheduler("pool", MODEL)]),
                {"pool": [pod.key]},
                tracing=Tracing.exporting(options),
            ) as gw,
            router(
                f"http://{other.key}", gw.url, tracing=Tracing.exporting(options, service_name=SERVICE_NAME)
            ) as url,
            aiohttp.ClientSession() as http,
        ):
            pod.stored_responses[rid] = stored
            for method, path in (("GET", ""), ("GET", "/input_items"), ("DELETE", "")):
                target = f"{url}/v1/responses/{rid}{path}"
                async with http.request(method, target, headers=client_headers()) as r:
                    await r.read()
                    assert r.status == 200, (method, path)
        # leaving both tiers shut their tracing down: what was recorded is exported
    spans = receiver.spans
    assert not [s for s in spans if rid in f"{s.name} {s.attributes}"]  # the id in no span
    tier1 = [s for s in spans if s.kind == OTLP_SERVER and s.resource["service.name"] != SERVICE_NAME]
    assert [(s.name, s.attributes["http.request.method"]) for s in tier1] == [
        ("GET /v1/responses/{response_id}", "GET"),
        ("GET /v1/responses/{response_id}/input_items", "GET"),
        ("DELETE /v1/responses/{response_id}", "DELETE"),
    ]
    ref = response_ref(rid)
    assert [s.attributes["url.path"] for s in tier1] == [
        f"/v1/responses/{{response_id:{ref}}}",
        f"/v1/responses/{{response_id:{ref}}}/input_items",
        f"/v1/responses/{{response_id:{ref}}}",
    ]
    assert all(s.attributes["http.route"] == s.name.split(" ", 1)[1] for s in tier1)
    assert all(s.trace_id == TRACE_ID for s in spans)
    by_id = {s.span_id: s for s in spans}
    for server in tier1:  # under the router's attempt at the tier-1 cluster (c1), not c0's
        attempt = by_id[server.parent_span_id]
        assert (attempt.name, attempt.attributes["igw.cluster"]) == ("igw.cluster", "c1")
        assert attempt.resource["service.name"] == SERVICE_NAME
    upstream = [s for s in spans if s.name == "igw.upstream"]
    assert {by_id[s.parent_span_id].name for s in upstream} == {s.name for s in tier1}
    assert [tp for tp, _ in received_trace_headers(pod)] == [
        f"00-{TRACE_ID}-{s.span_id}-01" for s in upstream
    ]
