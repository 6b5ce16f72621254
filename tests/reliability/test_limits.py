"""Client timeouts and connection limits: stalled clients are closed and cannot deny service."""

from __future__ import annotations

import asyncio
import resource
import socket
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from igw.cli.main import main
from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.serving import ServerLimits, effective_max_connections, raise_fd_limit
from igw.sim.live import run_fleet
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import (
    MODEL,
    fleet_spec,
    gateway_doc,
    igw_serve,
    in_process_gateway,
    write_config,
)

SLOW_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\n"  # the head never ends
SLOW_BODY = b'POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n{"model"'


async def open_stalled(
    url: str, payload: bytes, count: int
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = url.removeprefix("http://").split(":")
    conns = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        if payload:
            writer.write(payload)
        conns.append((reader, writer))
    return conns


async def closed_answer(reader: asyncio.StreamReader, *, within: float) -> bytes:
    """Everything the server sent before closing the connection (fails if it stays open)."""
    return await asyncio.wait_for(reader.read(), timeout=within)


async def test_1100_stalled_connections_do_not_stop_healthy_clients(tmp_path: Path) -> None:
    raise_fd_limit()  # this test process holds the client side of every connection
    async with run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet:
        args = ("--header-timeout", "2", "--body-timeout", "2")
        async with igw_serve(tmp_path, gateway_doc(), [fleet.pods[0].key], *args) as gw:
            heads = await open_stalled(gw.url, SLOW_HEAD, 1050)
            bodies = await open_stalled(gw.url, SLOW_BODY, 50)
            async with aiohttp.ClientSession() as http:
                for i in range(5):
                    assert (await http.get(gw.url + "/healthz")).status == 200
                    resp = await http.post(
                        gw.url + "/v1/completions", json={"model": MODEL, "prompt": f"q{i}", "max_tokens": 4}
                    )
                    assert resp.status == 200
            # Generous bound (loaded CI machine): the timeouts are 2 s.
            answers = await asyncio.gather(*(closed_answer(r, within=60) for r, _ in heads + bodies))
            for _, writer in heads + bodies:
                writer.close()
        assert all(a == b"" or a.startswith(b"HTTP/1.1 408") for a in answers[:1050])
        assert sum(a.startswith(b"HTTP/1.1 408") for a in answers[:1050]) >= 1000
        assert all(b" 408 " in a.split(b"\r\n")[0] for a in answers[1050:])
        assert all(b'"code":"request_timeout"' in a for a in answers[1050:])
    assert "Traceback" not in gw.output


async def test_connection_limit_evicts_stalled_connections_for_new_ones(tmp_path: Path) -> None:
    limits = ServerLimits(max_connections=20, header_timeout_s=60, keepalive_timeout_s=60, stream_grace_s=1)
    async with (
        run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet,
        in_process_gateway(tmp_path, gateway_doc(), [fleet.pods[0].key], limits=limits) as gw,
    ):
        stalled = await open_stalled(gw.url, SLOW_HEAD, 60)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            for i in range(5):
                resp = await http.post(
                    gw.url + "/v1/completions", json={"model": MODEL, "prompt": f"q{i}", "max_tokens": 4}
                )
                assert resp.status == 200
        closed = 0
        for reader, writer in stalled:
            try:
                await asyncio.wait_for(reader.read(), timeout=0.5)
                closed += 1
            except TimeoutError:
                pass
            writer.close()
        assert closed >= 40  # at most 20 connections were ever kept


async def test_idle_keepalive_connections_are_closed(tmp_path: Path) -> None:
    limits = ServerLimits(keepalive_timeout_s=0.5, stream_grace_s=1)
    async with (
        run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet,
        in_process_gateway(tmp_path, gateway_doc(), [fleet.pods[0].key], limits=limits) as gw,
    ):
        (silent,) = await open_stalled(gw.url, b"", 1)
        (used,) = await open_stalled(gw.url, b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n", 1)
        t0 = time.monotonic()
        assert await closed_answer(silent[0], within=30) == b""
        answer = await closed_answer(used[0], within=30)
        assert answer.startswith(b"HTTP/1.1 200")
        assert time.monotonic() - t0 >= 0.4  # closed by the idle timeout, not at once
        for _, writer in (silent, used):
            writer.close()


async def _streaming_client_that_never_reads(url: str) -> asyncio.StreamWriter:
    """A streamed request from a socket with a small receive buffer, whose answer is never read."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    _, writer = await asyncio.open_connection(sock=sock)
    body = orjson.dumps({"model": MODEL, "prompt": "never read", "max_tokens": 10, "stream": True})
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    return writer


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_a_client_that_stops_reading_is_cut_off_and_the_model_server_request_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    limits = ServerLimits(send_timeout_s=1.0, stream_grace_s=1)
    # An answer far larger than the socket buffers: the gateway's writes back up within milliseconds.
    async with (
        running(FakeModelServer("a", tokens=400_000)) as (pod,),
        in_process_gateway(tmp_path, gateway_doc(), [pod.key], limits=limits) as gw,
    ):
        writer = await _streaming_client_that_never_reads(gw.url)
        t0 = time.monotonic()
        # The gateway hangs up on the model server (its handler is cancelled); without the send
        # timeout the request stayed open for as long as the client kept its connection.
        await asyncio.wait_for(pod.cancelled.wait(), timeout=30)
        assert time.monotonic() - t0 >= 0.9
        assert pod.generation_tokens_total == 400_000  # the fake counts a request's tokens up front
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": MODEL, "prompt": "a reader", "max_tokens": 3}
        ) as resp:
            assert resp.status == 200
            await resp.read()
        writer.close()
    assert any("send timeout" in r.getMessage() for r in caplog.records)


def test_fd_limit_is_raised_and_connections_stay_below_it() -> None:
    soft = raise_fd_limit()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert soft == hard or hard == resource.RLIM_INFINITY
    assert effective_max_connections(ServerLimits(max_connections=10**9)) < soft


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--keepalive-timeout", "121"),
        ("--header-timeout", "0"),
        ("--send-timeout", "0"),
        ("--max-connections", "0"),
    ],
)
def test_invalid_limits_are_refused_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    config, eps = write_config(tmp_path, gateway_doc(), ["127.0.0.1:9"])
    code = main(["serve", "--config", str(config), "--endpoints", str(eps), "--port", "0", flag, value])
    assert code == 2
    assert flag in capsys.readouterr().err
