"""EMF delivery to the CloudWatch agent's listener: real TCP/UDP sockets on loopback."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from igw.gateway.emf import emf_reporter
from igw.gateway.emf_sink import (
    DEFAULT_AGENT_PORT,
    ENDPOINT_ENV,
    AgentEndpoint,
    AgentHandler,
    EmfEndpointError,
    endpoint_from,
)
from igw.gateway.telemetry import GatewayMetrics
from tests.observability.emf_check import AgentListener, check_emf, one_completion
from tests.observability.live_gateway import MODEL, serving_gateway, wait_ready


def _lines(count: int) -> list[str]:
    """``count`` real reporter documents, one per model, as the gateway logs them."""
    metrics = GatewayMetrics(lister=lambda: [], clock=lambda: 0.0)
    for i in range(count):
        metrics.requests.labels(f"m{i}", f"m{i}", "200").inc()
        metrics.duration.labels(f"m{i}", f"m{i}").observe(0.02)
    return list(emf_reporter(metrics).lines())


def _send(handler: AgentHandler, line: str) -> None:
    handler.handle(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))


def test_endpoints_parse_with_the_agent_port_as_default() -> None:
    assert AgentEndpoint.parse("tcp://10.0.0.7:25888") == AgentEndpoint("tcp", "10.0.0.7", 25888)
    assert AgentEndpoint.parse("udp://cloudwatch-agent.amazon-cloudwatch") == AgentEndpoint(
        "udp", "cloudwatch-agent.amazon-cloudwatch", DEFAULT_AGENT_PORT
    )
    assert str(AgentEndpoint.parse("tcp://h:1")) == "tcp://h:1"


@pytest.mark.parametrize("bad", ["http://h:25888", "tcp://:25888", "tcp://h:99999", "tcp://h:1/x", "h:1"])
def test_bad_endpoints_are_rejected_naming_the_source(bad: str) -> None:
    with pytest.raises(EmfEndpointError, match="--emf-endpoint"):
        AgentEndpoint.parse(bad)
    with pytest.raises(EmfEndpointError, match=ENDPOINT_ENV):
        endpoint_from(None, {ENDPOINT_ENV: bad})


@pytest.mark.parametrize("bad", ["http://u:S3cretPassw0rd9XYZqq@h:1", "tcp://u:S3cretPassw0rd9XYZqq@h:99999"])
def test_a_refused_endpoint_is_quoted_without_its_password(bad: str) -> None:
    with pytest.raises(EmfEndpointError) as refused:
        AgentEndpoint.parse(bad)
    assert "S3cretPassw0rd9XYZqq" not in str(refused.value)
    assert "[REDACTED]@h" in str(refused.value)


def test_the_flag_wins_over_the_environment_and_neither_means_stdout() -> None:
    env = {ENDPOINT_ENV: "udp://a:1"}
    assert endpoint_from("tcp://b:2", env) == AgentEndpoint("tcp", "b", 2)
    assert endpoint_from(None, env) == AgentEndpoint("udp", "a", 1)
    assert endpoint_from(None, {ENDPOINT_ENV: " "}) is None
    assert endpoint_from(None, {}) is None


@pytest.mark.parametrize("protocol", ["tcp", "udp"])
def test_documents_arrive_schema_valid_one_per_line(protocol: str) -> None:
    listener = AgentListener(protocol)
    handler = AgentHandler(AgentEndpoint.parse(listener.endpoint))
    try:
        lines = _lines(3)
        for line in lines:
            _send(handler, line)
        listener.wait_for(lambda docs: len(docs) == 3)
        assert [d["Model"] for d in listener.documents] == ["m0", "m1", "m2"]
        for document in listener.documents:
            check_emf(document)
        assert handler.sent == 3
        assert handler.dropped == 0
    finally:
        handler.close()
        listener.close()


def test_agent_down_drops_and_counts_then_delivery_resumes_when_it_is_back() -> None:
    listener = AgentListener("tcp")
    port = listener.port
    handler = AgentHandler(AgentEndpoint.parse(listener.endpoint), max_backoff_s=0.05)
    (line,) = _lines(1)
    try:
        _send(handler, line)
        listener.wait_for(lambda docs: len(docs) == 1)
        listener.close()  # the agent goes away, closing the gateway's connection
        while handler.dropped == 0:  # the first write after the peer closed may still be accepted
            _send(handler, line)
            time.sleep(0.01)
        listener = AgentListener("tcp", port)  # the agent is back on the same port
        sent_before = handler.sent
        while not listener.documents:
            _send(handler, line)
            listener.wait_for(lambda docs: True, timeout_s=0.05)
        # The writer thread counts a line after its send returns; the listener may parse it first.
        deadline = time.monotonic() + 10
        while handler.sent <= sent_before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handler.sent > sent_before
        check_emf(listener.documents[-1])
    finally:
        handler.close()
        listener.close()


def test_a_full_buffer_drops_new_documents_instead_of_waiting() -> None:
    listener = AgentListener("tcp")
    endpoint = AgentEndpoint.parse(listener.endpoint)
    listener.close()  # nobody listens: every connect is refused and the drain thread backs off
    handler = AgentHandler(endpoint, queue_lines=2, max_backoff_s=1.0)
    (line,) = _lines(1)
    try:
        for _ in range(200):
            _send(handler, line)
        assert handler.dropped >= 200 - 2 - 1  # at most the buffer and the one being tried survive
    finally:
        handler.close(timeout_s=0.1)
    assert handler.sent == 0
    assert handler.dropped == 200  # nothing queued is lost silently at close: it is counted


async def test_serve_sends_emf_to_the_agent_endpoint_not_stdout(tmp_path: Path) -> None:
    listener = AgentListener("tcp")
    stdout: list[str] = []
    gateway = serving_gateway(
        tmp_path, "--emf-interval", "0.2", "--emf-endpoint", listener.endpoint, stdout=stdout
    )
    try:
        await one_completion(gateway)
        listener.wait_for(lambda docs: any("Model" in d for d in docs))
    finally:
        listener.close()
    for document in listener.documents:
        check_emf(document)
    assert sum(d["Requests"] for d in listener.documents if "Model" in d) == 1
    assert any(d.get("Pool") == MODEL and d["ReadyPods"] == 2 for d in listener.documents)
    assert not [line for line in stdout if '"_aws"' in line]


async def test_serve_honours_the_aws_emf_agent_endpoint_variable(tmp_path: Path) -> None:
    listener = AgentListener("udp")
    gateway = serving_gateway(tmp_path, "--emf-interval", "0.2", env={ENDPOINT_ENV: listener.endpoint})
    try:
        async with gateway as url, aiohttp.ClientSession() as http:
            await wait_ready(http, url)
        listener.wait_for(lambda docs: any(d.get("Pool") == MODEL for d in docs))
    finally:
        listener.close()
    for document in listener.documents:
        check_emf(document)


def test_serve_rejects_a_bad_endpoint_naming_the_flag(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "serve", "--config", str(tmp_path / "absent.yaml"),
         "--emf-endpoint", "http://agent:25888"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--emf-endpoint" in done.stderr
    assert "tcp://" in done.stderr
