"""The start-up connect to the OTLP collector (``igw.gateway.collector_probe``): a gateway started with
tracing on and its collector down said nothing until the first batch of spans failed to export, which
without traffic is never (before session s44)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import pytest

from igw import launch
from igw.gateway.collector_probe import ProbeTarget, probe_collector, probe_target
from igw.gateway.tracing_options import TracingOptions
from igw.gateway.workers import WorkerRole
from igw.launch import LaunchOptions

SECRET = "hunter2-" + "s" * 12


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nothing else takes it) but not listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def probe_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "igw.gateway.collector_probe"]


async def test_a_refused_collector_is_one_warning_with_the_endpoint_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with refusing_port() as port:
        endpoint = f"http://user:{SECRET}@127.0.0.1:{port}/v1/traces?api_key={SECRET}"
        assert await probe_collector(endpoint, timeout_s=5.0, env={}) is False
    (record,) = probe_records(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert f"127.0.0.1:{port}/v1/traces" in message
    assert "not reachable at start-up" in message
    assert "Connection refused" in message
    assert SECRET not in message


async def test_a_listening_collector_is_one_info_line_and_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    connections = 0

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        assert await probe_collector(f"http://127.0.0.1:{port}/v1/traces", timeout_s=5.0, env={}) is True
        for _ in range(100):  # the server's accept callback runs on a later turn of the loop
            if connections:
                break
            await asyncio.sleep(0.01)
    assert connections == 1
    (record,) = probe_records(caplog)
    assert record.levelno == logging.INFO
    assert f"OTLP collector http://127.0.0.1:{port}/v1/traces reachable" in record.getMessage()


def test_the_probe_goes_where_the_exporter_connects_a_proxy_included() -> None:
    """Behind ``HTTPS_PROXY`` the exporter never connects to the collector itself: probing it directly
    would warn on every start of a set-up that works."""
    assert probe_target("https://otel.example/v1/traces", env={}) == ProbeTarget("otel.example", 443, None)
    assert probe_target("http://[::1]:4318/v1/traces", env={}) == ProbeTarget("::1", 4318, None)
    proxied = probe_target(
        "https://otel.example:4318/v1/traces", env={"HTTPS_PROXY": f"http://u:{SECRET}@proxy.corp:3128"}
    )
    assert (proxied.host, proxied.port) == ("proxy.corp", 3128)
    assert proxied.proxy == "http://[REDACTED]@proxy.corp:3128"
    for no_proxy in ("otel.example", ".example", "*", "a.test, example"):
        env = {"https_proxy": "proxy.corp:3128", "no_proxy": no_proxy}
        assert probe_target("https://otel.example:4318/", env=env).proxy is None, no_proxy
    env = {"http_proxy": "http://proxy.corp:3128", "NO_PROXY": "10.0.0.0/8"}
    assert probe_target("http://10.1.2.3:4318/", env=env) == ProbeTarget("10.1.2.3", 4318, None)
    assert probe_target("http://192.168.1.1:4318/", env=env).host == "proxy.corp"


async def test_start_up_never_waits_for_the_probe_and_stopping_cancels_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe runs beside start-up (a collector that neither answers nor refuses takes the whole
    export timeout); a gateway stopping while it still runs cancels it. Only worker 0 of a group
    probes: one line per pod."""
    calls: list[str] = []
    cancelled = asyncio.Event()

    async def hangs(endpoint: str, *, timeout_s: float) -> bool:
        calls.append(endpoint)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    monkeypatch.setattr(launch, "probe_collector", hangs)
    tracing = TracingOptions(endpoint="http://collector:4318/v1/traces", export_timeout_s=10.0)
    async with launch._collector_probe(LaunchOptions(config_path="c.yaml", tracing=tracing)):
        await asyncio.sleep(0)  # the probe task starts; the gateway's start-up goes on meanwhile
        assert calls == ["http://collector:4318/v1/traces"]
    assert cancelled.is_set()
    for index in (1, 0):
        worker = WorkerRole(index=index, count=2, directory="/nonexistent")
        async with launch._collector_probe(
            LaunchOptions(config_path="c.yaml", tracing=tracing, worker=worker)
        ):
            await asyncio.sleep(0)
    assert len(calls) == 2  # worker 1 did not probe, worker 0 did
    async with launch._collector_probe(LaunchOptions(config_path="c.yaml")):
        await asyncio.sleep(0)
    assert len(calls) == 2  # tracing off: no probe
