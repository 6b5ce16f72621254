"""The lean HTTP/1.1 side (igw.gateway.lean_server) over real loopback connections: which requests it
serves itself, the handover of everything else to aiohttp at a request boundary (keep-alive and
pipelining included), and the ``IGW_HTTP_SERVER=aiohttp`` switch giving the same answers."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from aiohttp import web
from aiohttp.client_exceptions import ClientConnectionResetError
from multidict import CIMultiDict

from igw.gateway import serving, upstream
from igw.gateway.lean_server import (
    LEAN_ROUTES_KEY,
    SWITCH_ENV,
    LeanHandler,
    LeanRequest,
    LeanRequestHandler,
    LeanStreamWriter,
    ReceivedBody,
    UnsupportedStreamOperation,
)
from igw.gateway.observer import RequestObserver
from igw.gateway.request_body import read_limited
from igw.gateway.serving import GatewayRunner, GatewayServer, ServerLimits
from igw.gateway.shutdown import InflightRequests
from tests.compiled.tree import skip_compiled
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, connection, read_response, runner_gateway, scheduler, wait_for

DOC = config_doc([scheduler("llama", "m")])
BODY = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3})


def post(body: bytes = BODY, *, path: str = "/v1/completions", extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture(autouse=True)
def lean_side_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the lean side, whatever ``IGW_HTTP_SERVER`` the suite runs with."""
    monkeypatch.setenv(SWITCH_ENV, "lean")


@contextlib.asynccontextmanager
async def lean_gateway(tmp_path: Path, key: str) -> AsyncIterator[tuple[int, GatewayServer]]:
    """The gateway app on a :class:`GatewayRunner` (to read its server's ``lean_requests``)."""
    async with runner_gateway(tmp_path, key, doc=DOC) as (port, _, runner):
        server = runner.server
        assert isinstance(server, GatewayServer)
        yield port, server


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_a_completion_is_answered_alike_by_either_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post(extra="X-Request-Id: req-1\r\n"))
        status, headers, body = await read_response(reader)
        assert server.lean_requests == (1 if switch == "lean" else 0)
    assert status == 200
    assert headers["x-request-id"] == "req-1"
    assert headers["content-type"].startswith("application/json")
    assert int(headers["content-length"]) == len(body)
    assert "connection" not in headers  # kept alive
    assert orjson.loads(body)["choices"]
    sent = {k.lower(): v for k, v in a.received[-1].headers.items()}["x-request-id"]
    assert re.fullmatch(r"req-1-[0-9a-f]{16}", sent)  # the client's id, made unique for the engine


async def test_keep_alive_hands_over_at_the_next_other_request_and_stays_with_aiohttp(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post())
        assert (await read_response(reader))[0] == 200
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        status, _, body = await read_response(reader)
        assert (status, body) == (200, b"ok")
        writer.write(post(path="/v1/chat/completions", body=b'{"model": "m", "messages": 5}'))
        status, _, _ = await read_response(reader)
        assert server.lean_requests == 1  # the third request went to aiohttp with the connection
    assert status == 400  # invalid messages: the same handler's validation, reached through aiohttp


