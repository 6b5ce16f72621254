"""A connection the gateway closes lingers (RFC 9112 9.6): answers survive a client still sending.

Before session s47 a close with bytes unread (a pipelined request behind a 400, the rest of a write
behind a ``Connection: close`` request) made the kernel send a reset instead of a FIN: the client
read ``ECONNRESET``, which discards the answers it had not read yet (an asyncio client loses all of
them; over a network, those still in flight are lost). Seen as intermittent ConnectionResetErrors in
``test_a_post_before_a_malformed_request_reaches_the_pod_once_at_every_split`` under load."""

from __future__ import annotations

import asyncio
import functools
import gc
import random
import re
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
import trustme
import uvloop
from aiohttp import web

from igw.gateway import serving
from igw.gateway.lean_server import _WRITE_HIGH_WATER, LeanStreamWriter
from igw.gateway.serving import GatewayServer, serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.global_router.support import global_doc
from tests.security.test_request_framing import HEALTHZ, MALFORMED, server_side  # noqa: F401

DOC = config_doc([scheduler("llama", "m")])
CLOSING = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
LATER = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
BULK = b"x" * 2**18


async def exchange(port: int, first: bytes, later: bytes, *, pause_s: float) -> tuple[list[bytes], bool]:
    """Send ``first``, then ``later`` after ``pause_s``, on a fresh connection; read nothing until
    both are sent (as a client writing a whole pipeline first does); the statuses read until the
    end, and whether the connection ended in a reset rather than a FIN."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, first)
        await asyncio.sleep(pause_s)
        reset = False
        try:
            await loop.sock_sendall(sock, later)
        except OSError:
            reset = True
        await asyncio.sleep(0.05)
        data = b""
        while not reset:
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), 10)
            except ConnectionResetError:
                reset = True
                break
            if not chunk:
                break
            data += chunk
        return re.findall(rb"HTTP/1\.1 (\d{3}) ", data), reset
    finally:
        sock.close()


CASES = {
    "400 behind a valid request, then a request": (HEALTHZ + MALFORMED, LATER, 0.0005, [b"200", b"400"]),
    "400 behind a valid request, then 256 KiB": (HEALTHZ + MALFORMED, BULK, 0, [b"200", b"400"]),
    "Connection: close, then a request": (CLOSING, LATER, 0.0005, [b"200"]),
    "Connection: close, then 256 KiB": (CLOSING, BULK, 0, [b"200"]),
}


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def test_answers_survive_a_client_still_sending_on_uvloop() -> None:
    """The production loop: a close with 256 KiB arriving behind the answered requests was a reset
    every time before the lingering close (100 of 100 tries)."""

    async def scenario() -> list[tuple[str, list[bytes], bool]]:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        out = []
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            port = int(url.rsplit(":", 1)[1])
            for name, (first, later, pause_s, _) in CASES.items():
                for _ in range(10):
                    out.append((name, *await exchange(port, first, later, pause_s=pause_s)))
        return out

    for name, statuses, reset in uvloop.run(scenario()):
        assert (statuses, reset) == (CASES[name][3], False), name


async def test_answers_survive_a_client_still_sending_on_every_listener(
    gateway: Callable[..., Any],
    server_side: str,  # noqa: F811
) -> None:
    """The gateway (lean and aiohttp sides) and the global router, on asyncio: a close with a
    pipelined request arriving behind a 400 was a reset in about two tries of three before."""
    app = create_global_app(parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False)
    async with (
        running(FakeModelServer("a")) as (pod,),
        gateway(DOC, {"llama": [pod.key]}) as gw,
        serve_app(app, host="127.0.0.1", port=0) as router,
    ):
        for url in (gw.url, router):
            port = int(url.rsplit(":", 1)[1])
            for name, (first, later, pause_s, expected) in CASES.items():
                for attempt in range(10):
                    found = await exchange(port, first, later, pause_s=pause_s)
                    assert found == (expected, False), (server_side, url, name, attempt)


async def test_a_lingering_connection_is_bounded_in_time_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that neither closes nor stops sending does not keep a closed connection: it is closed
    after LINGER_S, or once LINGER_BYTES were discarded; it counts against the connection cap, is the
    first closed to make room, and shutdown closes it."""
    monkeypatch.setattr(serving, "LINGER_S", 0.3)
    monkeypatch.setattr(serving, "LINGER_BYTES", 2**16)
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        port = int(url.rsplit(":", 1)[1])
        server = next(s for s in _servers(app))
        # silent after its answer: closed after LINGER_S
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(CLOSING)
        assert b" 200 " in await asyncio.wait_for(reader.read(), 5)  # the FIN came after the answer
        await asyncio.sleep(0.05)
        assert len(server.lingering) == 1
        assert server.open_connections() == 1
        await asyncio.sleep(0.5)
        assert not server.lingering
        writer.close()
        # sending on and on: closed (a reset) once LINGER_BYTES were discarded, well before LINGER_S
        monkeypatch.setattr(serving, "LINGER_S", 60.0)  # only the bytes can end it
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(CLOSING)
        assert b" 200 " in await asyncio.wait_for(reader.read(), 5)
        assert await _reset_while_sending(writer)
        assert not server.lingering
        writer.close()
        monkeypatch.setattr(serving, "LINGER_S", 0.3)
        # counted, evicted first, closed at shutdown
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(CLOSING)
        await asyncio.wait_for(reader.read(), 5)
        await asyncio.sleep(0.05)
        assert len(server.lingering) == 1
        server.max_connections = 1
        other_reader, other_writer = await asyncio.open_connection("127.0.0.1", port)
        other_writer.write(HEALTHZ)
        assert b" 200 " in await asyncio.wait_for(other_reader.readuntil(b"}"), 5)
        assert not server.lingering
        other_writer.close()
        writer.close()
        monkeypatch.setattr(serving, "LINGER_S", 60.0)  # only shutdown can end it
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(CLOSING)
        await asyncio.wait_for(reader.read(), 5)
        await asyncio.sleep(0.05)
        assert len(server.lingering) == 1
    assert not server.lingering
    writer.close()


