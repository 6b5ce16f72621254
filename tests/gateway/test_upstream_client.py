"""The forward path's upstream client against scripted HTTP servers on loopback: framing (length,
chunked, until close), keep-alive reuse and the idle-close race, connect failures, interim
responses, broken bodies, back-pressure, cancellation and the connection cap."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import pytest
import trustme
import uvloop

from igw.gateway.tcp_keepalive import UPSTREAM
from igw.gateway.upstream_client import (
    MAX_RESPONSE_FIELDS,
    MAX_RESPONSE_HEAD_BYTES,
    READ_HIGH_WATER,
    ConnectFailed,
    Origin,
    UpstreamBroken,
    UpstreamPool,
    UpstreamResponse,
    UpstreamStalled,
    _Connection,
    parse_origin,
)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ScriptedServer:
    """A TCP server on 127.0.0.1 that runs ``script`` per connection and records what it saw."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.disconnected = asyncio.Event()
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = await reader.readexactly(length)
        self.requests.append(head + body)
        return head + body


@contextlib.asynccontextmanager
async def scripted(
    script: Callable[[ScriptedServer, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[ScriptedServer]:
    holder: list[ScriptedServer] = []

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await script(holder[0], reader, writer)

    server = ScriptedServer(run)
    holder.append(server)
    listener = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        await listener.wait_closed()


@contextlib.asynccontextmanager
async def pool(limit: int = 8) -> AsyncIterator[UpstreamPool]:
    p = UpstreamPool(limit=limit)
    try:
        yield p
    finally:
        await p.close()


async def post(p: UpstreamPool, srv: ScriptedServer, body: bytes) -> UpstreamResponse:
    """POST ``body`` to ``/`` on the scripted server; the response head."""
    return await p.post(f"127.0.0.1:{srv.port}", "/", headers={}, body=body, connect_timeout_s=5)


def ok(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"".join(extra)
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def keep_serving(
    srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    while True:
        await srv.read_request(reader)
        writer.write(ok(b'{"n":%d}' % len(srv.requests)))
        await writer.drain()


def test_origins() -> None:
    assert parse_origin("10.0.0.1:8000") == Origin("10.0.0.1", 8000, tls=False)
    assert parse_origin("https://c.example.com") == Origin("c.example.com", 443, tls=True)
    assert parse_origin("http://[::1]:81/x") == Origin("::1", 81, tls=False)
    assert parse_origin("https://h:8443").host_header == "h:8443"
    assert parse_origin("http://h").host_header == "h"
    with pytest.raises(ValueError, match="scheme"):
        parse_origin("ftp://h:1")


async def test_request_head_body_and_keep_alive_reuse() -> None:
    async with scripted(keep_serving) as srv, pool() as p:
        for n in (1, 2, 3):
            resp = await p.post(
                f"127.0.0.1:{srv.port}",
                "/v1/completions?x=1",
                headers={"X-Request-Id": "r1", "Authorization": "Bearer t"},
                body=b'{"prompt":"hi"}',
                connect_timeout_s=5,
            )
            assert (resp.status, resp.reason, resp.content_type) == (200, "OK", "application/json")
            assert await resp.read() == b'{"n":%d}' % n
            resp.close()
        assert srv.connections == 1  # one pooled connection served all three
        head, _, body = srv.requests[0].partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST /v1/completions?x=1 HTTP/1.1"
        assert f"Host: 127.0.0.1:{srv.port}".encode() in lines
        assert b"X-Request-Id: r1" in lines
        assert b"Content-Length: 15" in lines
        assert body == b'{"prompt":"hi"}'


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="per-socket keep-alive timing is Linux's")
async def test_every_connection_probes_a_silent_peer_with_tcp_keepalive() -> None:
    """A pod whose node vanished sends no RST: only keep-alive probes end a connection whose
    non-streamed answer never comes (the kernel fails it after idle + interval x probes)."""
    async with scripted(keep_serving) as srv, pool() as p:
        resp = await post(p, srv, b"{}")
        transport = resp._conn.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        timing = [
            sock.getsockopt(socket.IPPROTO_TCP, option)
            for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
        ]
        assert timing == [UPSTREAM.idle_s, UPSTREAM.interval_s, UPSTREAM.probes]
        assert UPSTREAM.idle_s + UPSTREAM.interval_s * UPSTREAM.probes <= 60  # within streamIdleTimeout
        await resp.read()
        resp.close()


async def test_connections_left_idle_after_a_burst_close_without_further_traffic() -> None:
    """After a burst no release comes to sweep the idle list; the pool's timer must close them."""
    async with scripted(keep_serving) as srv:
        p = UpstreamPool(limit=8, keepalive_s=0.2)
        try:
            burst = await asyncio.gather(*(post(p, srv, b"x") for _ in range(4)))
            for resp in burst:
                await resp.read()
                resp.close()
            origin = parse_origin(f"127.0.0.1:{srv.port}")
            assert len(p._idle[origin]) == 4
            assert srv.connections == 4
            idle = list(p._idle[origin])
            for _ in range(100):  # no request after the burst: only the timer can close them
                await asyncio.sleep(0.05)
                if origin not in p._idle:
                    break
            assert origin not in p._idle
            assert all(conn.closed for conn in idle)
            later = await post(p, srv, b"y")  # the pool still works: a fresh connection
            assert await later.read() == b'{"n":5}'
            later.close()
            assert srv.connections == 5
        finally:
            await p.close()
        assert p._sweep_timer is None  # close cancels the timer


async def one_idle_connection(p: UpstreamPool, srv: ScriptedServer) -> _Connection:
    """Serve one request and return the connection it left idle in the pool."""
    first = await post(p, srv, b"a")
    await first.read()
    first.close()
    (idle,) = p._idle[parse_origin(f"127.0.0.1:{srv.port}")]
    return idle


async def test_a_pooled_connection_that_closed_while_idle_is_not_reused() -> None:
    async with scripted(keep_serving) as srv, pool() as p:
        stale = await one_idle_connection(p, srv)
        assert stale.transport is not None
        stale.transport.abort()
        await asyncio.sleep(0.01)  # connection_lost runs
        second = await post(p, srv, b"b")
        assert second.status == 200
        assert second._conn is not stale
        second.close()
        assert srv.connections == 2


async def test_a_reused_connection_closed_before_any_answer_gets_one_fresh_retry() -> None:
    async def close_second_request(
        srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await srv.read_request(reader)
        writer.write(ok(b"{}"))
        await writer.drain()
        if srv.connections == 1:
            await srv.read_request(reader)  # the second request on the pooled connection: dropped
            return
        await reader.read()

    async with scripted(close_second_request) as srv, pool() as p:
        first = await post(p, srv, b"a")
        await first.read()
        first.close()
        second = await post(p, srv, b"b")
        assert second.status == 200
        assert await second.read() == b"{}"
        second.close()
        assert srv.connections == 2
        assert len(srv.requests) == 3


async def test_a_fresh_connection_closed_before_the_answer_is_broken_not_retried() -> None:
    async def hang_up(
        srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await srv.read_request(reader)

    async with scripted(hang_up) as srv, pool() as p:
        with pytest.raises(UpstreamBroken, match="closed the connection"):
            await post(p, srv, b"a")
        assert srv.connections == 1


async def test_connect_refused_and_unparseable_addresses_are_connect_failures() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        async with pool() as p:
            with pytest.raises(ConnectFailed, match="Error"):
                await p.post(f"127.0.0.1:{port}", "/", headers={}, body=b"", connect_timeout_s=5)
            with pytest.raises(ConnectFailed, match="scheme"):
                await p.post("gopher://x:1", "/", headers={}, body=b"", connect_timeout_s=5)


async def test_chunked_interim_and_until_close_bodies() -> None:
    async def varied(srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n3\r\n 1\n\r\n0\r\n\r\n"
        )
        await writer.drain()
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nno length")
        await writer.drain()

    async with scripted(varied) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        assert resp.content_type == "text/event-stream"
        assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert await resp.read() == b"data: 1\n"
        resp.close()
        resp = await post(p, srv, b"b")
        assert (resp.status, resp.reason) == (500, "Oops")
        assert await resp.read() == b"no length"
        resp.close()
        assert srv.connections == 1


async def test_a_body_cut_short_raises_broken() -> None:
    async def cut(srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()

    async with scripted(cut) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        assert resp.content_type == "application/octet-stream"
        assert await resp.readany() == b"partial"
        with pytest.raises(UpstreamBroken):
            await resp.readany()
        resp.close()


def answer_then_wait(
    data: bytes,
) -> Callable[[ScriptedServer, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A script: read the request, write ``data``, then wait (without answering more) until the
    client's connection goes away, which sets the server's ``disconnected``."""

    async def script(srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        writer.write(data)
        await writer.drain()
        await reader.read()
        srv.disconnected.set()

    return script


async def test_malformed_response_is_broken() -> None:
    async with scripted(answer_then_wait(b"SPDY/9 what\r\n\r\n")) as srv, pool() as p:
        with pytest.raises(UpstreamBroken, match="malformed HTTP response"):
            await post(p, srv, b"a")


@pytest.mark.parametrize(
    ("start", "unit"),
    [
        pytest.param(b"HTTP/1.1 200 OK\r\n", b"X-Junk: " + b"a" * 1000 + b"\r\n", id="endless fields"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Junk: ", b"a" * 1024, id="one endless field"),
        pytest.param(b"", b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", id="endless interim responses"),
    ],
)
async def test_a_response_head_that_never_ends_is_broken_past_the_bound(start: bytes, unit: bytes) -> None:
    """A model server streaming a head that never completes: the request fails as soon as the head
    passes :data:`MAX_RESPONSE_HEAD_BYTES`, its connection aborted (before session s39 the gateway
    kept every byte - one endless field was concatenated whole inside httptools - and waited)."""
    sent = [0]

    async def endless(srv: ScriptedServer, reader: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        out.write(start)
        while sent[0] < 64 * MAX_RESPONSE_HEAD_BYTES:  # stops when the client aborts (ConnectionError)
            out.write(unit * 16)
            sent[0] += len(unit) * 16
            await out.drain()

    async with scripted(endless) as srv, pool() as p:
        with pytest.raises(UpstreamBroken, match="response head is larger than"):
            await asyncio.wait_for(post(p, srv, b"a"), timeout=10)
    assert sent[0] < 16 * MAX_RESPONSE_HEAD_BYTES  # the socket buffers' worth, not the whole


async def test_a_response_with_more_header_fields_than_the_bound_is_broken() -> None:
    """At most :data:`MAX_RESPONSE_FIELDS` fields (``Content-Type`` and ``Content-Length`` among
    them): one more and the request fails, its connection aborted; before session s40 thousands
    were taken and relayed to the client, whose HTTP library refused them."""
    answers: list[bytes] = []

    async def answer(srv: ScriptedServer, reader: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        out.write(answers[0])
        await out.drain()
        await reader.read()

    for extra, fails in ((MAX_RESPONSE_FIELDS - 2, False), (MAX_RESPONSE_FIELDS - 1, True)):
        answers[:] = [ok(b"{}", *(b"X-H%d: v\r\n" % i for i in range(extra)))]
        async with scripted(answer) as srv, pool() as p:
            if fails:
                with pytest.raises(UpstreamBroken, match=f"more than {MAX_RESPONSE_FIELDS} header fields"):
                    await post(p, srv, b"a")
            else:
                resp = await post(p, srv, b"a")
                assert len(resp.fields) == MAX_RESPONSE_FIELDS
                assert await resp.read() == b"{}"
                resp.close()


async def test_reading_pauses_above_the_high_water_mark_and_resumes() -> None:
    size = READ_HIGH_WATER * 4

    async def big(srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)
        await writer.drain()
        await reader.read()

    async with scripted(big) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        conn = resp._conn
        for _ in range(200):
            if conn.paused:
                break
            await asyncio.sleep(0.01)
        assert conn.paused
        assert conn.buffered <= READ_HIGH_WATER + 2**20
        got = 0
        while chunk := await resp.readany():
            got += len(chunk)
        assert got == size
        assert not conn.paused
        resp.close()


async def test_cancelling_a_response_aborts_its_connection() -> None:
    async def slow(srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await reader.read()  # returns when the client's connection goes away
        srv.disconnected.set()

    async with scripted(slow) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        reading = asyncio.ensure_future(resp.readany())
        await asyncio.sleep(0.05)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        resp.close()
        await asyncio.wait_for(srv.disconnected.wait(), timeout=10)
        assert not p._idle.get(parse_origin(f"127.0.0.1:{srv.port}"))


async def test_requests_wait_for_a_free_slot_at_the_connection_cap() -> None:
    async with scripted(keep_serving) as srv, pool(limit=1) as p:
        first = await post(p, srv, b"a")
        second = asyncio.ensure_future(post(p, srv, b"b"))
        await asyncio.sleep(0.05)
        assert not second.done()  # waiting for the slot, not failing
        await first.read()
        first.close()
        resp = await asyncio.wait_for(second, timeout=10)
        assert await resp.read() == b'{"n":2}'
        resp.close()
        assert srv.connections == 1


def test_on_uvloop_as_igw_serve_runs() -> None:
    async def scenario() -> list[bytes]:
        async with scripted(keep_serving) as srv, pool() as p:
            bodies = []
            for _ in range(2):
                resp = await post(p, srv, b"a")
                bodies.append(await resp.read())
                resp.close()
            assert srv.connections == 1
            return bodies

    assert uvloop.run(scenario()) == [b'{"n":1}', b'{"n":2}']


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_an_https_upstream_is_spoken_to_over_tls_and_reused_on_either_loop(loop: str) -> None:
    """The connection is an asyncio protocol by its methods, not a subclass (so that it compiles to a
    native class): the loops' TLS layers drive it like a plain transport, on asyncio and on uvloop
    (which ``igw serve`` runs), keep-alive reuse included."""
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)
    client_tls = ssl.create_default_context()
    ca.configure_trust(client_tls)

    async def scenario() -> tuple[list[bytes], int, bool]:
        srv = ScriptedServer(lambda reader, writer: keep_serving(srv, reader, writer))
        listener = await asyncio.start_server(srv._serve, "127.0.0.1", 0, ssl=server_tls)
        srv.port = listener.sockets[0].getsockname()[1]
        p = UpstreamPool(limit=8, ssl_context=client_tls)
        try:
            bodies = []
            for _ in range(2):
                resp = await p.post(
                    f"https://127.0.0.1:{srv.port}", "/", headers={}, body=b"a", connect_timeout_s=5
                )
                bodies.append(await resp.read())
                resp.close()
            plain_refused = False
            try:  # the same server without TLS: its answer is not HTTP, never taken for one
                await p.post(f"127.0.0.1:{srv.port}", "/", headers={}, body=b"a", connect_timeout_s=5)
            except (UpstreamBroken, ConnectFailed):
                plain_refused = True
            return bodies, srv.connections, plain_refused
        finally:
            await p.close()
            listener.close()
            await listener.wait_closed()

    run = uvloop.run if loop == "uvloop" else asyncio.run
    bodies, connections, plain_refused = run(scenario())
    assert bodies == [b'{"n":1}', b'{"n":2}']
    assert connections == 1  # one TLS connection for both requests (the plain one fails its handshake)
    assert plain_refused


async def test_readany_with_a_timeout_answers_none_when_nothing_arrived_then_the_data() -> None:
    async def pause_then_send(
        srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
        await writer.drain()
        await srv.disconnected.wait()  # until the test saw the timeout
        writer.write(b"hello")
        await writer.drain()
        await reader.read()

    async with scripted(pause_then_send) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        assert await resp.readany(0.05) is None
        srv.disconnected.set()
        assert await resp.readany(30) == b"hello"
        assert await resp.readany(30) == b""
        resp.close()


async def never_answer(
    srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await srv.read_request(reader)
    await reader.read()  # returns when the client's connection goes away
    srv.disconnected.set()


async def test_a_head_that_does_not_come_within_head_timeout_ends_the_connection() -> None:
    # streamIdleTimeout before a streamed response's head: the exchange passes it as head_timeout_s
    async with scripted(never_answer) as srv, pool(limit=1) as p:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await p.post(
                f"127.0.0.1:{srv.port}", "/", headers={}, body=b"a", connect_timeout_s=5, head_timeout_s=0.2
            )
        assert loop.time() - started >= 0.2
        await asyncio.wait_for(srv.disconnected.wait(), timeout=10)  # aborted, not pooled
        assert not p._idle.get(parse_origin(f"127.0.0.1:{srv.port}"))
        assert not p._slots.locked()  # the only slot was given back


async def test_waiting_for_a_free_slot_counts_against_head_timeout() -> None:
    async with scripted(keep_serving) as srv, pool(limit=1) as p:
        first = await post(p, srv, b"a")  # holds the only slot
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await p.post(
                f"127.0.0.1:{srv.port}", "/", headers={}, body=b"b", connect_timeout_s=5, head_timeout_s=0.1
            )
        assert loop.time() - started >= 0.1
        assert srv.requests == [srv.requests[0]]  # the second request was never sent
        await first.read()
        first.close()
        resp = await p.post(
            f"127.0.0.1:{srv.port}", "/", headers={}, body=b"c", connect_timeout_s=5, head_timeout_s=5
        )
        assert await resp.read() == b'{"n":2}'  # a head within the bound: answered as usual
        resp.close()


async def test_a_body_that_came_with_its_head_is_received_without_waiting_else_read() -> None:
    """``received`` hands over a complete body at once (the forward path's no-await read of a whole
    answer) and answers ``None`` while the body is still arriving, which ``read`` then waits for."""

    async def split(srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await srv.read_request(reader)
        writer.write(ok(b'{"whole":1}'))  # head and body in one write
        await writer.drain()
        await srv.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nab")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"cdef")
        await writer.drain()

    async with scripted(split) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        assert resp.received() == b'{"whole":1}'
        resp.close()
        resp = await post(p, srv, b"b")
        assert resp.received() is None
        assert await resp.read() == b"abcdef"
        resp.close()
        assert srv.connections == 1  # both complete: the connection was reused


async def trickle_stream(
    srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A stream's head, then one event every 50 ms until the client goes away."""
    await srv.read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        writer.write(b"b\r\ndata: tok\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)


async def sweep_until(p: UpstreamPool, done: Callable[[], bool], **bounds: object) -> dict[str, int]:
    """Run the stall sweep every 50 ms (the watchdog's timer, faster) until ``done``; what it ended."""
    ended: dict[str, int] = {}
    for _ in range(200):
        for reason, n in p.end_stalled(**bounds).items():  # type: ignore[arg-type]
            ended[reason] = ended.get(reason, 0) + n
        if done():
            return ended
        await asyncio.sleep(0.05)
    pytest.fail(f"the sweep did not finish: {ended}")


async def test_the_stall_sweep_ends_a_silent_request_to_an_unresponsive_endpoint_not_a_live_stream() -> None:
    """An endpoint declared unresponsive: the request whose connection is silent ends with
    UpstreamStalled (connection aborted), the one still receiving bytes is left alone; an endpoint
    not declared so keeps its silent request (a long non-streamed generation)."""
    async with (
        scripted(never_answer) as silent,
        scripted(never_answer) as healthy,
        scripted(trickle_stream) as streaming,
        pool() as p,
    ):
        keys = {name: f"127.0.0.1:{srv.port}" for name, srv in (("silent", silent), ("healthy", healthy))}
        stream_key = f"127.0.0.1:{streaming.port}"
        waits = {
            name: asyncio.create_task(p.post(key, "/", headers={}, body=b"{}", connect_timeout_s=5))
            for name, key in keys.items()
        }
        stream = await p.post(stream_key, "/", headers={}, body=b"{}", connect_timeout_s=5)
        await asyncio.sleep(0.1)
        unresponsive = {keys["silent"]: "declared so by the test", stream_key: "declared so by the test"}
        ended = await sweep_until(
            p, waits["silent"].done, response_timeout_s=None, unresponsive=unresponsive, silent_for_s=0.3
        )
        assert ended == {"unresponsive": 1}
        with pytest.raises(UpstreamStalled, match=r"stopped responding.*declared so by the test") as info:
            waits["silent"].result()
        assert info.value.reason == "unresponsive"
        # the log's message names the pod; what the client is told (a 504, a stream's last event) never
        assert keys["silent"] in str(info.value)
        assert info.value.public.startswith("the model server stopped responding (declared so by the test")
        assert "127.0.0.1" not in info.value.public
        await asyncio.wait_for(silent.disconnected.wait(), timeout=10)  # aborted: the pod sees it
        for _ in range(10):  # the stream keeps flowing through more sweeps than its silence bound
            assert p.end_stalled(response_timeout_s=None, unresponsive=unresponsive, silent_for_s=0.3) == {}
            assert await stream.readany(timeout_s=2)
            await asyncio.sleep(0.05)
        assert not waits["healthy"].done()
        waits["healthy"].cancel()
        stream.close()


async def test_the_stall_sweep_ends_a_request_without_a_response_head_past_the_response_timeout() -> None:
    async with scripted(never_answer) as srv, pool() as p:
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiting = asyncio.create_task(post(p, srv, b"{}"))
        ended = await sweep_until(p, waiting.done, response_timeout_s=0.3, unresponsive={}, silent_for_s=0.0)
        assert ended == {"response_timeout": 1}
        assert loop.time() - started >= 0.3
        with pytest.raises(UpstreamStalled, match=r"no response within 0\.3s") as info:
            waiting.result()
        assert info.value.reason == "response_timeout"
        await asyncio.wait_for(srv.disconnected.wait(), timeout=10)


async def test_the_stall_sweep_leaves_idle_pooled_connections_alone() -> None:
    async with scripted(keep_serving) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        await resp.read()
        resp.close()
        key = f"127.0.0.1:{srv.port}"
        for _ in range(3):
            assert p.end_stalled(response_timeout_s=0.0, unresponsive={key: "x"}, silent_for_s=0.0) == {}
            await asyncio.sleep(0.02)
        again = await post(p, srv, b"b")  # the idle connection was kept and is reused
        assert await again.read() == b'{"n":2}'
        again.close()
        assert srv.connections == 1


async def test_the_stall_sweep_ends_a_whole_answer_whose_body_stopped_not_a_silent_event_stream() -> None:
    # a whole (JSON) answer's head and the first byte of its body; an event stream's head alone
    whole_head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    stream_head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with (
        scripted(answer_then_wait(whole_head)) as stalled,
        scripted(answer_then_wait(stream_head)) as quiet,
        pool() as p,
    ):
        whole = await post(p, stalled, b"{}")
        stream = await post(p, quiet, b"{}")
        reading = asyncio.create_task(whole.read())
        ended = await sweep_until(p, reading.done, response_timeout_s=0.3, unresponsive={}, silent_for_s=0.0)
        assert ended == {"response_timeout": 1}  # the silent event stream is streamIdleTimeout's
        with pytest.raises(UpstreamStalled, match=r"stopped sending its response for 0\.3s"):
            reading.result()
        await asyncio.wait_for(stalled.disconnected.wait(), timeout=10)
        assert await stream.readany(timeout_s=0.05) is None  # still open, nothing ended it
        whole.close()
        stream.close()


async def test_the_first_body_bytes_reach_a_callback_in_their_read_and_are_still_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``on_first_bytes``: called once, inside the read that brought the body's first bytes (so a
    relay can write them to its client there), which ``readany`` then returns as usual; later bytes
    and a later response on the same connection do not call it."""

    async def head_then_two_parts(
        srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        for _ in range(2):
            await srv.read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            await writer.drain()
            await srv.disconnected.wait()
            srv.disconnected.clear()
            writer.write(b"5\r\nfirst\r\n")
            await writer.drain()
            await srv.disconnected.wait()
            srv.disconnected.clear()
            writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
            await writer.drain()

    reading: list[bool] = [False]
    received = _Connection.data_received

    def recorded(self: _Connection, data: bytes) -> None:
        reading[0] = True
        received(self, data)
        reading[0] = False

    monkeypatch.setattr(_Connection, "data_received", recorded)
    async with scripted(head_then_two_parts) as srv, pool() as p:
        resp = await post(p, srv, b"a")
        heard: list[tuple[bytes, bool]] = []
        resp.on_first_bytes(lambda data: heard.append((data, reading[0])))
        srv.disconnected.set()
        assert await resp.readany(30) == b"first"
        assert heard == [(b"first", True)]
        srv.disconnected.set()
        assert await resp.readany(30) == b"second"
        assert await resp.readany(30) == b""
        assert heard == [(b"first", True)]
        resp.close()
        again = await post(p, srv, b"b")  # the same pooled connection: the callback is gone
        srv.disconnected.set()
        assert await again.readany(30) == b"first"
        srv.disconnected.set()
        assert await again.read() == b"second"
        again.close()
        assert heard == [(b"first", True)]


class _CountSent:
    """Connect hooks that count the requests the pool has handed to a connection (``connect_done``
    follows ``send`` in ``post``)."""

    def __init__(self) -> None:
        self.handed = 0

    def connect_started(self) -> None:
        pass

    def connection_reused(self) -> None:
        pass

    def connect_done(self, error: str | None = None) -> None:
        self.handed += 1


class _Recording:
    """A transport that notes, at each write, how many requests had been handed over (uvloop's
    transports' methods cannot be replaced, so the connection gets this in front of its own)."""

    def __init__(self, real: asyncio.Transport, seen: list[int], hooks: _CountSent) -> None:
        self.real = real
        self.seen = seen
        self.hooks = hooks

    def write(self, data: bytes) -> None:
        self.seen.append(self.hooks.handed - 3)  # the warm-up's three are not counted
        self.real.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


async def _requests_handed_at_each_write() -> list[int]:
    """Three requests started in one loop turn on three pooled connections: how many of them had
    been handed to their connection when each write reached a transport."""
    hooks = _CountSent()
    async with scripted(keep_serving) as srv:
        p = UpstreamPool(limit=8, hooks=hooks)
        try:
            warm = await asyncio.gather(*(post(p, srv, b"w") for _ in range(3)))
            for resp in warm:
                await resp.read()
                resp.close()
            seen: list[int] = []
            for conn in p._open:
                assert conn.transport is not None
                conn.transport = cast(asyncio.Transport, _Recording(conn.transport, seen, hooks))
            answers = await asyncio.gather(*(post(p, srv, b"x") for _ in range(3)))
            for resp in answers:
                await resp.read()
                resp.close()
            assert srv.connections == 3
            return seen
        finally:
            await p.close()


async def test_requests_handed_over_in_one_loop_turn_are_written_together_after_it() -> None:
    """The backend wakes once for a turn's requests instead of once per request (round 18 in
    docs/gateway.md): every write of the turn happens after all three requests were handed over."""
    assert await _requests_handed_at_each_write() == [3, 3, 3]


def test_requests_of_one_turn_are_written_together_on_uvloop_too() -> None:
    assert uvloop.run(_requests_handed_at_each_write()) == [3, 3, 3]


async def test_a_connection_closed_or_aborted_before_the_turns_writes_is_not_written_to() -> None:
    """A queued request whose connection ended before the turn's end (aborted: its request was
    cancelled; marked closed: the server's EOF came, the request is retried elsewhere) is not written."""
    async with scripted(keep_serving) as srv, pool() as p:
        conn = await one_idle_connection(p, srv)
        conn.closed = True  # as eof_received marks it, the transport not yet closed
        p.queue_write(conn, b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n", b"y")
        await asyncio.sleep(0.05)
        assert len(srv.requests) == 1
        p.queue_write(conn, b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n", b"z")
        conn.abort()
        await asyncio.sleep(0.05)  # the queued write runs: nothing for the aborted connection, no error
        assert len(srv.requests) == 1


async def test_bytes_arriving_on_an_idle_pooled_connection_close_it_and_the_next_request_goes_fresh() -> None:
    """A model server that writes between responses (a stray partial answer, no request in flight):
    before session s39 the bytes were fed to the parser, and the next request sent on the connection
    had its own answer read as the junk's continuation (here: a malformed-response 502 for a request
    the model server answered correctly). An idle connection that receives data is closed and
    dropped from the pool."""

    async def junk_while_idle(
        srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if srv.connections > 1:
            await keep_serving(srv, reader, writer)
            return
        await srv.read_request(reader)
        writer.write(ok(b'{"n":1}'))
        await writer.drain()
        await pooled.wait()  # the client has put the connection back in its pool
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n{"junk":')  # unasked for, partial
        await writer.drain()
        await keep_serving(srv, reader, writer)  # were a request sent here, its answer would follow

    pooled = asyncio.Event()
    async with scripted(junk_while_idle) as srv, pool() as p:
        idle = await one_idle_connection(p, srv)
        pooled.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if idle.closed:
                break
        assert idle.closed
        assert not p._idle.get(parse_origin(f"127.0.0.1:{srv.port}"))  # dropped from the pool
        second = await post(p, srv, b"b")
        assert (second.status, await second.read()) == (200, b'{"n":2}')
        second.close()
        assert srv.connections == 2


async def test_bytes_after_a_complete_response_in_its_read_keep_the_connection_out_of_the_pool() -> None:
    """Junk written together with a response (after its end, no request for it) leaves the parser
    inside an unasked-for response: the connection is not pooled."""

    async def answer_and_junk(
        srv: ScriptedServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            await srv.read_request(reader)
            extra = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nju" if srv.connections == 1 else b""
            writer.write(ok(b'{"n":%d}' % len(srv.requests)) + extra)
            await writer.drain()

    async with scripted(answer_and_junk) as srv, pool() as p:
        first = await post(p, srv, b"a")
        assert await first.read() == b'{"n":1}'
        first.close()
        assert not p._idle.get(parse_origin(f"127.0.0.1:{srv.port}"))
        second = await post(p, srv, b"b")
        assert (second.status, await second.read()) == (200, b'{"n":2}')
        second.close()
        assert srv.connections == 2


@pytest.mark.parametrize("status", [b"000", b"099", b"600", b"999"])
async def test_a_status_outside_100_to_599_is_broken_at_once_not_waited_past(status: bytes) -> None:
    """Before session s39 a status below 100 was taken for an interim response (the request waited
    for the stall sweep, 11 s in the probe) and one above 599 was relayed as it came."""
    head = b"HTTP/1.1 " + status + b" X\r\nContent-Length: 2\r\n\r\n{}"
    async with scripted(answer_then_wait(head)) as srv, pool() as p:
        with pytest.raises(UpstreamBroken, match="outside 100-599"):
            await asyncio.wait_for(post(p, srv, b"a"), timeout=5)
        await asyncio.wait_for(srv.disconnected.wait(), timeout=5)  # the connection was ended