async def test_pipelined_requests_are_answered_in_order(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(
            post(extra="X-Request-Id: one\r\n")
            + post(extra="X-Request-Id: two\r\n")
            + b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
        )
        answers = [await read_response(reader) for _ in range(3)]
        assert server.lean_requests == 2
    assert [a[1].get("x-request-id") for a in answers[:2]] == ["one", "two"]
    assert [a[0] for a in answers] == [200, 200, 200]
    assert answers[2][2] == b"ok"


async def test_a_body_that_follows_its_head_later_is_read(tmp_path: Path) -> None:
    request = post()
    split = request.index(b"\r\n\r\n") + 4
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(request[:split])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(request[split:])
        status, _, _ = await read_response(reader)
        assert server.lean_requests == 1
    assert status == 200
    assert a.received[-1].body == BODY


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (
            b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
            + hex(len(BODY))[2:].encode()
            + b"\r\n"
            + BODY
            + b"\r\n0\r\n\r\n",
            200,
        ),
        (post(extra="Expect: 100-continue\r\n", body=b"x" * 10), 100),
        (
            b"POST /v1/completions HTTP/1.0\r\nContent-Length: "
            + str(len(BODY)).encode()
            + b"\r\n\r\n"
            + BODY,
            200,
        ),
        (b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nBad\x01Name: x\r\nContent-Length: 2\r\n\r\n{}", 400),
        (post(path="/v1/%63ompletions"), 400),  # refused since s39: serving.target_refusal
    ],
    ids=["chunked", "expect-continue", "http-1.0", "control-byte", "percent-encoded-path"],
)
async def test_requests_outside_the_lean_subset_are_served_by_aiohttp(
    tmp_path: Path, request_bytes: bytes, status: int
) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(request_bytes)
        if status == 100:
            line = await reader.readuntil(b"\r\n\r\n")
            assert line.startswith(b"HTTP/1.1 100")
        else:
            got, headers, body = await read_response(reader)
            assert got == status
            if status == 400:
                assert orjson.loads(body)["error"]["code"] == "bad_http_request"
                assert b"Bad" not in body
                assert headers["x-request-id"]
        assert server.lean_requests == 0


async def test_garbage_after_a_lean_request_gets_aiohttps_error_answer(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post() + b"\x00\x01 not http secret-token\r\n\r\n")
        first = await read_response(reader)
        status, _, body = await read_response(reader)
        assert server.lean_requests == 1
    assert first[0] == 200
    assert status == 400
    assert b"secret-token" not in body
    assert orjson.loads(body)["error"]["type"] == "invalid_request_error"


async def test_a_streamed_completion_is_relayed(tmp_path: Path) -> None:
    body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3, "stream": True})
    async with (
        running(FakeModelServer("a", tokens=3)) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post(body) + post())
        status, headers, events = await read_response(reader)
        second = await read_response(reader)
        assert server.lean_requests == 2
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert events.count(b"data: ") == 4  # three tokens, [DONE] (the usage chunk only when asked for)
    assert events.endswith(b"data: [DONE]\n\n")
    assert second[0] == 200


@pytest.mark.parametrize("connection_field", ["", "Connection: keep-alive\r\n"])
async def test_a_stream_to_an_http_10_client_ends_with_its_connection(
    tmp_path: Path, connection_field: str
) -> None:
    """HTTP/1.0 has no chunked framing: a stream's end is its connection's. aiohttp kept the
    connection of a client that asked for keep-alive open after the stream (before session s39),
    and the client waited for the body's end until the keep-alive timeout."""
    body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3, "stream": True})
    request = post(body, extra=connection_field).replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    async with (
        running(FakeModelServer("a", tokens=3)) as (a,),
        lean_gateway(tmp_path, a.key) as (port, _server),
        connection(port) as (reader, writer),
    ):
        writer.write(request)
        answer = await asyncio.wait_for(reader.read(), timeout=10)  # everything, to the close
    head, _, events = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 ")
    assert b"transfer-encoding" not in head.lower()
    assert events.endswith(b"data: [DONE]\n\n")


async def test_a_large_body_is_read_with_flow_control(tmp_path: Path) -> None:
    """A body larger than the reader's buffer pauses the socket until the handler reads it."""
    body = orjson.dumps({"model": "m", "prompt": "word " * 200_000, "max_tokens": 1})
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post(body))
        status, _, _ = await read_response(reader)
        assert server.lean_requests == 1
    assert status == 200
    assert a.received[-1].body == body


async def test_an_implausible_client_request_id_is_replaced_not_echoed(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post(extra="X-Request-Id: eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl\r\n"))
        status, headers, _ = await read_response(reader)
        assert server.lean_requests == 1
    assert status == 200
    assert "eyJ" not in headers["x-request-id"]
    assert {k.lower(): v for k, v in a.received[-1].headers.items()}["x-request-id"] == headers[
        "x-request-id"
    ]