async def _reset_while_sending(writer: asyncio.StreamWriter) -> bool:
    """Whether sending 1.6 MiB ends in a reset (the lingering connection closed past its bytes)."""
    try:
        for _ in range(100):
            writer.write(b"x" * 2**14)
            await asyncio.wait_for(writer.drain(), 1)
            await asyncio.sleep(0)
    except ConnectionError:
        return True
    return False


def _servers(app: web.Application) -> list[GatewayServer]:
    """The live GatewayServer objects serving ``app``."""
    return [o for o in gc.get_objects() if isinstance(o, GatewayServer) and o.app is app]


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_an_idle_keep_alive_close_with_nothing_unread_does_not_linger(loop_name: str) -> None:
    """A connection closed for idleness (the keep-alive timeout) with no byte unread closes at once:
    it neither lingers LINGER_S nor counts as lingering. Before session s48 it stayed in
    ``server.lingering`` (counted against the cap) for the whole LINGER_S (2 s)."""
    limits = serving.ServerLimits(keepalive_timeout_s=0.2)

    async def scenario() -> tuple[int, int]:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        async with serve_app(app, host="127.0.0.1", port=0, limits=limits) as url:
            port = int(url.rsplit(":", 1)[1])
            server = next(s for s in _servers(app))
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(HEALTHZ)
            assert b" 200 " in await asyncio.wait_for(reader.readuntil(b"}"), 5)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # the idle close's FIN
            await asyncio.sleep(0.05)
            lingering, opened = len(server.lingering), server.open_connections()
            writer.close()
            return lingering, opened

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    assert run(scenario()) == (0, 0)


