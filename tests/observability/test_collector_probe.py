"""The start-up connect to the OTLP collector (``igw.gateway.collector_probe``): a gateway started with
tracing on and its collector down said nothing until the first batch of spans failed to export, which
without traffic is never (before session s44)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

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


PROXY_ENVS: list[dict[str, str]] = [
    {"ALL_PROXY": "http://all.corp:3128"},
    {"all_proxy": "socks5://all.corp"},
    {"ALL_PROXY": "http://all.corp:3128", "HTTPS_PROXY": "http://https.corp:8080"},
    {"ALL_PROXY": "http://all.corp:3128", "NO_PROXY": "otel.example"},
    {"HTTPS_PROXY": "http://https.corp:8080", "HTTP_PROXY": "http://http.corp:8081"},
    {"HTTPS_PROXY": "http://https.corp:8080", "NO_PROXY": "otel.example:4318"},
    {"HTTP_PROXY": "http://http.corp:8081", "NO_PROXY": "10.1.2.3:4318"},
    {"HTTPS_PROXY": "http://https.corp:8080", "https_proxy": ""},
    {"HTTPS_PROXY": "http://https.corp:8080", "NO_PROXY": "a.test, *"},
    {"HTTPS_PROXY": "http://https.corp:8080", "no_proxy": "a.test", "NO_PROXY": "otel.example"},
    {"ALL_PROXY": "all.corp:3128", "NO_PROXY": "10.0.0.0/8"},
]
PROXIED_URLS = (
    "https://otel.example:4318/v1/traces",
    "http://otel.example:4318/v1/traces",
    "http://10.1.2.3:4318/v1/traces",
)


@pytest.mark.parametrize("env", PROXY_ENVS, ids=lambda env: ",".join(f"{k}={v}" for k, v in env.items()))
def test_the_probe_picks_the_proxy_the_exporter_s_http_client_picks(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle is the exporter's HTTP client itself (``requests``, as a ``Session`` with
    ``trust_env`` resolves a request's proxy): ``ALL_PROXY`` when no variable names the scheme's,
    ``NO_PROXY`` entries with a port, an empty lower-case variable that hides the upper-case one,
    a ``*`` only as the whole list. Until session s45 the probe read ``HTTP(S)_PROXY`` alone: behind
    an ``ALL_PROXY`` it connected to the collector directly and warned on every start of a set-up
    that works."""
    import requests.utils

    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name == "REQUEST_METHOD":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for url in PROXIED_URLS:
        chosen = requests.utils.select_proxy(url, requests.utils.get_environ_proxies(url))
        target = probe_target(url, env)
        if chosen is None:
            assert target.proxy is None, url
        else:
            proxy = urlsplit(requests.utils.prepend_scheme_if_needed(chosen, "http"))
            assert target.proxy is not None, url
            assert (target.host, target.port) == (proxy.hostname, proxy.port or target.port), url