@pytest.mark.parametrize("keep_alive", [True, False])
async def test_a_streamed_head_is_the_one_aiohttp_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_alive: bool
) -> None:
    """The lean side writes a relayed stream's head and chunked events itself: the same head fields
    and events as aiohttp's ``StreamResponse`` gives for the same stream, the head in the first write."""
    body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3, "stream": True})
    extra = "X-Request-Id: req-s\r\n" + ("" if keep_alive else "Connection: close\r\n")
    answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
    for switch in ("lean", "aiohttp"):
        monkeypatch.setenv(SWITCH_ENV, switch)
        async with (
            running(FakeModelServer("a", tokens=3)) as (a,),
            lean_gateway(tmp_path, a.key) as (port, server),
            connection(port) as (reader, writer),
        ):
            writer.write(post(body, extra=extra))
            answers[switch] = await read_response(reader)
            assert server.lean_requests == (1 if switch == "lean" else 0)
            if not keep_alive:  # the head said so, and the connection closes after the stream
                assert await reader.read() == b""
    lean, aio = answers["lean"], answers["aiohttp"]
    assert lean[0] == aio[0] == 200
    assert {k: v for k, v in lean[1].items() if k != "date"} == {
        k: v for k, v in aio[1].items() if k != "date"
    }
    assert lean[1]["transfer-encoding"] == "chunked"
    assert ("connection" in lean[1]) is not keep_alive
    assert lean[2] == aio[2]
    assert lean[2].count(b"data: ") == 4


class _Holder:
    """What :class:`LeanStreamWriter` reads of its connection handler."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self.transport: asyncio.WriteTransport | None = transport
        self.drains = 0

    async def _drain_helper(self) -> None:
        self.drains += 1


@skip_compiled(
    "igw.gateway.lean_server",
    "a stand-in transport holder passed through cast(Any, ...), which the native class checks",
)
async def test_the_stream_writer_frames_chunks_and_refuses_a_closed_connection() -> None:
    ours, theirs = socket.socketpair()
    reader, peer = await asyncio.open_connection(sock=theirs)
    _, writer = await asyncio.open_connection(sock=ours)
    holder = _Holder(writer.transport)
    stream = LeanStreamWriter(cast(Any, holder), b"HEAD\r\n\r\n")
    try:
        await stream.write(b"")  # nothing to send: the head stays back too
        await stream.write(b"data: a\n\n")
        await stream.write(memoryview(b"data: bb\n\n"))
        await stream.write_eof()
        await stream.write_eof()  # once only
        expected = b"HEAD\r\n\r\n9\r\ndata: a\n\n\r\na\r\ndata: bb\n\n\r\n0\r\n\r\n"
        assert await reader.readexactly(len(expected)) == expected
        assert stream.output_size == len(expected)
        assert holder.drains == 0
        big = LeanStreamWriter(cast(Any, holder), b"")
        await big.write(b"x" * 2**20)  # the peer is not reading: more than the socket takes
        assert holder.drains == 1  # waited for the client (aiohttp's drain) before going on
        closed = LeanStreamWriter(cast(Any, holder), b"")
        writer.close()
        with pytest.raises(ClientConnectionResetError):
            await closed.write(b"x")
        with pytest.raises(UnsupportedStreamOperation, match="not compressed"):
            closed.enable_compression()
        with pytest.raises(UnsupportedStreamOperation, match="given to its constructor"):
            await closed.write_headers("HTTP/1.1 200 OK", CIMultiDict())
    finally:
        writer.close()
        peer.close()
        with contextlib.suppress(ConnectionError):
            await peer.wait_closed()


@skip_compiled(
    "igw.gateway.observer",
    "RequestObserver.finish replaced by monkeypatch, which compiled callers do not look up",
)
@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_the_lean_side_records_a_forwarded_answer_after_writing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """Access log, request metrics and the trace's end wait until the answer is on its way (lean
    side); aiohttp's side records before returning the response, as before."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    events: list[str] = []
    finish = RequestObserver.finish

    def recording_finish(self: RequestObserver, response: web.StreamResponse) -> web.StreamResponse:
        events.append(f"finish {response.status}")
        return finish(self, response)

    made = serving.GatewayRequestHandler.connection_made

    def connection_made(self: serving.GatewayRequestHandler, transport: Any) -> None:
        write = transport.write

        def recorded_write(data: bytes) -> None:
            events.append("write")
            write(data)

        transport.write = recorded_write
        made(self, transport)

    monkeypatch.setattr(RequestObserver, "finish", recording_finish)
    monkeypatch.setattr(serving.GatewayRequestHandler, "connection_made", connection_made)
    async with (
        running(FakeModelServer("a")) as (a,),
        lean_gateway(tmp_path, a.key) as (port, _),
        connection(port) as (reader, writer),
    ):
        writer.write(post() + post())
        for _ in range(2):
            status, _, _ = await read_response(reader)
            assert status == 200
    expected = ["write", "finish 200"] if switch == "lean" else ["finish 200", "write"]
    assert events == expected * 2