async def test_bytes_unread_at_an_idle_close_are_still_drained() -> None:
    """The idle close races a client that sends just then: bytes already in the socket when the
    gateway closes it are drained (a lingering close, a FIN rather than a reset), as for any close."""
    loop = asyncio.get_running_loop()
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        server = next(s for s in _servers(app))
        listener = socket.create_server(("127.0.0.1", 0))
        with listener:
            for pending, expected in ((b"", 0), (LATER, 1)):
                client = socket.create_connection(listener.getsockname())
                accepted, _ = listener.accept()
                with client, accepted:
                    client.sendall(pending)
                    await asyncio.sleep(0.05)
                    server.linger(accepted, idle=True)
                    assert len(server.lingering) == expected, pending
                    client.setblocking(False)
                    assert await asyncio.wait_for(loop.sock_recv(client, 10), 5) == b""  # a FIN
                for lingering in list(server.lingering):
                    lingering.close()
    del url


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_tls_close_waits_for_the_client_s_close_notify_only_a_bounded_time(
    loop_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TLS connection the gateway closes waits for the client's close_notify at most LINGER_S,
    then is gone (no longer counted against ``maxConnections``). Before session s48 ``start_tls`` had
    no ``ssl_shutdown_timeout``: both loops waited their default 30 s for a client that never sent
    it (nor closed TCP), the connection counted all that time."""
    monkeypatch.setattr(serving, "LINGER_S", 0.5)
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    held: list[ssl.SSLSocket] = []

    def client(port: int) -> None:
        raw = socket.create_connection(("127.0.0.1", port))
        tls = client_context.wrap_socket(raw, server_hostname="127.0.0.1")
        held.append(tls)  # never unwrapped (no close_notify), closed only at the end
        tls.settimeout(5)
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while b"}" not in data:
            data += tls.recv(65536)
        assert b" 200 " in data

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=server_context) as url:
            server = next(s for s in _servers(app))
            try:
                await loop.run_in_executor(None, client, int(url.rsplit(":", 1)[1]))
                return await wait_for(lambda: server.open_connections() == 0, within=5, what="the close")
            finally:
                for tls in held:
                    tls.close()

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    assert run(scenario()) < 3  # 0.5 s and the loop's timer granularity; 30 s before


LARGE = 8 * 2**20
"""An answer far larger than the socket buffers: most of it is still unsent when the gateway closes."""


async def large(request: web.Request) -> web.Response:
    return web.Response(body=b"a" * LARGE, content_type="application/octet-stream")


def _tls_pair() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


def _slow_tls_client(
    port: int, context: ssl.SSLContext, request: bytes, *, delay_s: float, held: list[ssl.SSLSocket]
) -> tuple[int, float]:
    """Send ``request``, start reading only after ``delay_s``, in small reads, to the end of the
    answer's body (as its Content-Length says) or of the stream; never sends close_notify (the socket
    is kept in ``held``). The body bytes read, and when the last one came (monotonic)."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2**15)  # the answer waits in the gateway's buffers
    raw.connect(("127.0.0.1", port))
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    held.append(tls)
    tls.settimeout(10)
    tls.sendall(request)
    time.sleep(delay_s)
    data = bytearray()
    last = time.monotonic()
    body_at = -1
    while body_at < 0 or len(data) - body_at < LARGE:
        try:
            chunk = tls.recv(2**14)
        except (OSError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
        last = time.monotonic()
        if body_at < 0 and (end := data.find(b"\r\n\r\n")) >= 0:
            body_at = end + 4
    return (len(data) - body_at if body_at >= 0 else 0), last


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /large HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /large HTTP/1.0\r\nHost: x\r\n\r\n",
    ],
    ids=["connection-close", "http-1.0"],
)
def test_a_tls_close_sends_the_whole_answer_to_a_slow_reader_then_ends_soon(
    loop_name: str, request_bytes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A closing answer far larger than the socket buffers reaches a client that starts reading
    well after the close began (longer than LINGER_S), whole; the connection is then gone within
    about LINGER_S of the last byte although the client never sends close_notify. Before session s49
    the close_notify wait (LINGER_S) counted from the gateway's close, when most of the answer was
    still unsent: the connection was cut mid-body (3.9 of 8 MiB with LINGER_S at 2 s, the client
    starting after 1.5 s)."""
    monkeypatch.setattr(serving, "LINGER_S", 0.3)
    server_context, client_context = _tls_pair()
    held: list[ssl.SSLSocket] = []

    async def scenario() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/large", large)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=server_context) as url:
            server = next(s for s in _servers(app))
            try:
                port = int(url.rsplit(":", 1)[1])
                got, last = await loop.run_in_executor(
                    None,
                    functools.partial(
                        _slow_tls_client, port, client_context, request_bytes, delay_s=1.0, held=held
                    ),
                )
                assert got == LARGE
                await wait_for(lambda: server.open_connections() == 0, within=5, what="the close")
                return got, time.monotonic() - last
            finally:
                for tls in held:
                    tls.close()

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    got, after_last = run(scenario())
    assert got == LARGE
    assert after_last < 2.0  # LINGER_S (0.3 s) after the last byte, not the send timeout


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_tls_close_to_a_client_that_reads_nothing_is_cut_at_the_send_timeout(
    loop_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting for a closing answer's bytes to leave is bounded: a client that reads none of them is
    cut once ``send_timeout`` passed without progress (and LINGER_S), not held for ever."""
    monkeypatch.setattr(serving, "LINGER_S", 0.3)
    server_context, client_context = _tls_pair()
    held: list[ssl.SSLSocket] = []
    limits = serving.ServerLimits(send_timeout_s=0.5)

    def client(port: int) -> None:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2**15)
        raw.connect(("127.0.0.1", port))
        tls = client_context.wrap_socket(raw, server_hostname="127.0.0.1")
        held.append(tls)  # reads nothing, sends no close_notify, closed only at the end
        tls.sendall(b"GET /large HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/large", large)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=server_context, limits=limits) as url:
            server = next(s for s in _servers(app))
            try:
                await loop.run_in_executor(None, client, int(url.rsplit(":", 1)[1]))
                await wait_for(lambda: server.open_connections() == 1, within=5, what="the connection")
                return await wait_for(lambda: server.open_connections() == 0, within=10, what="the cut")
            finally:
                for tls in held:
                    tls.close()

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    assert run(scenario()) < 5  # about send_timeout (0.5 s) and LINGER_S; never held for ever


