"""OpenTelemetry traces of inference requests, recorded by the SDK's in-memory exporter from a real
gateway on loopback in front of simulated vLLM pods (which record the ``traceparent`` they receive)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from igw.cli.main import main
from igw.config.paths import REPO_ROOT
from igw.gateway.decision_log import DecisionLog
from igw.gateway.tracing import FIRST_TOKEN_EVENT, Tracing
from igw.gateway.tracing_options import SERVICE_NAME, TracingConfigError, TracingOptions, tracing_options
from igw.sim.live import RunningFleet, run_fleet
from igw.sim.spec import FleetSpec
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.fixtures import Gateway
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.security.helpers import GuardMaker, TokenFactory, bearer

EXAMPLES = REPO_ROOT / "crds" / "examples"

MODEL = "llama"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
SECRET = "sk-do-not-trace-7f3a"


@contextlib.asynccontextmanager
async def traced_gateway(
    gateway: Callable[..., Any], *, sample_ratio: float | None = 1.0, trust_parent_sampling: bool = False
) -> AsyncIterator[tuple[Gateway, RunningFleet, InMemorySpanExporter]]:
    """A gateway tracing into memory, routing ``llama`` to two simulated pods."""
    exporter = InMemorySpanExporter()
    tracing = Tracing(
        SimpleSpanProcessor(exporter), sample_ratio=sample_ratio, trust_parent_sampling=trust_parent_sampling
    )
    pods = [{"name": f"p{i}", "preset": "llama-3.1-8b/h100", "served_model_name": MODEL} for i in (0, 1)]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 3, "pods": pods})
    async with run_fleet(spec, admin=False) as fleet:
        keys = [p.key for p in fleet.pods]
        doc = config_doc([scheduler(MODEL, MODEL)])
        async with gateway(doc, {MODEL: keys}, tracing=tracing) as gw:
            yield gw, fleet, exporter


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


async def finished(exporter: InMemorySpanExporter, server_spans: int = 1) -> tuple[ReadableSpan, ...]:
    """The exported spans once ``server_spans`` requests have ended (the server span ends last)."""

    def done() -> bool:
        return sum(s.kind is SpanKind.SERVER for s in exporter.get_finished_spans()) >= server_spans

    await wait_for(done, within=10, what="server spans exported")
    return exporter.get_finished_spans()


def all_attribute_text(spans: Sequence[ReadableSpan]) -> str:
    parts: list[str] = []
    for span in spans:
        parts.extend(f"{k}={v!r}" for k, v in (span.attributes or {}).items())
        for event in span.events:
            parts.extend(f"{k}={v!r}" for k, v in (event.attributes or {}).items())
        parts.append(span.status.description or "")
    return "\n".join(parts)


async def test_a_streamed_request_has_a_span_per_phase_and_continues_the_callers_trace(
    gateway: Callable[..., Any],
) -> None:
    async with traced_gateway(gateway) as (gw, fleet, exporter):
        headers = {
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            "tracestate": "vendor=abc",
            "Authorization": f"Bearer {SECRET}",
        }
        body = {
            "model": MODEL,
            "prompt": "hello world",
            "max_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        resp = await gw.post("/v1/completions", body, headers=headers)
        assert resp.status == 200, await resp.text()
        await resp.read()
        spans = await finished(exporter)
    named = by_name(spans)
    assert set(named) == {
        "POST /v1/completions",
        "igw.auth",
        "igw.route",
        "igw.admit",
        "igw.schedule",
        "igw.upstream",
        "igw.upstream.connect",
    }
    server = named["POST /v1/completions"]
    assert server.kind is SpanKind.SERVER
    assert f"{server.context.trace_id:032x}" == TRACE_ID
    assert server.parent is not None
    assert f"{server.parent.span_id:016x}" == PARENT_ID
    attrs = dict(server.attributes or {})
    assert attrs["gen_ai.operation.name"] == "text_completion"
    assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == MODEL
    assert attrs["http.response.status_code"] == 200
    assert isinstance(attrs["gen_ai.usage.input_tokens"], int)
    assert attrs["gen_ai.usage.input_tokens"] > 0
    assert attrs["gen_ai.usage.output_tokens"] == 5
    assert server.status.status_code is StatusCode.UNSET

    for name in ("igw.auth", "igw.route", "igw.admit", "igw.schedule", "igw.upstream"):
        child = named[name]
        assert child.parent is not None, name
        assert child.parent.span_id == server.context.span_id, name
        assert child.context.trace_id == server.context.trace_id
    phases = [named[n] for n in ("igw.auth", "igw.route", "igw.admit", "igw.schedule", "igw.upstream")]
    for earlier, later in itertools.pairwise(phases):
        assert earlier.end_time is not None
        assert later.start_time is not None
        assert earlier.end_time <= later.start_time, (earlier.name, later.name)
    assert server.start_time is not None
    assert server.end_time is not None
    assert server.start_time <= phases[0].start_time  # type: ignore[operator]
    assert named["igw.upstream"].end_time <= server.end_time  # type: ignore[operator]

    schedule = dict(named["igw.schedule"].attributes or {})
    winner = schedule["igw.scheduling.endpoint"]
    assert schedule["igw.scheduling.candidates"] == 2
    assert schedule["igw.scheduling.outcome"] == "picked"
    scores = {k: v for k, v in schedule.items() if k.startswith("igw.scheduling.score.")}
    assert scores
    assert all(isinstance(v, float) for v in scores.values())

    upstream = named["igw.upstream"]
    assert upstream.kind is SpanKind.CLIENT
    up_attrs = dict(upstream.attributes or {})
    assert f"{up_attrs['server.address']}:{up_attrs['server.port']}" == winner
    assert up_attrs["http.response.status_code"] == 200
    connect = named["igw.upstream.connect"]
    assert connect.parent is not None
    assert connect.parent.span_id == upstream.context.span_id
    assert isinstance((connect.attributes or {})["igw.connection.reused"], bool)
    (first_token,) = [e for e in upstream.events if e.name == FIRST_TOKEN_EVENT]
    assert upstream.start_time <= first_token.timestamp <= upstream.end_time  # type: ignore[operator]

    # The model server got the upstream span's context and the caller's tracestate.
    (received,) = list(fleet.pod(str(winner)).trace_contexts)
    version, trace_id, parent_id, flags = received[0].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert parent_id == f"{upstream.context.span_id:016x}"
    assert received[1] == "vendor=abc"
    assert SECRET not in all_attribute_text(spans)


async def test_failures_set_error_status_and_the_phase_they_happened_in(
    gateway: Callable[..., Any],
) -> None:
    async with traced_gateway(gateway) as (gw, _fleet, exporter):
        unknown = await gw.post("/v1/chat/completions", {"model": "nope", "messages": []})
        assert unknown.status == 404
        await unknown.read()
        spans = await finished(exporter)
    named = by_name(spans)
    server = named["POST /v1/chat/completions"]
    assert (server.attributes or {})["http.response.status_code"] == 404
    assert (server.attributes or {})["error.type"] == "404"
    assert server.status.status_code is StatusCode.UNSET  # 4xx is the client's error (HTTP conventions)
    route = named["igw.route"]
    assert (route.attributes or {})["error.type"] == "404"
    assert "igw.upstream" not in named
    assert "igw.schedule" not in named


async def test_an_endpoint_that_refuses_connections_fails_the_upstream_span(
    gateway: Callable[..., Any],
) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0)
    doc = config_doc([scheduler(MODEL, MODEL)], bbr={"defaultBackend": {"name": "dead-svc", "port": 1}})
    async with gateway(
        doc, {MODEL: []}, services={"dead-svc": [dead]}, tracing=tracing, wait_fresh=False
    ) as gw:
        resp = await gw.post("/v1/completions", {"model": "other", "prompt": "x"})
        assert resp.status == 502, await resp.text()
        await resp.read()
        spans = await finished(exporter)
    named = by_name(spans)
    server = named["POST /v1/completions"]
    assert server.status.status_code is StatusCode.ERROR
    upstream = named["igw.upstream"]
    assert upstream.status.status_code is StatusCode.ERROR
    assert "ConnectionRefusedError" in (upstream.status.description or "")
    assert named["igw.upstream.connect"].status.status_code is StatusCode.ERROR


async def test_sampling_ratio_zero_records_nothing_but_still_propagates(
    gateway: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    trusted = traced_gateway(gateway, sample_ratio=0.0, trust_parent_sampling=True)
    async with trusted as (gw, fleet, exporter):
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
        resp = await gw.post("/v1/completions", body)
        assert resp.status == 200
        await resp.read()
        followed = await gw.post(
            "/v1/completions", body, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        )
        assert followed.status == 200
        await followed.read()
        spans = await finished(exporter)
    # Only the request whose caller sampled its trace was recorded (parent-based sampling).
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID}
    received = [tp for pod in fleet.pods for tp, _ in fleet.pod(pod.key).trace_contexts]
    assert len(received) == 2
    sampled_bits = sorted(int(tp.rsplit("-", 1)[1], 16) & 1 for tp in received)  # W3C flags bit 0
    assert sampled_bits == [0, 1]
    # The access log names the trace only where one was recorded.
    logged = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
    assert [entry.get("trace_id") for entry in logged] == [None, TRACE_ID]


async def test_an_untrusted_callers_sampled_flag_neither_forces_nor_prevents_recording(
    gateway: Callable[..., Any],
) -> None:
    """By default the caller's trace is continued but the gateway draws whether it is recorded: a
    client sending ``-01`` on every request at a ratio of 0 had each one recorded (cost), one sending
    ``-00`` at a ratio of 1 none (hidden), before session s49; the pod is told the gateway's word."""
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
    low_bits_zero = TRACE_ID[:16] + "0" * 16  # recorded by a trace-id ratio at any ratio above 0
    for ratio, flags, recorded in ((0.0, "01", False), (1.0, "00", True)):
        async with traced_gateway(gateway, sample_ratio=ratio) as (gw, fleet, exporter):
            for trace_id in (TRACE_ID, low_bits_zero):
                headers = {"traceparent": f"00-{trace_id}-{PARENT_ID}-{flags}"}
                resp = await gw.post("/v1/completions", body, headers=headers)
                assert resp.status == 200
                await resp.read()
            if recorded:
                spans = await finished(exporter, server_spans=2)
                assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID, low_bits_zero}
            else:
                await asyncio.sleep(0.05)
                assert exporter.get_finished_spans() == ()
            received = [tp for pod in fleet.pods for tp, _ in fleet.pod(pod.key).trace_contexts]
        assert sorted(tp.split("-")[1] for tp in received) == sorted([TRACE_ID, low_bits_zero])
        assert {int(tp.rsplit("-", 1)[1], 16) & 1 for tp in received} == {int(recorded)}


