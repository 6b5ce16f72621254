"""``igw serve --otel-endpoint`` as a process: its spans reach an OTLP/HTTP receiver on loopback
through the real exporter, and the simulated model server receives the trace context."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp

from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.observability.live_gateway import MODEL, igw_serve, wait_ready
from tests.observability.otlp_receiver import otlp_receiver

SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_SERVER
CLIENT_KIND = 3
ERROR_STATUS = 2  # Status.StatusCode.STATUS_CODE_ERROR


async def test_serve_exports_request_spans_over_otlp_http(tmp_path: Path) -> None:
    pods = [{"name": "p0", "preset": "llama-3.1-8b/h100", "served_model_name": MODEL}]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 5, "pods": pods})
    async with otlp_receiver() as receiver, run_fleet(spec, admin=False) as fleet:
        env = {"OTEL_SERVICE_NAME": "gw-under-test"}
        args = ("--otel-endpoint", receiver.url, "--otel-sample-ratio", "1")
        gateway = igw_serve(tmp_path, [fleet.pods[0].key], *args, env=env)
        async with gateway as url, aiohttp.ClientSession() as http:
            await wait_ready(http, url)
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
            resp = await http.post(url + "/v1/chat/completions", json=body)
            assert resp.status == 200, await resp.text()
            await resp.read()
        # Leaving igw_serve sent SIGTERM; the exporter flushed at shutdown.
        for _ in range(100):
            if any(s.kind == SERVER_KIND for s in receiver.spans):
                break
            await asyncio.sleep(0.05)
    assert set(receiver.content_types) == {"application/x-protobuf"}
    (server,) = [s for s in receiver.spans if s.kind == SERVER_KIND]
    assert server.name == "POST /v1/chat/completions"
    assert server.resource["service.name"] == "gw-under-test"
    assert server.attributes["gen_ai.operation.name"] == "chat"
    assert server.attributes["gen_ai.request.model"] == MODEL
    assert server.attributes["http.response.status_code"] == 200
    assert server.status_code != ERROR_STATUS
    names = {s.name for s in receiver.spans if s.trace_id == server.trace_id}
    assert {"igw.auth", "igw.route", "igw.admit", "igw.schedule", "igw.upstream"} <= names
    (upstream,) = [s for s in receiver.spans if s.kind == CLIENT_KIND]
    assert upstream.parent_span_id == server.span_id
    assert "gen_ai.first_token" in upstream.events
    ((traceparent, _),) = list(fleet.pod(fleet.pods[0].key).trace_contexts)
    assert traceparent.startswith(f"00-{server.trace_id}-{upstream.span_id}-")
    assert int(traceparent.rsplit("-", 1)[1], 16) & 1  # sampled


async def test_serve_refuses_bad_tracing_options(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("{}")
    (tmp_path / "e.yaml").write_text("schedulers: {}\n")  # a missing one is refused while parsing
    otlp = ("--otel-endpoint", "http://127.0.0.1:9")
    for args, env, field in (
        (("--otel-sample-ratio", "2"), {}, "--otel-sample-ratio"),
        (("--otel-endpoint", "collector:4318"), {}, "--otel-endpoint"),
        # the flags' stand-ins for operator-made pods (since session s49), refused like them
        (otlp, {"IGW_OTEL_SAMPLE_RATIO": "2"}, "IGW_OTEL_SAMPLE_RATIO must be a number between 0 and 1"),
        (
            otlp,
            {"IGW_OTEL_TRUST_PARENT_SAMPLING": "yes"},
            "IGW_OTEL_TRUST_PARENT_SAMPLING must be true or false",
        ),
    ):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "c.yaml"),
            "--endpoints", str(tmp_path / "e.yaml"), *args,
            stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, env={**os.environ, **env},
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 2
        assert field in err.decode()


async def test_serve_refuses_an_unreadable_otlp_header_variable_without_logging_it(tmp_path: Path) -> None:
    """``OTEL_EXPORTER_OTLP_HEADERS="x-honeycomb-team: <key>"`` (a colon for '='): the gateway
    started, the exporter logged the key whole on stderr and sent no key; now exit 2 naming the
    variable, and the key is nowhere in the output."""
    (tmp_path / "c.yaml").write_text("{}")
    (tmp_path / "e.yaml").write_text("schedulers: {}\n")
    key = "hcK3y0123456789abcdef"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "c.yaml"),
        "--endpoints", str(tmp_path / "e.yaml"), "--otel-endpoint", "http://127.0.0.1:9",
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "OTEL_EXPORTER_OTLP_HEADERS": f"x-honeycomb-team: {key}"},
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 2
    assert "OTEL_EXPORTER_OTLP_HEADERS" in err.decode()
    assert key not in out.decode() + err.decode()