@skip_compiled(
    "igw.gateway.lean_server", "a LeanRequest made with __new__ alone, which a native class refuses"
)
async def test_a_failing_after_response_callback_is_logged_and_the_rest_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[int] = []
    request = LeanRequest.__new__(LeanRequest)
    request._after = []

    def broken() -> None:
        raise RuntimeError("boom")

    request.after_response(broken)
    request.after_response(lambda: ran.append(1))
    with caplog.at_level("ERROR", logger="igw.gateway"):
        request.run_after_response()
    assert ran == [1]
    assert "after-response callback failed" in caplog.text
    request.run_after_response()  # each callback runs once
    assert ran == [1]


@skip_compiled(
    "igw.gateway.upstream",
    "upstream._carries_token replaced by monkeypatch; the compiled relay calls it directly",
)
async def test_a_handler_failing_inside_a_started_stream_closes_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An error after the stream's head went out cannot become a 500 (a second head inside the
    chunked body): the connection closes, the error is logged."""

    def broken(chunk: bytes) -> bool:
        raise RuntimeError("bug in the relay")

    monkeypatch.setattr(upstream, "_carries_token", broken)  # runs after the first event's write
    body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3, "stream": True})
    async with (
        running(FakeModelServer("a", tokens=3)) as (a,),
        lean_gateway(tmp_path, a.key) as (port, server),
        connection(port) as (reader, writer),
    ):
        writer.write(post(body))
        received = await asyncio.wait_for(reader.read(), timeout=10)  # until the gateway closes
        assert server.lean_requests == 1
    assert received.startswith(b"HTTP/1.1 200")
    assert b'"text":"tok0"' in received
    assert received.count(b"HTTP/1.1") == 1
    assert "unhandled error" in caplog.text


@contextlib.asynccontextmanager
async def body_recording_server(seen: list[tuple[str, bytes]]) -> AsyncIterator[int]:
    """A lean-side server whose one route records the type of the body it was given and the bytes
    it read from it."""

    async def record(request: web.Request) -> web.StreamResponse:
        raw = await read_limited(request, limit=2**20)
        seen.append((type(request.content).__name__, raw))
        return web.json_response({"read": len(raw)})

    app = web.Application(client_max_size=2**20)
    routes: dict[str, LeanHandler] = {"/v1/completions": record}
    app[LEAN_ROUTES_KEY] = routes
    app[serving.CONNECTION_HANDLER_KEY] = LeanRequestHandler
    runner = GatewayRunner(app, limits=ServerLimits(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_a_body_sent_with_its_head_is_handed_over_whole_and_one_sent_later_through_a_reader() -> None:
    seen: list[tuple[str, bytes]] = []
    late = post(b'{"prompt": "' + b"y" * 1000 + b'"}')
    split = late.index(b"\r\n\r\n") + 4 + 10  # the head and 10 body bytes, then the rest
    async with body_recording_server(seen) as port, connection(port) as (reader, writer):
        writer.write(post())  # one write: the body arrives with its head
        assert (await read_response(reader))[0] == 200
        writer.write(post(b""))
        assert (await read_response(reader))[0] == 200
        writer.write(late[:split])
        await writer.drain()
        await asyncio.sleep(0.05)  # the head and the first body bytes are read on their own
        writer.write(late[split:])
        assert (await read_response(reader))[0] == 200
        writer.write(post() + post(b"{}"))  # pipelined: each body whole, in order
        assert [(await read_response(reader))[0] for _ in range(2)] == [200, 200]
    assert seen == [
        ("ReceivedBody", BODY),
        ("ReceivedBody", b""),
        ("StreamReader", late[late.index(b"\r\n\r\n") + 4 :]),
        ("ReceivedBody", BODY),
        ("ReceivedBody", b"{}"),
    ]


def test_a_received_body_reads_like_a_finished_stream_reader() -> None:
    body = ReceivedBody(b"abcdef")
    assert body.is_eof()
    assert body.read_nowait(2) == b"ab"
    assert body.read_nowait(10) == b"cdef"
    assert body.read_nowait() == b""
    assert ReceivedBody(b"xyz").read_nowait() == b"xyz"


@skip_compiled(
    "igw.gateway.shutdown",
    "InflightRequests.enter replaced by monkeypatch, which the compiled class does not look up",
)
@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_the_inflight_registry_is_handed_the_handlers_task_on_the_lean_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """The lean request names the task running its handler, and the request path hands it to the
    in-flight registry (no ``asyncio.current_task`` per request); aiohttp's request names none (its
    ``task`` is its connection's), so the registry looks the calling task up there."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    calls: list[tuple[asyncio.Task[object] | None, asyncio.Task[object] | None]] = []
    enter = InflightRequests.enter

    def recording(
        self: InflightRequests, task: asyncio.Task[object] | None = None
    ) -> asyncio.Task[object] | None:
        calls.append((task, asyncio.current_task()))
        return enter(self, task)

    monkeypatch.setattr(InflightRequests, "enter", recording)
    async with (
        running(FakeModelServer("a", tokens=3)) as (a,),
        lean_gateway(tmp_path, a.key) as (port, _server),
        connection(port) as (reader, writer),
    ):
        for _ in range(2):
            writer.write(post())
            assert (await read_response(reader))[0] == 200
    assert len(calls) == 2
    for given, running_task in calls:
        assert running_task is not None
        assert given is (running_task if switch == "lean" else None)
    assert calls[0][1] is not calls[1][1]  # a task per request on either side