def test_an_untrusted_callers_trace_is_drawn_at_the_ratio_not_by_its_chosen_id() -> None:
    """A sampled caller whose chosen trace id has small low 64 bits: followed, or judged by a trace-id
    ratio, every one was recorded; drawn, about 1 in 100."""
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=0.01)
    chosen = TRACE_ID[:16] + "0" * 16
    for _ in range(400):
        tracing.start(
            {"traceparent": f"00-{chosen}-{PARENT_ID}-01"}, method="POST", path="/v1/completions", started=0.0
        ).finish(200)
    assert len(exporter.get_finished_spans()) < 40  # 4 expected at 0.01; 400 by the trace id


async def test_the_pod_never_gets_the_callers_tracestate_beside_a_trace_the_gateway_started(
    gateway: Callable[..., Any],
) -> None:
    """A ``traceparent`` that is not valid starts a new trace, and a ``tracestate`` the SDK refuses
    (33 members) is dropped: the caller's header went on to the pod as sent (W3C: discard it)."""
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
    big_state = ",".join(f"k{i}=" + "v" * 200 for i in range(33))
    cases = [
        {"traceparent": f"ff-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=abc"},
        {"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01", "tracestate": "vendor=abc"},
        {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": big_state},
        {"tracestate": "vendor=abc"},
    ]
    async with traced_gateway(gateway) as (gw, fleet, _exporter):
        for headers in cases:
            resp = await gw.post("/v1/completions", body, headers=headers)
            assert resp.status == 200
            await resp.read()
        received = [pair for pod in fleet.pods for pair in fleet.pod(pod.key).trace_contexts]
    assert len(received) == len(cases)
    assert all(state in (None, "") for _, state in received), received
    assert sum(tp.split("-")[1] == TRACE_ID for tp, _ in received) == 1  # only the valid one continued


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_tracing_refuses_a_ratio_outside_zero_to_one(ratio: float) -> None:
    with pytest.raises(TracingConfigError, match="--otel-sample-ratio"):
        tracing_options("http://127.0.0.1:4318", ratio, env={})


def test_a_sample_ratio_without_a_receiver_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``igw serve --otel-sample-ratio 0.1`` with no ``--otel-endpoint`` and no
    ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` started with tracing off and said nothing of the ratio;
    it is refused (exit 2), and still taken with an endpoint from either place."""
    with pytest.raises(TracingConfigError, match="--otel-sample-ratio needs --otel-endpoint"):
        tracing_options(None, 0.1, env={})
    from_env = tracing_options(None, 0.1, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert from_env is not None
    assert from_env.sample_ratio == 0.1
    assert tracing_options(None, None, env={}) is None
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("schedulers: {}\n")
    argv = ["serve", "--config", str(EXAMPLES / "single-model.yaml"), "--endpoints", str(endpoints)]
    assert main([*argv, "--otel-sample-ratio", "0.1"]) == 2
    assert "--otel-sample-ratio needs --otel-endpoint" in capsys.readouterr().err


async def test_a_queued_request_has_a_queue_span_and_its_dispatch_is_in_the_decision_log(
    gateway: Callable[..., Any],
) -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0)
    doc = config_doc([scheduler("pool", "m1")])
    doc["spec"]["extensions"]["flowControl"] = {
        "pollInterval": "10ms",
        "bands": [{"priority": 0, "maxRequests": 1, "ttl": "60s"}],
    }
    headers = {"x-gateway-inference-fairness-id": "t1"}
    body = {"model": "m1", "prompt": "hello", "max_tokens": 3}
    async with (
        running(FakeModelServer("a", waiting=9)) as (a,),
        gateway(doc, {"pool": [a.key]}, tracing=tracing) as gw,
    ):
        gw.state.decision_log = DecisionLog(10, token="t" * 16)
        waiting = asyncio.create_task(gw.post("/v1/completions", body, headers=headers))
        await wait_for(lambda: gw.state.flow.depths("pool") == {0: 1}, what="request queued")
        shed = await gw.post("/v1/completions", body, headers=headers)  # the band holds one
        assert shed.status == 429
        await shed.read()
        a.waiting = 0
        resp = await asyncio.wait_for(waiting, timeout=15)
        assert resp.status == 200
        await resp.read()
        spans = await finished(exporter, server_spans=2)
        entries = gw.state.decision_log.latest()
    servers = {s.context.trace_id: s for s in spans if s.kind is SpanKind.SERVER}
    queues = {s.context.trace_id: s for s in spans if s.name == "igw.queue"}
    by_status = {(s.attributes or {})["http.response.status_code"]: s for s in servers.values()}
    served, refused = by_status[200], by_status[429]
    queue = dict(queues[served.context.trace_id].attributes or {})
    assert queue == {
        "igw.flow.outcome": "dispatched",
        "igw.flow.priority": 0,
        "igw.scheduling.endpoint": a.key,
    }
    assert dict(queues[refused.context.trace_id].attributes or {})["igw.flow.outcome"] == "band_full"
    assert (refused.attributes or {})["igw.rejection"] == "shed"
    assert refused.status.status_code is StatusCode.UNSET
    schedule = [
        s for s in spans if s.name == "igw.schedule" and s.context.trace_id == served.context.trace_id
    ]
    assert (schedule[0].attributes or {})["igw.scheduling.outcome"] == "saturated"
    # Why this pod: both saturated decisions (queued, shed), then the pick that dispatched one.
    assert [e["outcome"] for e in entries] == ["picked", "saturated", "saturated"]
    (dispatch,) = [e for e in entries if "queued_ms" in e]
    assert dispatch["outcome"] == "picked"
    assert dispatch["chosen"] == a.key
    assert dispatch["queued_ms"] > 0
    assert dispatch["decision_us"] is None


def test_service_name_defaults_to_the_gateway_and_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def service_name() -> object:
        tracing = Tracing(SimpleSpanProcessor(InMemorySpanExporter()))
        try:
            return tracing.provider.resource.attributes["service.name"]
        finally:
            tracing.shutdown()

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert service_name() == SERVICE_NAME
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    assert service_name() == "from-attributes"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    assert service_name() == "from-env"


def test_options_come_from_the_flag_or_the_standard_variables() -> None:
    assert tracing_options(None, None, env={}) is None
    flag = tracing_options("http://collector:4318", 0.25, env={})
    assert flag == TracingOptions(endpoint="http://collector:4318/v1/traces", sample_ratio=0.25)
    kept = tracing_options("https://c.example/otlp/traces", None, env={})
    assert kept == TracingOptions(endpoint="https://c.example/otlp/traces")
    generic = tracing_options(None, None, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    assert generic == TracingOptions(endpoint="http://c:4318/v1/traces")
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x",
    }
    assert tracing_options(None, None, env=both) == TracingOptions(endpoint="http://t:1/x")
    assert tracing_options("http://c:4318", None, env={"OTEL_SDK_DISABLED": "true"}) is None
    with pytest.raises(TracingConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        tracing_options(None, None, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4318"})


HEADER_CASES = (
    "x-honeycomb-team: hcK3y0123456789abcdef",  # a colon for '=': the SDK logged the key whole
    "authorization=Bearer t0k3n, x-scope-orgid=tenant-1",  # accepted: the SDK reads spaces in values
    "api-key=abc;def",  # ';' in a value
    'dd-api-key="quoted"',
    "=n0name",
    "k=v,,x=y",  # an empty entry is skipped, as the SDK does
    "k=caf\u00e9",  # not ASCII: URL-encode it
)


@pytest.mark.parametrize("headers", HEADER_CASES)
@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"])
def test_header_variables_the_exporter_cannot_read_are_refused_without_quoting_them(
    headers: str, variable: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The OTLP exporter drops an entry it cannot parse and logs it whole (``Header format
    invalid! ...: x-honeycomb-team: hcK3y...``): a collector key went to the gateway's log, and
    every export was refused for want of it. Refused at start now exactly where the exporter would
    drop an entry (its own parser is the oracle), naming the variable, never the value."""
    from opentelemetry.util.re import parse_env_headers

    caplog.set_level(logging.WARNING, logger="opentelemetry.util.re")
    parse_env_headers(headers, liberal=True)
    sdk_drops = bool(caplog.records)
    env = {variable: headers}
    if not sdk_drops:
        assert tracing_options("http://c:4318", None, env=env) is not None
        return
    with pytest.raises(TracingConfigError, match=variable) as refused:
        tracing_options("http://c:4318", None, env=env)
    for secret in ("hcK3y0123456789abcdef", "abc;def", "quoted", "n0name", "caf"):
        assert secret not in str(refused.value)


def test_the_traces_header_variable_wins_as_in_the_exporter() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "k=v", "OTEL_EXPORTER_OTLP_HEADERS": "bad: one"}
    assert tracing_options("http://c:4318", None, env=env) is not None
    with pytest.raises(TracingConfigError, match="OTEL_EXPORTER_OTLP_HEADERS: entry 1 of 1"):
        tracing_options("http://c:4318", None, env={**env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS": ""})


@pytest.mark.parametrize("port", ["99999", "x"])
def test_an_endpoint_with_an_impossible_port_is_refused_at_start_and_quoted_without_its_password(
    port: str,
) -> None:
    """``--otel-endpoint http://collector:99999`` started, and every export of spans then failed
    ("Port out of range"); a URL with user-info was quoted whole."""
    with pytest.raises(TracingConfigError, match="with a valid port") as refused:
        tracing_options(f"http://admin:S3cretPassw0rd9XYZqq@collector:{port}", None, env={})
    assert "S3cretPassw0rd9XYZqq" not in str(refused.value)
    assert "[REDACTED]@collector" in str(refused.value)


@pytest.mark.parametrize(
    ("flag", "env", "wanted"),
    [
        ("http://c:4318?api_key=x", {}, "http://c:4318/v1/traces?api_key=x"),
        ("http://c:4318/?api_key=x", {}, "http://c:4318/v1/traces?api_key=x"),
        (
            None,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/base/?k=v"},
            "http://c:4318/base/v1/traces?k=v",
        ),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"),
    ],
)
def test_the_traces_path_goes_into_the_path_not_after_the_query(
    flag: str | None, env: dict[str, str], wanted: str
) -> None:
    """A base URL with a query got ``/v1/traces`` appended after it (``...?api_key=x/v1/traces``):
    the collector saw the wrong path and the credential a different value."""
    options = tracing_options(flag, None, env=env)
    assert options is not None
    assert options.endpoint == wanted


async def test_with_tracing_off_a_callers_traceparent_passes_through_untouched(
    gateway: Callable[..., Any],
) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(config_doc([scheduler("p", "m")]), {"p": [a.key]}) as gw,
    ):
        assert gw.state.tracing is None
        plain = await gw.post("/v1/completions", {"model": "m", "prompt": "x"})
        await plain.read()
        parent = f"00-{TRACE_ID}-{PARENT_ID}-01"
        carried = await gw.post(
            "/v1/completions", {"model": "m", "prompt": "x"}, headers={"traceparent": parent}
        )
        await carried.read()
    assert [r.headers.get("traceparent") for r in a.received] == [None, parent]


async def test_denials_end_in_the_auth_or_admit_span_and_no_token_is_recorded(
    gateway: Callable[..., Any], make_guard: GuardMaker, tokens: TokenFactory
) -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0)
    access = {"modelAccess": [{"claim": "tenant", "values": ["team-a"], "models": ["m"]}]}
    guard = await make_guard(extensions={"authorization": access}, real_clock=True)
    good = tokens.token(iat=int(time.time()), exp=int(time.time()) + 600)
    doc = config_doc([scheduler("p", "m"), scheduler("q", "other")])
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(doc, {"p": [a.key], "q": [b.key]}, guard=guard, tracing=tracing) as gw,
    ):
        for model, token, status in (("m", "not-a-jwt", 401), ("other", good, 403), ("m", good, 200)):
            resp = await gw.post("/v1/completions", {"model": model, "prompt": "x"}, headers=bearer(token))
            assert resp.status == status, await resp.text()
            await resp.read()
        spans = await finished(exporter, server_spans=3)
    traces: dict[int, dict[str, ReadableSpan]] = {}
    for span in spans:
        traces.setdefault(span.context.trace_id, {})[span.name] = span
    by_status = {
        (t["POST /v1/completions"].attributes or {})["http.response.status_code"]: t for t in traces.values()
    }
    unauthenticated, forbidden, served = by_status[401], by_status[403], by_status[200]
    assert set(unauthenticated) == {"POST /v1/completions", "igw.auth"}
    assert (unauthenticated["igw.auth"].attributes or {})["error.type"] == "401"
    assert set(forbidden) == {"POST /v1/completions", "igw.auth", "igw.route", "igw.admit"}
    assert (forbidden["igw.admit"].attributes or {})["error.type"] == "403"
    assert "error.type" not in (served["igw.auth"].attributes or {})
    assert {"igw.schedule", "igw.upstream"} <= set(served)
    text = all_attribute_text(spans)
    assert good not in text
    assert good.split(".")[2] not in text  # not even the signature


async def test_the_connect_span_says_whether_a_pooled_connection_was_reused(
    gateway: Callable[..., Any],
) -> None:
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0)
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(config_doc([scheduler("p", "m")]), {"p": [a.key]}, tracing=tracing) as gw,
    ):
        for n in (1, 2):
            resp = await gw.post("/v1/completions", {"model": "m", "prompt": "x"})
            assert resp.status == 200
            await resp.read()
            await finished(exporter, server_spans=n)
        spans = exporter.get_finished_spans()
    connects = sorted((s for s in spans if s.name == "igw.upstream.connect"), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {})["igw.connection.reused"] for s in connects] == [False, True]
    assert all(s.status.status_code is StatusCode.UNSET for s in connects)


async def test_a_client_leaving_mid_stream_ends_the_attempt_client_gone_and_the_server_span_499(
    gateway: Callable[..., Any],
) -> None:
    """The attempt span's ``error.type`` names the client's leaving (``client_gone``, the global
    router's word), not an upstream failure; the server span keeps the access log's 499."""
    exporter = InMemorySpanExporter()
    tracing = Tracing(SimpleSpanProcessor(exporter), sample_ratio=1.0)
    body = {"model": "m1", "prompt": "hello", "max_tokens": 50, "stream": True}
    async with (
        running(FakeModelServer("a", tokens=50, token_delay_s=0.2)) as (a,),
        gateway(config_doc([scheduler("pool", "m1")]), {"pool": [a.key]}, tracing=tracing) as gw,
    ):
        resp = await gw.post("/v1/completions", body)
        assert resp.status == 200
        assert await resp.content.readany()  # the first event relayed, then the client leaves
        resp.close()
        spans = await finished(exporter)
    named = by_name(spans)
    server = dict(named["POST /v1/completions"].attributes or {})
    assert server["http.response.status_code"] == 499
    assert server["error.type"] == "499"
    upstream = named["igw.upstream"]
    assert dict(upstream.attributes or {})["error.type"] == "client_gone"
    assert upstream.status.status_code is StatusCode.ERROR
    assert "client disconnected" in (upstream.status.description or "")


def test_the_exporting_tracer_follows_a_callers_flag_only_when_told_to_trust_it() -> None:
    """``--otel-trust-parent-sampling`` reaches the exporting tracer's sampler (off by default)."""
    recorded = {}
    for trust in (False, True):
        options = tracing_options("http://127.0.0.1:4318", 0.0, env={}, trust_parent_sampling=trust)
        assert options is not None
        tracing = Tracing.exporting(options)
        try:
            sampled = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
            trace_ = tracing.start(sampled, method="POST", path="/v1/completions", started=0.0)
            recorded[trust] = trace_.recorded_trace_id
            trace_.finish(200)
        finally:
            tracing.shutdown()
    assert recorded == {False: None, True: TRACE_ID}


def test_the_sampling_variables_stand_in_for_absent_flags() -> None:
    """``IGW_OTEL_SAMPLE_RATIO`` / ``IGW_OTEL_TRUST_PARENT_SAMPLING``: the operator's gateway pods get
    variables (``operator.gatewayEnv``), no ``igw serve`` flags, so before session s49 their only
    ratio was an SDK sampler the caller steers. A flag given wins; a bad value is refused naming
    the variable, as the flag is."""
    endpoint = "http://127.0.0.1:4318"
    env = {"IGW_OTEL_SAMPLE_RATIO": "0", "IGW_OTEL_TRUST_PARENT_SAMPLING": "false"}
    options = tracing_options(endpoint, None, env=env)
    assert options == TracingOptions(endpoint=f"{endpoint}/v1/traces", sample_ratio=0.0)
    tracing = Tracing.exporting(options)
    try:  # drawn here at the ratio: the caller's sampled flag does not force a recording
        sampled = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
        trace_ = tracing.start(sampled, method="POST", path="/v1/completions", started=0.0)
        assert trace_.recorded_trace_id is None
        trace_.finish(200)
    finally:
        tracing.shutdown()
    trusted = tracing_options(
        endpoint, None, env={"IGW_OTEL_SAMPLE_RATIO": " 0.25 ", "IGW_OTEL_TRUST_PARENT_SAMPLING": "TRUE"}
    )
    assert trusted is not None
    assert (trusted.sample_ratio, trusted.trust_parent_sampling) == (0.25, True)
    flags = tracing_options(
        endpoint, 0.5, env={**env, "IGW_OTEL_SAMPLE_RATIO": "bad"}, trust_parent_sampling=True
    )
    assert flags is not None
    assert (flags.sample_ratio, flags.trust_parent_sampling) == (0.5, True)  # the flags win
    unset = tracing_options(
        endpoint, None, env={"IGW_OTEL_SAMPLE_RATIO": "", "IGW_OTEL_TRUST_PARENT_SAMPLING": ""}
    )
    assert unset == TracingOptions(endpoint=f"{endpoint}/v1/traces")
    with pytest.raises(TracingConfigError, match="IGW_OTEL_SAMPLE_RATIO needs --otel-endpoint"):
        tracing_options(None, None, env={"IGW_OTEL_SAMPLE_RATIO": "0.1"})
    for name, value in (
        ("IGW_OTEL_SAMPLE_RATIO", "1.5"),
        ("IGW_OTEL_SAMPLE_RATIO", "-0.1"),
        ("IGW_OTEL_SAMPLE_RATIO", "nan"),
        ("IGW_OTEL_SAMPLE_RATIO", "10%"),
        ("IGW_OTEL_TRUST_PARENT_SAMPLING", "1"),
        ("IGW_OTEL_TRUST_PARENT_SAMPLING", "yes"),
    ):
        with pytest.raises(TracingConfigError, match=f"^{name} must be"):
            tracing_options(endpoint, None, env={name: value})


def test_a_long_callers_tracestate_is_cut_to_512_characters_large_members_first() -> None:
    """W3C Trace Context 3.3.1.5: over budget, members over 128 characters go first, then members
    from the end; a valid 32-member, 8192-character state went on to every pod whole (before s49)."""
    tracing = Tracing(SimpleSpanProcessor(InMemorySpanExporter()), sample_ratio=1.0)
    small = [f"k{i}=" + "v" * 40 for i in range(30)]  # 44 characters each
    large = ["big1=" + "x" * 200, "big2=" + "y" * 250]
    state = ",".join([small[0], large[0], *small[1:], large[1]])
    assert len(state) > 1700
    sent: dict[str, str] = {}
    trace_ = tracing.start(
        {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": state},
        method="POST",
        path="/v1/completions",
        started=time.perf_counter(),
    )
    trace_.inject(sent)
    trace_.finish(200)
    assert sent["traceparent"].split("-")[1] == TRACE_ID
    assert sent["tracestate"] == ",".join(small[:11])  # 11 x 44 + 10 commas = 494 <= 512
    short: dict[str, str] = {}
    trace_ = tracing.start(
        {
            "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            "tracestate": "a=1,b=" + "x" * 250 + ",c=" + "y" * 200,
        },
        method="POST",
        path="/v1/completions",
        started=time.perf_counter(),
    )
    trace_.inject(short)
    assert short["tracestate"] == "a=1,b=" + "x" * 250 + ",c=" + "y" * 200  # 460: kept, large members too


def test_without_a_ratio_or_sampler_variable_a_callers_unsampled_flag_does_not_hide_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``--otel-sample-ratio`` and no ``OTEL_TRACES_SAMPLER``: every request recorded, a caller's
    ``-00`` included (the SDK's default ``parentbased_always_on`` followed it: a client kept its
    requests out of every trace, before session s49), and with ``OTEL_TRACES_SAMPLER`` naming a
    parent-based sampler (followed until session s50); ``--otel-trust-parent-sampling`` follows it."""
    unsampled = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}
    recorded: dict[str, str | None] = {}
    for case, variable, trust in (
        ("default", None, False),
        ("variable", "parentbased_always_on", False),
        ("trusted", None, True),
    ):
        if variable is None:
            monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
        else:
            monkeypatch.setenv("OTEL_TRACES_SAMPLER", variable)
        tracing = Tracing(SimpleSpanProcessor(InMemorySpanExporter()), trust_parent_sampling=trust)
        trace_ = tracing.start(unsampled, method="POST", path="/v1/completions", started=time.perf_counter())
        recorded[case] = trace_.recorded_trace_id
        trace_.finish(200)
    assert recorded == {"default": TRACE_ID, "variable": TRACE_ID, "trusted": None}