async def large_event(request: web.Request) -> web.StreamResponse:
    """A streamed answer whose one event is far larger than the socket buffers."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"data: " + b"a" * LARGE + b"\n\n")
    await resp.write_eof()
    return resp


def _keep_alive_tls_client(port: int, context: ssl.SSLContext, path: str, held: list[ssl.SSLSocket]) -> None:
    """Request ``path`` on a kept-alive TLS connection with a small receive buffer; read nothing."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2**15)
    raw.connect(("127.0.0.1", port))
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    held.append(tls)  # closed only at the end
    tls.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
@pytest.mark.parametrize("path", ["/large", "/event"])
def test_a_kept_alive_tls_client_that_stops_reading_is_cut_at_the_send_timeout(
    loop_name: str, path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An answer written in one piece larger than the socket buffers, to a kept-alive TLS client that
    reads none of it, is cut at the send timeout, as on plain TCP, its unsent bytes dropped with the
    connection. Before session s49 the TLS layer handed the whole write to the TCP transport's buffer
    and no pause reached the handler: the connection (4.6 of 8 MiB unsent) stayed until the
    keep-alive timeout."""
    monkeypatch.setattr(serving, "LINGER_S", 0.3)
    server_context, client_context = _tls_pair()
    held: list[ssl.SSLSocket] = []
    limits = serving.ServerLimits(send_timeout_s=0.5, keepalive_timeout_s=30)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/large", large)
        app.router.add_get("/event", large_event)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=server_context, limits=limits) as url:
            server = next(s for s in _servers(app))
            try:
                port = int(url.rsplit(":", 1)[1])
                await loop.run_in_executor(None, _keep_alive_tls_client, port, client_context, path, held)
                return await wait_for(lambda: server.open_connections() == 0, within=10, what="the cut")
            finally:
                for tls in held:
                    tls.close()

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    assert run(scenario()) < 3  # about send_timeout (0.5 s); the keep-alive timeout (30 s) before
    assert any("send timeout" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_kept_alive_tls_client_that_reads_slowly_gets_the_whole_answer(loop_name: str) -> None:
    """A TLS client that reads a large answer for longer than the send timeout, but steadily, is not
    cut: the send timeout counts only while no byte leaves."""
    server_context, client_context = _tls_pair()
    held: list[ssl.SSLSocket] = []
    limits = serving.ServerLimits(send_timeout_s=0.5)

    def client(port: int) -> tuple[int, float]:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2**15)
        raw.connect(("127.0.0.1", port))
        tls = client_context.wrap_socket(raw, server_hostname="127.0.0.1")
        held.append(tls)
        tls.settimeout(10)
        tls.sendall(b"GET /large HTTP/1.1\r\nHost: x\r\n\r\n")
        t0 = time.monotonic()
        data = bytearray()
        while (end := data.find(b"\r\n\r\n")) < 0 or len(data) - end - 4 < LARGE:
            chunk = tls.recv(2**14)
            if not chunk:
                break
            data += chunk
            time.sleep(0.002)
        return len(data) - data.find(b"\r\n\r\n") - 4, time.monotonic() - t0

    async def scenario() -> tuple[int, float]:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/large", large)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=server_context, limits=limits) as url:
            try:
                return await loop.run_in_executor(None, client, int(url.rsplit(":", 1)[1]))
            finally:
                for tls in held:
                    tls.close()

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    got, took = run(scenario())
    assert got == LARGE
    assert took > 1.0  # read for longer than the send timeout (0.5 s)


EVENT = b"data: " + b"e" * 1016 + b"\n\n"
"""A 1 KiB server-sent event."""


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_slow_tls_streaming_reader_holds_as_many_unsent_bytes_as_on_plain_tcp(loop_name: str) -> None:
    """A stream of 1 KiB events to a TLS client that reads nothing pauses its writer with as many
    unsent bytes in the gateway as a plain-TCP connection holds (the TCP high-water mark and one
    event): the TLS layer pauses the writer while the TCP transport below it is paused, and the
    transport the handler writes to reports both buffers. Before session s49 the TLS layer kept its
    own 512 KiB high-water mark: 577 KiB held per slow reader against 65 KiB on plain TCP, and the
    handler's transport reported only the TLS layer's part; s49 gave it the TCP transport's marks,
    which held both buffers' worth (132 KiB, before session s50)."""
    server_context, client_context = _tls_pair()
    held: list[ssl.SSLSocket] = []
    written = [0]
    transports: list[asyncio.Transport] = []

    async def events(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        transports.append(transport)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        stream = LeanStreamWriter(cast(Any, request.protocol), head)  # the relay's writer
        while True:
            await stream.write(EVENT)
            written[0] += 1

    def client(port: int) -> None:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2**15)
        raw.connect(("127.0.0.1", port))
        tls = client_context.wrap_socket(raw, server_hostname="127.0.0.1")
        held.append(tls)  # reads nothing; closed only at the end
        tls.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")

    async def scenario() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/events", events)
        limits = serving.ServerLimits(send_timeout_s=30)
        async with serve_app(app, host="127.0.0.1", port=0, ssl_context=server_context, limits=limits) as url:
            try:
                await loop.run_in_executor(None, client, int(url.rsplit(":", 1)[1]))
                before = -1
                while written[0] != before:  # until the writer is paused
                    before = written[0]
                    await asyncio.sleep(0.3)
                (transport,) = transports
                tls, tcp = getattr(transport, "_tls"), getattr(transport, "_tcp")  # noqa: B009
                reported = transport.get_write_buffer_size()
                # the marks that decide the pause are the TCP transport's (the TLS layer's are 0 and 1)
                assert transport.get_write_buffer_limits() == tcp.get_write_buffer_limits()
                return tls.get_write_buffer_size(), tcp.get_write_buffer_size(), reported
            finally:
                for tls in held:
                    tls.close()

    run = uvloop.run if loop_name == "uvloop" else asyncio.run
    in_tls, in_tcp, reported = run(scenario())
    assert written[0] > 0
    assert in_tcp > 0  # the client's socket buffers are full: the gateway holds the rest
    assert in_tls + in_tcp <= _WRITE_HIGH_WATER + 2 * len(EVENT)  # 577 KiB before s49, 132 KiB before s50
    assert reported == in_tls + in_tcp