async def _pipelined_in_one_write(count: int) -> None:
    """``count`` small requests written at once on one connection to :func:`body_recording_server`:
    each answered 200, each body read whole, in order."""
    seen: list[tuple[str, bytes]] = []
    async with body_recording_server(seen) as port, connection(port) as (reader, writer):
        writer.write(b"".join(post(b'{"n": %d}' % i) for i in range(count)))  # one write
        assert [(await read_response(reader))[0] for _ in range(count)] == [200] * count
    assert seen == [("ReceivedBody", b'{"n": %d}' % i) for i in range(count)]  # each whole, in order


async def test_a_read_of_pipelined_requests_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request of a read holding many pipelined ones is parsed once: the parser stops at the
    end of the request it serves. Before session s48 it parsed on to the read's end, and the rest
    was parsed again behind each answer - N(N+1)/2 request lines for N requests (quadratic CPU)."""
    urls: list[bytes] = []
    on_url = LeanRequestHandler.on_url

    def counting_on_url(self: LeanRequestHandler, url: bytes) -> None:
        urls.append(url)
        on_url(self, url)

    monkeypatch.setattr(LeanRequestHandler, "on_url", counting_on_url)
    count = 200
    await _pipelined_in_one_write(count)
    assert len(urls) == count


async def test_the_rest_of_a_read_of_pipelined_requests_is_not_copied_per_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The requests pipelined behind the one being answered stay in one buffer, fed to the parser as
    it is and cut at the front: before session s48 the rest of the read was copied three times per
    answer (a new object fed each time), quadratic in the requests of a read."""
    fed: list[bytes | bytearray] = []  # held: an object's id is not reused while it is here
    feed = LeanRequestHandler._feed

    def recording_feed(self: LeanRequestHandler, data: bytes | bytearray) -> int:
        fed.append(data)
        return feed(self, data)

    monkeypatch.setattr(LeanRequestHandler, "_feed", recording_feed)
    count = 100
    await _pipelined_in_one_write(count)
    assert len(fed) >= count  # a feed per request at least
    # the socket's reads (a few: ~13 KB written at once), and the one buffer of the rest
    assert len({id(data) for data in fed}) < count // 4


async def test_more_pipelined_bytes_than_are_kept_pause_reading_and_are_all_answered() -> None:
    """Past the bytes the lean side keeps behind a request being answered, it pauses the socket's
    reading and resumes it as the kept requests are answered. Before session s48 it called aiohttp's
    ``pause_reading``, which pauses aiohttp's parser too and asserts a body in progress there: the
    assertion dropped the connection (``Fatal error: protocol.data_received() call failed``)."""
    seen: list[tuple[str, bytes]] = []
    count = 3000  # ~400 KB: more than one read, and past the 64 KiB kept
    async with body_recording_server(seen) as port, connection(port) as (reader, writer):
        writer.write(b"".join(post(b'{"n": %d}' % i) for i in range(count)))
        statuses = [(await asyncio.wait_for(read_response(reader), 10))[0] for _ in range(count)]
        assert statuses == [200] * count
        writer.write(post(b'{"n": -1}'))  # the connection still serves, on the lean side
        assert (await read_response(reader))[0] == 200
    assert seen == [("ReceivedBody", b'{"n": %d}' % i) for i in [*range(count), -1]]


async def test_a_handover_behind_paused_reading_resumes_it() -> None:
    """A request handed to aiohttp while the lean side has the socket's reading paused (its large
    body pipelined behind a lean request) resumes reading, and its body is read whole: aiohttp's side
    did not pause it (aiohttp 3.14 resumes reading as its queue drains anyway; earlier ones do not).
    Before session s48 the pause itself dropped the connection."""

    async def size(request: web.Request) -> web.StreamResponse:
        return web.json_response({"read": len(await request.read())})

    async def slow(request: web.Request) -> web.StreamResponse:
        transport = cast(LeanRequest, request)._protocol.transport
        assert transport is not None
        # answered once the bytes behind it arrived and reading paused
        await wait_for(lambda: not transport.is_reading(), what="reading paused")
        return web.json_response({})

    app = web.Application(client_max_size=2**21)
    routes: dict[str, LeanHandler] = {"/v1/completions": slow}
    app[LEAN_ROUTES_KEY] = routes
    app[serving.CONNECTION_HANDLER_KEY] = LeanRequestHandler
    app.router.add_post("/size", size)
    runner = GatewayRunner(app, limits=ServerLimits(), handler_cancellation=True, access_log=None)
    await runner.setup()
    large = b"x" * 2**20  # more than one read, and past the 64 KiB kept: reading pauses
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with connection(port) as (reader, writer):
            writer.write(post() + post(large, path="/size"))  # not a lean route: aiohttp's side
            answers = [await asyncio.wait_for(read_response(reader), 5) for _ in range(2)]
    finally:
        await runner.cleanup()
    assert [(status, orjson.loads(body)) for status, _, body in answers] == [
        (200, {}),
        (200, {"read": 2**20}),
    ]
