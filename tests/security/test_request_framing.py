"""Ambiguous HTTP/1.1 framing is refused the same way by both server sides.

A gateway behind a load balancer must not accept a request whose length or target another HTTP
implementation could read differently (request smuggling / desync, RFC 9112 6.3 and 3.2): every such
head gets 400 ``bad_http_request`` with the OpenAI error shape and never reaches a model server. The
lean side (``igw.gateway.lean_server``) hands every head it does not serve to aiohttp; these cases pin
that it neither serves one of them itself nor fails on one (an ``Upgrade`` head once made llhttp raise
out of ``data_received``: no answer, an asyncio "Fatal error" logged per request).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest
from aiohttp import web
from aiohttp.web_protocol import MAX_MSG_QUEUE_SIZE

from igw.gateway.lean_server import _HEAD_LIMIT, SWITCH_ENV, LeanRequestHandler
from igw.gateway.request_body import MAX_CHUNK_EXTENSION_BYTES
from igw.gateway.serving import (
    CONNECTION_HANDLER_KEY,
    BodyLength,
    ChunkSizes,
    GatewayRequestHandler,
    ServerLimits,
    _request_end,
    serve_app,
)
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app, global_management_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.gateway.test_lean_server import lean_gateway
from tests.global_router.support import global_doc
from tests.reliability.test_http_errors import raw_exchange

DOC = config_doc([scheduler("llama", "m")])
BODY = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3})
N = len(BODY)
HEAD = "POST /v1/completions HTTP/1.1\r\n"
H = f"{HEAD}Host: g\r\n"
CL = f"Content-Length: {N}\r\n"
TE = "Transfer-Encoding: chunked\r\n"

REFUSED: dict[str, str] = {
    "Content-Length then Transfer-Encoding": f"{H}{CL}{TE}\r\n",
    "Transfer-Encoding then Content-Length": f"{H}{TE}{CL}\r\n",
    "two different Content-Lengths": f"{H}{CL}Content-Length: {N + 5}\r\n\r\n",
    "two equal Content-Lengths": f"{H}{CL}{CL}\r\n",
    "signed Content-Length": f"{H}Content-Length: +{N}\r\n\r\n",
    "Content-Length list": f"{H}Content-Length: {N}, {N}\r\n\r\n",
    "negative Content-Length": f"{H}Content-Length: -1\r\n\r\n",
    "Content-Length past 64 bits": f"{H}Content-Length: 99999999999999999999999\r\n\r\n",
    "space before the colon": f"{H}Content-Length : {N}\r\n\r\n",
    "obsolete line folding": f"{H}X-A: b\r\n c\r\nContent-Length: {N}\r\n\r\n",
    "bare LF line ends": f"POST /v1/completions HTTP/1.1\nHost: g\nContent-Length: {N}\n\n",
    "NUL in a header value": f"{H}X-A: b\x00c\r\nContent-Length: {N}\r\n\r\n",
    "unknown transfer coding": f"{H}Transfer-Encoding: xchunked\r\nContent-Length: {N}\r\n\r\n",
    "chunked not last": f"{H}Transfer-Encoding: chunked, identity\r\n\r\n",
    "no Host": f"{HEAD}Content-Length: {N}\r\n\r\n",
    "two Hosts": f"{HEAD}Host: a\r\nHost: b\r\nContent-Length: {N}\r\n\r\n",
    "CR inside the Host value": f"{HEAD}Host: g\revil\r\nContent-Length: {N}\r\n\r\n",
    "whitespace before the first field": f"{HEAD} Host: g\r\nContent-Length: {N}\r\n\r\n",
    "NUL in the target": f"POST /v1/completions\x00x HTTP/1.1\r\nHost: g\r\n{CL}\r\n",
    "chunk-size past 64 bits": f"{H}{TE}\r\nffffffffffffffffff\r\n",
    "chunk-size with 0x": f"{H}{TE}\r\n0x{N:x}\r\n",
    "CR/LF in a quoted chunk extension": f'{H}{TE}\r\n{N:x};a="b\r\nc"\r\n',
    "Content-Length in the trailer": f"{H}{TE}\r\n{N:x}\r\n{BODY.decode()}\r\n0\r\nContent-Length: 5\r\n\r\n",
}

NOT_FRAMING: dict[str, str] = {
    "space before the colon": "malformed HTTP request header",
    "obsolete line folding": "malformed HTTP request header",
    "bare LF line ends": "malformed HTTP request line",
    "NUL in a header value": "malformed HTTP request header",
    "no Host": "malformed HTTP request header",
    "two Hosts": "malformed HTTP request header",
    "CR inside the Host value": "malformed HTTP request header",
    "whitespace before the first field": "malformed HTTP request",
    "NUL in the target": "malformed HTTP request",
}
"""What the refusal says where it is not about the body's length (the others: framing). Before
session s37 a bare-LF head and a space before a colon were answered as framing errors: the parser's
message was matched with the request bytes it quotes, which held ``Content-Length``."""
FRAMING = "malformed HTTP request framing"


def _router_app(*, management_listener: bool = False) -> web.Application:
    """The global router of :func:`global_doc`, its heartbeats not read: what its listeners' framing
    tests serve."""
    return create_global_app(
        parse_global_config(global_doc()),
        rng=random.Random(1),
        read_heartbeats=False,
        management_listener=management_listener,
    )


@asynccontextmanager
async def _router_listeners() -> AsyncIterator[tuple[str, str]]:
    """:func:`_router_app` served on its listener and on its management listener: their URLs."""
    app = _router_app(management_listener=True)
    async with (
        serve_app(app, host="127.0.0.1", port=0) as router,
        serve_app(global_management_app(app), host="127.0.0.1", port=0) as management,
    ):
        yield router, management


@pytest.fixture(params=["lean", "aiohttp"])
def server_side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    side = str(request.param)
    monkeypatch.setenv(SWITCH_ENV, side)
    return side


async def test_ambiguous_framing_is_refused_and_never_forwarded(
    gateway: Callable[..., Any], server_side: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for name, head in REFUSED.items():
            status, headers, body = await raw_exchange(gw.url, head.encode() + BODY)
            assert status == 400, (server_side, name, body)
            error = orjson.loads(body)["error"]
            assert error["code"] == "bad_http_request", (server_side, name)
            assert error["message"].startswith(NOT_FRAMING.get(name, FRAMING)), (server_side, name, error)
            assert headers.get("x-request-id"), (server_side, name)
        assert pod.received == [], f"{server_side}: an ambiguous request reached the model server"
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]


async def test_an_unterminated_header_field_gets_431_at_once_on_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """httptools reports a header field to the lean side only once its line ends: before session s44
    a field that never ended was read and kept - twice, each read copying all of it again - until the
    head timeout (one connection's field held memory and the event loop, then got 408). Past
    ``_HEAD_LIMIT`` bytes the head goes to aiohttp's parser, which refuses the field with 431. The
    request is exactly one byte past the limit, so the read that hands it over is its last."""
    start = f"{H}X-Big: ".encode()
    request = start + b"a" * (_HEAD_LIMIT + 1 - len(start))
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        status, headers, body = await raw_exchange(gw.url, request)
        assert status == 431, (server_side, body[:200])  # 408 after the head timeout before s44
        assert orjson.loads(body)["error"]["code"] == "request_header_too_large"
        assert headers.get("x-request-id")
        assert pod.received == []


async def test_an_upgrade_request_is_served_as_plain_http_by_either_side(
    gateway: Callable[..., Any], server_side: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``Upgrade: h2c`` is ignored (RFC 9110 7.8 lets a server do so): one answer, one forward."""
    head = (
        f"{H}Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings, close\r\n"
        f"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: {N}\r\n\r\n"
    )
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        status, _headers, body = await raw_exchange(gw.url, head.encode() + BODY)
        assert status == 200, (server_side, body)
        assert len(pod.received) == 1
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]


async def read_until_closed(url: str, request: bytes, *, within_s: float = 30) -> bytes:
    """Send ``request`` on a fresh connection; every byte until the gateway closes it."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=within_s)
    finally:
        writer.close()


def post(target: str = "/v1/completions", *, version: str = "1.1", extra: str = "") -> bytes:
    return f"POST {target} HTTP/{version}\r\nHost: g\r\n{extra}{CL}\r\n".encode() + BODY


async def test_a_version_other_than_http_1_0_and_1_1_gets_505_on_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """Before session s39 ``HTTP/2.0`` (which llhttp accepts) was served as HTTP/1.1 and answered
    ``HTTP/2.0 200 OK``; ``HTTP/1.2`` and ``HTTP/3.0`` got a 400 saying the request line was malformed."""
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for version in ("2.0", "1.2", "3.0"):
            for request in (
                post(version=version),
                f"GET /v1/models HTTP/{version}\r\nHost: g\r\n\r\n".encode(),
            ):
                status, headers, body = await raw_exchange(gw.url, request)  # answered as HTTP/1.1
                assert status == 505, (server_side, request[:40], body)
                assert orjson.loads(body)["error"]["code"] == "http_version_not_supported"
                assert headers.get("x-request-id")
                assert headers.get("connection") == "close"
        assert pod.received == []


TARGETS_REFUSED = {
    "/v1/completions#frag": "fragment",
    "/v1/completions?a=1#frag": "fragment",
    "/v1/%63ompletions": "percent-encoded unreserved",
    "/v1/%2e%2e/v1/completions": "percent-encoded unreserved",
    "/%76%31/completions": "percent-encoded unreserved",
}


async def test_a_target_with_a_fragment_or_an_encoded_unreserved_character_is_refused_by_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """The route table read ``/v1/%63ompletions`` as ``/v1/completions`` and the model server was
    sent it as it came, and a fragment was forwarded as part of the target (before session s39): a
    target must mean one thing at both hops. An encoded query is the parameters' business: served."""
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for target, why in TARGETS_REFUSED.items():
            status, headers, body = await raw_exchange(gw.url, post(target))
            assert status == 400, (server_side, target, body)
            error = orjson.loads(body)["error"]
            assert error["code"] == "bad_http_request"
            assert why in error["message"], (target, error)
            assert headers.get("x-request-id")
        assert pod.received == []
        status, _, body = await raw_exchange(
            gw.url, post("/v1/completions?x=%63", extra="Connection: close\r\n")
        )
        assert status == 200, body
        assert len(pod.received) == 1


async def test_pipelined_requests_up_to_one_that_closes_the_connection_are_answered_by_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """aiohttp's parser refused the bytes after a ``Connection: close`` request in the same read, and
    the refusal took the requests before it along (before session s39: one 400 for a valid ``GET``,
    nothing else answered, nothing forwarded). The requests up to the closing one are answered, the
    connection then closes, the rest is never parsed nor forwarded."""
    get = b"GET /v1/models HTTP/1.1\r\nHost: g\r\n\r\n"
    close = "Connection: close\r\n"
    chunked_close = (
        f"POST /v1/completions HTTP/1.1\r\nHost: g\r\n{close}{TE}\r\n{N:x}\r\n".encode()
        + BODY
        + b"\r\n0\r\n\r\n"
    )
    cases = [
        (get + post() + post(extra=close) + post(), 3, 2),
        (get + chunked_close + post(), 2, 1),
        (b"GET /v1/models HTTP/1.0\r\n\r\n" + get + post(), 1, 0),  # HTTP/1.0 closes by default
        (get + post(extra=close) + b"\x00 not http at all\r\n\r\n", 2, 1),
    ]
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for request, answers, forwarded in cases:
            before = len(pod.received)
            data = await read_until_closed(gw.url, request)
            statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", data)
            assert statuses == [b"200"] * answers, (server_side, request[:60], data[-300:])
            assert len(pod.received) - before == forwarded


async def test_pipelined_requests_whose_bodies_say_close_keep_the_connection(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """A body that merely mentions ``close`` changes nothing: both answered, the connection kept."""
    body = orjson.dumps({"model": "m", "prompt": "close the door, Connection: close", "max_tokens": 3})
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(request + b"GET /v1/models HTTP/1.1\r\nHost: g\r\n\r\n" + request)
            await writer.drain()
            data = b""
            while len(re.findall(rb"HTTP/1\.1 200 ", data)) < 3:
                chunk = await asyncio.wait_for(reader.read(65536), timeout=30)
                assert chunk, (server_side, data[-300:])
                data += chunk
            assert b"connection: close" not in data.lower()
        finally:
            writer.close()
        assert len(pod.received) == 2


LIMIT = 64 * 1024
DECLARED_PAST_THE_LIMIT = {
    "one size past 64 bits' worth of the limit": [f"{H}{TE}\r\nffffffffffffffff\r\n"],
    "one size of 1 MiB": [f"{H}{TE}\r\n100000\r\n"],
    "sizes in all past the limit": [f"{H}{TE}\r\n8000\r\n" + "a" * 0x8000 + "\r\n8001;x=y\r\n"],
    "head and sizes in separate reads": [f"{H}{TE}\r\n", "10", "001\r\n", "partial"],
}


async def test_a_chunked_body_declaring_more_than_the_limit_gets_413_at_once_on_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """Neither parser tells a chunk's declared size: before session s44 a chunk-size line past
    ``maxRequestBodyBytes`` was answered only once the limit's worth of bytes came, so a client that
    sent ``ffffffffffffffff`` and nothing more held the handler until the body timeout (60 s, then
    408). The declared sizes are counted as their lines arrive: 413 with ``Connection: close`` at
    once, nothing forwarded; a body within the limit is still served."""
    doc = config_doc([scheduler("llama", "m")], bbr={"maxRequestBodyBytes": LIMIT})
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"llama": [pod.key]}) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        for name, reads in DECLARED_PAST_THE_LIMIT.items():
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                for part in reads:
                    writer.write(part.encode())
                    await writer.drain()
                    await asyncio.sleep(0.05)
                data = await asyncio.wait_for(reader.read(), timeout=5)  # the body timeout is 60 s
            finally:
                writer.close()
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 "), (server_side, name, data[:300])
            assert b"\r\nconnection: close" in head.lower(), (server_side, name, head)
            error = orjson.loads(body)["error"]
            assert error["code"] == "request_too_large", (server_side, name, error)
            assert f"({LIMIT} bytes)" in error["message"], error
        assert pod.received == [], f"{server_side}: a body past the limit reached the model server"
        within = f"{H}{TE}\r\n{N:x}\r\n".encode() + BODY + b"\r\n0\r\n\r\n"
        status, _, body = await raw_exchange(
            gw.url, within.replace(b"Host: g\r\n", b"Host: g\r\nConnection: close\r\n")
        )
        assert status == 200, (server_side, body)
        assert len(pod.received) == 1


@pytest.mark.parametrize(
    ("framing", "refused"),
    [
        (b"10001\r\n", True),
        (b"8000 ;a=b\r\n" + b"x" * 0x8000 + b"\r\n8001\r\n", True),
        (b"10000\r\n" + b"x" * 0x10000 + b"\r\n0\r\n\r\n", False),  # exactly the limit
        (b"0\r\nX-Trailer: fffffffff\r\n\r\n", False),  # the trailer section is not counted
        (b"ffffffffffffffffff\r\n", False),  # past 64 bits: the parser's 400, not a 413
        (b"0x10001\r\n", False),  # not a chunk size: the parser's 400
        (b"\r\n10001\r\n", False),
    ],
)
def test_chunk_sizes_refuse_only_a_declared_total_past_the_limit(framing: bytes, refused: bool) -> None:
    chunks = ChunkSizes(cast(Any, None), 0x10000)
    assert any(chunks.feed(framing[i : i + 1], 0) for i in range(len(framing))) is refused
    whole = ChunkSizes(cast(Any, None), 0x10000)
    assert whole.feed(framing, 0) is refused


EXTENSIONS_PAST_THE_BOUND = {
    "one chunk's extension": [f"{H}{TE}\r\n{N:x};a=" + "x" * MAX_CHUNK_EXTENSION_BYTES + "\r\n"],
    "across chunks and reads": [
        f"{H}{TE}\r\n",
        *[f"1;e{i}=" + "x" * 4000 + "\r\nx\r\n" for i in range(5)],
    ],
    "the last chunk's extension": [f"{H}{TE}\r\n0;a=" + "x" * MAX_CHUNK_EXTENSION_BYTES],
}


async def test_chunk_extensions_past_the_bound_get_413_at_once_on_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """Found by probing (session s47): both parsers skip chunk extensions without counting them, so a
    2-byte body could carry 256 MiB of them (1.5 s on loopback, answered 200), none counted against
    ``maxRequestBodyBytes`` - unmetered bytes on a held connection (Node.js's CVE-2024-22019). Past
    16 KiB in all they are refused as an over-limit body is: 413, ``Connection: close``."""
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for name, reads in EXTENSIONS_PAST_THE_BOUND.items():
            data = await read_in_steps(gw.url, reads)
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 "), (server_side, name, data[:300])
            assert b"\r\nconnection: close" in head.lower(), (server_side, name, head)
            error = orjson.loads(body)["error"]
            assert error["code"] == "request_too_large", (server_side, name, error)
            assert f"chunk extensions exceed {MAX_CHUNK_EXTENSION_BYTES} bytes" in error["message"], error
        assert pod.received == []
        within = f"{H}Connection: close\r\n{TE}\r\n{N:x};a=" + "x" * 1000 + "\r\n"
        status, _, body = await raw_exchange(gw.url, within.encode() + BODY + b"\r\n0\r\n\r\n")
        assert status == 200, (server_side, body)


async def test_chunk_extensions_past_the_bound_get_413_at_the_global_router() -> None:
    app = _router_app()
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        data = await read_in_steps(url, EXTENSIONS_PAST_THE_BOUND["one chunk's extension"])
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), data[:300]
    assert (
        f"chunk extensions exceed {MAX_CHUNK_EXTENSION_BYTES} bytes" in orjson.loads(body)["error"]["message"]
    )


async def read_in_steps(url: str, reads: list[str]) -> bytes:
    """Send ``reads`` one by one on a fresh connection; every byte until the server closes it."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for part in reads:
            writer.write(part.encode())
            await writer.drain()
            await asyncio.sleep(0.02)
        return await asyncio.wait_for(reader.read(), timeout=5)  # the body timeout is 60 s
    finally:
        writer.close()


def test_chunk_sizes_count_extensions_not_line_ends() -> None:
    """Thousands of small chunks (a CRLF each) are not extensions; their bytes past the sizes are."""
    small = b"1\r\nx\r\n" * (MAX_CHUNK_EXTENSION_BYTES + 10) + b"0\r\n\r\n"
    chunks = ChunkSizes(cast(Any, None), 1 << 30)
    assert chunks.feed(small, 0) is False
    assert chunks.done
    assert chunks.extensions == 0
    bound = b"1;" + b"e" * (MAX_CHUNK_EXTENSION_BYTES - 1) + b"\r\nx\r\n"
    at_the_bound = ChunkSizes(cast(Any, None), 1 << 30)
    assert any(at_the_bound.feed(bound[i : i + 1], 0) for i in range(len(bound))) is False
    past = ChunkSizes(cast(Any, None), 1 << 30)
    assert past.feed(bound + b"1;e", 0) is True


INVALID_HOSTS = ["evil/x?y", "a@evil", "a b", "a\tb", "[::1", "[::1]x", "a:b:c", "host:8a", "évil", "a%2"]
VALID_HOSTS = ["g", "gw.example.com:8080", "[::1]:8080", "10.0.0.1", "[v1.x]", "a_b%41.c", "", "host:99999"]
"""An empty Host is what RFC 9112 3.2 has a client send when the target URI has no authority, and the
port's range is not in the grammar (``*DIGIT``): both are valid values; the gateway reads neither."""


async def test_an_invalid_host_gets_400_on_either_side_and_a_valid_one_is_served(
    tmp_path: Path, server_side: str
) -> None:
    """RFC 9112 3.2: a server must answer 400 to a Host value that is not ``uri-host [":" port]``.
    Before session s44 both sides served ``Host: evil/x?y``, ``a@evil`` and ``a b`` (no Host on an
    HTTP/1.1 request, and two, were refused already: ``REFUSED`` above). A valid Host still takes the
    lean side's own path (``lean_requests``)."""
    async with running(FakeModelServer("a")) as (pod,), lean_gateway(tmp_path, pod.key) as (port, server):
        url = f"http://127.0.0.1:{port}"
        for host in INVALID_HOSTS:
            for request in (
                f"{HEAD}Host: {host}\r\n{CL}\r\n".encode() + BODY,
                f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(),
            ):
                status, headers, body = await raw_exchange(url, request)
                assert status == 400, (server_side, host, body)
                error = orjson.loads(body)["error"]
                assert error["code"] == "bad_http_request", (server_side, host)
                assert error["message"].startswith("invalid Host header value"), (server_side, host, error)
                assert host not in error["message"]
                assert headers.get("x-request-id")
                assert headers.get("connection") == "close"
        assert pod.received == [], f"{server_side}: a request with an invalid Host was forwarded"
        assert server.lean_requests == 0
        for host in VALID_HOSTS:
            request = f"{HEAD}Host: {host}\r\nConnection: close\r\n{CL}\r\n".encode() + BODY
            status, _, body = await raw_exchange(url, request)
            assert status == 200, (server_side, host, body)
        assert len(pod.received) == len(VALID_HOSTS)
        assert server.lean_requests == (len(VALID_HOSTS) if server_side == "lean" else 0)


@pytest.mark.parametrize(
    ("expect", "length", "status"),
    [("100-continue", LIMIT + 1, 413), ("100-continue", 10**10, 413), ("x-other", N, 417)],
)
async def test_an_expect_head_refused_is_answered_and_closed_without_reading_the_body(
    gateway: Callable[..., Any], server_side: str, expect: str, length: int, status: int
) -> None:
    """RFC 9110 10.1.1: a client sending ``Expect: 100-continue`` waits for ``100 Continue`` before
    its body. Refused (413 past ``maxRequestBodyBytes``, 417 for another expectation), the body never
    comes: before session s45 the connection then lingered 10 s (aiohttp's lingering close) reading
    and discarding whatever body arrived - a declared 10 GB for that long. Now it closes once
    answered: the client sees end-of-stream well inside the lingering time."""
    doc = config_doc([scheduler("llama", "m")], bbr={"maxRequestBodyBytes": LIMIT})
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"llama": [pod.key]}) as gw:
        head = f"{H}Expect: {expect}\r\nContent-Length: {length}\r\n\r\n".encode()
        data = await read_until_closed(gw.url, head, within_s=5)  # lingering was 10 s
        assert data.startswith(f"HTTP/1.1 {status} ".encode()), (server_side, data[:200])
        assert b"100 Continue" not in data
        assert b"\r\nconnection: close" in data.lower()
        assert pod.received == []


SPACED = b'{"model": "m",\r\n\r\n"prompt": "hi", "max_tokens": 3}'
"""A request body holding a blank line (JSON whitespace): not where a head ends."""
CHUNKED_BODY = f"{N:x}\r\n".encode() + BODY + b"\r\n0\r\n\r\n"
PIPELINED_FIRST = {
    "a Content-Length request": post(),
    "a chunked request": f"{H}{TE}\r\n".encode() + CHUNKED_BODY,
    "a chunked request with a trailer": f"{H}{TE}\r\n".encode() + CHUNKED_BODY[:-2] + b"X-T: 1\r\n\r\n",
    "a GET and a chunked body holding a blank line": b"GET /v1/models HTTP/1.1\r\nHost: g\r\n\r\n"
    + f"{H}{TE}\r\n{len(SPACED):x}\r\n".encode()
    + SPACED
    + b"\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("first", PIPELINED_FIRST)
async def test_a_pipelined_chunked_body_declaring_more_than_the_limit_gets_413_at_once_on_either_side(
    gateway: Callable[..., Any], server_side: str, first: str
) -> None:
    """A chunked request pipelined behind others in the same read has its declared sizes counted
    like one alone in its read: before session s45 only the latter was (the parser returns both
    requests from one read, and where the second's head ended was not worked out), so a second
    request declaring 1 MiB against 64 KiB held its handler until the body timeout. The requests
    before it are answered; a within-limit chunked request behind them is still served."""
    doc = config_doc([scheduler("llama", "m")], bbr={"maxRequestBodyBytes": LIMIT})
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"llama": [pod.key]}) as gw:
        before = PIPELINED_FIRST[first]
        answers = before.count(b"HTTP/1.1\r\n")
        data = await read_until_closed(gw.url, before + f"{H}{TE}\r\n100000\r\n".encode(), within_s=5)
        statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
        assert statuses == [b"200"] * answers + [b"413"], (server_side, data[-300:])
        forwarded = before.count(b"POST ")
        assert len(pod.received) == forwarded
        within = before + f"{H}Connection: close\r\n{TE}\r\n".encode() + CHUNKED_BODY
        data = await read_until_closed(gw.url, within, within_s=5)
        assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200"] * (answers + 1), (
            server_side,
            data[-300:],
        )
        assert len(pod.received) == 2 * forwarded + 1


@pytest.mark.parametrize(
    ("chunked", "length", "data", "end"),
    [
        (False, "3", b"abcNEXT", 3),
        (False, None, b"NEXT", 0),
        (False, "9", b"abc", -1),  # not all of it in the read
        (True, None, b"3\r\nabc\r\n0\r\n\r\nNEXT", 13),
        (True, None, b"3;e=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT", 25),
        (True, None, b"4\r\n\r\n\r\n\r\n0\r\n\r\nNEXT", 14),  # a blank line inside a chunk
        (True, None, b"3\r\nabcd\r\n0\r\n\r\n", -1),  # the data longer than its size
        (True, None, b"0x3\r\nabc\r\n0\r\n\r\n", -1),
        (True, None, b"3\r\nabc\r\n0\r\n", -1),  # the trailer section not ended yet
    ],
)
def test_request_end_walks_a_request_s_framing_or_gives_up(
    chunked: bool, length: str | None, data: bytes, end: int
) -> None:
    message = SimpleNamespace(chunked=chunked, headers={} if length is None else {"Content-Length": length})
    assert _request_end(data, 0, message) == end


async def send_split(url: str, request: bytes, at: int, *, within_s: float) -> bytes:
    """Send ``request`` on a fresh connection in two writes, cut at ``at``, the gateway reading the
    first before the second is sent (one event loop: the pause gives its read a turn); every byte
    until the gateway closes the connection (``b""`` past ``within_s``)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request[:at])
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(request[at:])
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=within_s)
    except TimeoutError:
        return b""
    finally:
        writer.close()


@pytest.mark.parametrize("first", ["a Content-Length request", "a chunked request with a trailer"])
async def test_a_chunked_body_declaring_more_than_the_limit_gets_413_at_every_split_of_a_pipelined_pair(
    gateway: Callable[..., Any], server_side: str, first: str
) -> None:
    """A pipelined pair sent in two reads, cut at every byte: the second request, chunked and
    declaring 1 MiB against 64 KiB, gets 413 at once wherever the cut falls. Before session s46 a
    cut inside the first request's body (the second's head arriving in the read that ended that
    body) left the second's declared sizes uncounted: its handler waited for the body timeout."""
    doc = config_doc([scheduler("llama", "m")], bbr={"maxRequestBodyBytes": LIMIT})
    pair = PIPELINED_FIRST[first] + f"{H}{TE}\r\n100000\r\n".encode()
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"llama": [pod.key]}) as gw:
        for at in range(1, len(pair)):
            data = await send_split(gw.url, pair, at, within_s=2)  # the body timeout is 60 s
            statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
            assert statuses == [b"200", b"413"], (server_side, first, at, data[-300:])
        assert len(pod.received) == len(pair) - 1


@pytest.mark.parametrize(
    ("framing", "end"),
    [
        (CHUNKED_BODY + b"NEXT", len(CHUNKED_BODY)),
        (CHUNKED_BODY[:-2] + b"X-T: 1\r\n\r\nNEXT", len(CHUNKED_BODY) + 8),
        (b"3;e=1\r\nabc\r\n0;e=2\r\nX-T: \r\n\r\nN", 28),
        (b"4\r\n\r\n\r\n\r\n0\r\n\r\nNEXT", 14),  # a blank line inside a chunk
        (b"3\r\nabc\r\n0\r\nX-T: 1\r\n", -1),  # the trailer section not ended yet
    ],
)
def test_chunk_sizes_say_where_a_body_ends_at_every_split(framing: bytes, end: int) -> None:
    """:attr:`ChunkSizes.end` is where the next request starts in the read that ended the body,
    however the body was split across reads; a ``Content-Length`` body's (:class:`BodyLength`) too."""
    for at in range(len(framing) + 1):
        chunks = ChunkSizes(cast(Any, None), LIMIT)
        assert not chunks.feed(framing[:at], 0)
        if chunks.done:
            assert chunks.end == end, at
            continue
        assert not chunks.feed(framing[at:], 0)
        assert (chunks.end if chunks.done else -1) == (end - at if end >= 0 else -1), at
    length = BodyLength(cast(Any, None), 5)
    assert not length.feed(b"POST abc", 5)
    assert not length.done
    assert not length.feed(b"deNEXT", 0)
    assert (length.done, length.end) == (True, 2)


MALFORMED = b"GARBAGE / HTTP/1.1\r\n\r\n"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def statuses_and_last_error(data: bytes) -> tuple[list[bytes], str]:
    """The statuses answered on a connection, and the error code of its last answer."""
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
    last = data.rpartition(b"\r\n\r\n")[2]
    return statuses, orjson.loads(last)["error"]["code"] if last.startswith(b"{") else ""


async def test_a_valid_request_before_a_malformed_one_is_answered_first_on_every_listener(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """A valid request and a malformed one behind it, sent in two reads cut at every byte (and in
    one): 200, then the 400 that closes the connection, and the request after it is never parsed.
    Before session s47 aiohttp's side (``/healthz`` is aiohttp's on the lean side too; the global
    router's and the management ports are aiohttp's alone) answered a single 400 whenever the valid
    request's head ended in the read holding the malformed bytes: the valid one was never handled."""
    pipeline = HEALTHZ + MALFORMED + HEALTHZ
    async with (
        running(FakeModelServer("a")) as (pod,),
        gateway(DOC, {"llama": [pod.key]}) as gw,
        _router_listeners() as (router, management),
    ):
        for url in (gw.url, router, management):
            for at in range(1, len(pipeline) + 1):
                data = await send_split(url, pipeline, at, within_s=5)
                assert statuses_and_last_error(data) == ([b"200", b"400"], "bad_http_request"), (
                    server_side,
                    url,
                    at,
                    data[-300:],
                )


PIPELINED_BEFORE_MALFORMED = {
    "a Content-Length request": post(),
    "a chunked request": PIPELINED_FIRST["a chunked request"],
    "a chunked request with a trailer": PIPELINED_FIRST["a chunked request with a trailer"],
}


@pytest.mark.parametrize("first", PIPELINED_BEFORE_MALFORMED)
async def test_a_post_before_a_malformed_request_reaches_the_pod_once_at_every_split(
    gateway: Callable[..., Any], server_side: str, first: str
) -> None:
    """A POST with its body, then a malformed request, then another POST: the first is forwarded
    exactly once and answered 200, the malformed one gets 400, the last is never parsed nor
    forwarded - wherever the bytes are cut (aiohttp's side lost the POST before session s47)."""
    pipeline = PIPELINED_BEFORE_MALFORMED[first] + MALFORMED + post()
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for at in range(1, len(pipeline) + 1):
            before = len(pod.received)
            data = await send_split(gw.url, pipeline, at, within_s=5)
            assert statuses_and_last_error(data) == ([b"200", b"400"], "bad_http_request"), (
                server_side,
                first,
                at,
                data[-300:],
            )
            assert len(pod.received) - before == 1, (server_side, first, at)


async def test_a_malformed_body_behind_a_valid_request_is_refused_alone(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """The malformed bytes inside a pipelined request's body (a chunk size that is not hex): the
    request before is answered, the one whose body is malformed gets the 400 and is never handed to
    a handler (nor forwarded), as when it comes alone."""
    bad_body = f"{H}{TE}\r\n".encode() + b"zz\r\n" + BODY + b"\r\n0\r\n\r\n"
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for pipeline in (HEALTHZ + bad_body, post() + bad_body + post()):
            before = len(pod.received)
            data = await read_until_closed(gw.url, pipeline, within_s=5)
            assert statuses_and_last_error(data) == ([b"200", b"400"], "bad_http_request"), (
                server_side,
                data[-300:],
            )
            assert len(pod.received) - before == (1 if pipeline.startswith(b"POST") else 0)


ENDS_IN_CRLF = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3}) + b"\r\n"
BLANK_LINES_FIRST = {
    "a Content-Length body ending in CR LF, then a blank line": (
        f"{H}Content-Length: {len(ENDS_IN_CRLF)}\r\n\r\n".encode() + ENDS_IN_CRLF + b"\r\n"
    ),
    "a chunked request, then two blank lines": f"{H}{TE}\r\n".encode() + CHUNKED_BODY + b"\r\n\r\n",
}


@pytest.mark.parametrize("first", BLANK_LINES_FIRST)
async def test_blank_lines_before_a_pipelined_request_line_are_not_taken_for_the_end_of_its_head(
    gateway: Callable[..., Any], server_side: str, first: str
) -> None:
    """A client may send blank lines before a request line (RFC 9112 2.2; llhttp skips them). Before
    session s47 the search for where a pipelined request's head ends took them, with the previous
    request's last bytes (a body ending in CR LF, a chunked body's end), for that head's blank line:
    the second request's chunk sizes were walked from its request line, never counted, and its 1 MiB
    against 64 KiB held the handler until the body timeout. Every split of the pair: 413 at once."""
    doc = config_doc([scheduler("llama", "m")], bbr={"maxRequestBodyBytes": LIMIT})
    pair = BLANK_LINES_FIRST[first] + f"{H}{TE}\r\n100000\r\n".encode()
    async with running(FakeModelServer("a")) as (pod,), gateway(doc, {"llama": [pod.key]}) as gw:
        late = []
        for at in range(1, len(pair)):
            data = await send_split(gw.url, pair, at, within_s=3)  # the body timeout is 60 s
            statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
            if statuses != [b"200", b"413"]:
                late.append((at, statuses))
                if len(late) == 5:
                    break
        assert late == [], (server_side, first, len(late), late[:5])
        assert len(pod.received) == len(pair) - 1


CLOSE_MENTIONED = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Note: do not close\r\n\r\n"


async def test_a_read_of_many_pipelined_requests_is_queued_32_at_a_time_and_each_answered_once(
    gateway: Callable[..., Any], server_side: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp parses at most 32 pipelined requests ahead of the one being answered (its parser stops,
    the socket pauses, the rest waits as bytes). The gateway feeds a read in steps (a malformed request
    must not take the valid ones before it along), and before session s47 parsed on past that bound:
    every request of a 256 KiB read (thousands of tiny ones) was queued at once. 1000 in one write,
    then a malformed one and one more: at most 32 queued at any time, the 1000 answered in order,
    then the 400, and the last one never parsed - also with requests held back when the queue filled
    (the 100 POSTs each forwarded once)."""
    queued: list[int] = []
    received = GatewayRequestHandler.data_received

    def counting(self: GatewayRequestHandler, data: bytes) -> None:
        received(self, data)
        queued.append(len(self._messages))

    monkeypatch.setattr(GatewayRequestHandler, "data_received", counting)
    app = _router_app()
    async with (
        running(FakeModelServer("a")) as (pod,),
        gateway(DOC, {"llama": [pod.key]}) as gw,
        serve_app(app, host="127.0.0.1", port=0) as router,
    ):
        for url, request, count in (
            (gw.url, HEALTHZ, 1000),
            (router, HEALTHZ, 1000),
            (gw.url, post(), 100),
            (gw.url, b"", 1000),  # a read that mentions close is fed in the steps that look for it
        ):
            before, queued[:] = len(pod.received), []
            pipeline = request * count if request else CLOSE_MENTIONED + HEALTHZ * (count - 1)
            data = await read_until_closed(url, pipeline + MALFORMED + HEALTHZ, within_s=30)
            assert statuses_and_last_error(data) == ([b"200"] * count + [b"400"], "bad_http_request"), (
                server_side,
                url,
                data[-300:],
            )
            assert max(queued) <= MAX_MSG_QUEUE_SIZE, (server_side, url, max(queued))
            assert len(pod.received) - before == (count if request.startswith(b"POST") else 0)


SLOW = b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_requests_behind_a_body_paused_for_flow_control_are_answered_before_the_400() -> None:
    """A request whose body nobody reads yet (the request before it still being answered) pauses the
    parser inside that body once its unread bytes pass the buffer's high-water mark: the parser keeps
    the rest of what it was given. Before session s48 the next step was fed to it anyway, and a valid
    request whose head it had kept came out of one call with the malformed one behind it: dropped
    with the raise (its answer lost, only the 400 sent). Each valid request is answered, in order,
    then the 400, for bodies from under the mark to several times it, on the listener the global
    router, its management port and non-lean routes share (:func:`serve_app`)."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.2)  # the next request's body arrives unread meanwhile
        return web.Response(text="slow")

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_route("*", "/healthz", ok)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        for size in (1000, 200_000, 400_000, 600_000, 800_000):
            for valid in (1, 2):
                head = f"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode()
                pipeline = SLOW + head + b"a" * size + HEALTHZ * valid + MALFORMED + HEALTHZ
                data = await read_until_closed(url, pipeline, within_s=10)
                assert statuses_and_last_error(data) == (
                    [b"200"] * (2 + valid) + [b"400"],
                    "bad_http_request",
                ), (
                    size,
                    valid,
                    data[-300:],
                )


CLOSING_MIDDLES = {
    "Connection: close": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"200"),
    "HTTP/1.0": (b"GET /healthz HTTP/1.0\r\n\r\n", b"200"),
    "a POST with Connection: close": (
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        b"405",
    ),
}


@pytest.mark.parametrize("middle", CLOSING_MIDDLES)
async def test_a_request_that_closes_mid_pipeline_is_the_last_answered_at_every_split(middle: str) -> None:
    """On the global router's and its management listener: a request that closes the connection in
    the middle of a pipelined read (``Connection: close``, HTTP/1.0 without keep-alive) is answered
    after the one before it, the connection then closes, and the requests behind it (a valid one,
    then bytes that are no request) are never answered - wherever the bytes are cut."""
    closing, status = CLOSING_MIDDLES[middle]
    pipeline = HEALTHZ + closing + HEALTHZ + MALFORMED
    async with _router_listeners() as (router, management):
        for url in (router, management):
            for at in range(1, len(pipeline) + 1):
                data = await send_split(url, pipeline, at, within_s=5)
                assert re.findall(rb"HTTP/1\.[01] (\d{3}) ", data) == [b"200", status], (url, at, data[-300:])


HEAD_TIMEOUT_S = 0.5


@pytest.mark.parametrize("handler", [GatewayRequestHandler, LeanRequestHandler])
@pytest.mark.parametrize("queued", [1, 5, MAX_MSG_QUEUE_SIZE + 8])
async def test_a_head_begun_behind_queued_requests_is_timed_from_its_first_bytes(
    handler: type[GatewayRequestHandler], queued: int
) -> None:
    """A request head that began in a read behind requests still queued or being answered started no
    head timer (none runs while a request is handled), and none started once they were answered:
    before session s49 a client that pipelined requests and stopped mid-way through the next head held
    the connection until the keep-alive timeout (60 s here), also with aiohttp's queue full (the
    head's bytes held unparsed). Now its timer counts from the read its first bytes came in: every
    queued request is answered, then the 408, and the connection closes - within a bound of a few
    head timeouts, however long the first request took (a slow one, taking most of the timeout)."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(HEAD_TIMEOUT_S / 2)
        return web.Response(text="slow")

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app[CONNECTION_HANDLER_KEY] = handler
    app.router.add_get("/slow", slow)
    app.router.add_get("/healthz", ok)
    limits = ServerLimits(header_timeout_s=HEAD_TIMEOUT_S, keepalive_timeout_s=60)
    async with serve_app(app, host="127.0.0.1", port=0, limits=limits) as url:
        pipeline = SLOW + HEALTHZ * (queued - 1) + b"GET /healthz HTTP/1.1\r\nHo"  # and nothing more
        data = await read_until_closed(url, pipeline, within_s=HEAD_TIMEOUT_S * 10)
    assert statuses_and_last_error(data) == ([b"200"] * queued + [b"408"], "request_timeout"), data[-300:]


def chunked(body: bytes) -> bytes:
    return f"{H}{TE}\r\n{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


async def test_a_chunked_body_behind_a_body_paused_for_flow_control_gets_413_at_once_on_either_side(
    gateway: Callable[..., Any], server_side: str
) -> None:
    """A body nobody reads yet (its request waits behind a slow one) pauses the parser once its unread
    bytes pass the buffer's high-water mark, and the rest of the read is held; the parser, resumed,
    returns the next request from the bytes it kept. Before session s49 the held bytes were then fed
    without their framing walked: a chunked request there whose chunk-size line declared more than
    ``maxRequestBodyBytes`` was not refused until that many bytes came (the client kept sending, or
    its handler waited for the body timeout). Bodies of several sizes, so that a read ends at each
    place around the pause: the third request gets its 413 at once after the two before it."""
    limit = 4 << 20
    doc = config_doc([scheduler("llama", "m")], bbr={"maxRequestBodyBytes": limit})
    async with (
        running(FakeModelServer("a", first_token_delay_s=0.2)) as (pod,),
        gateway(doc, {"llama": [pod.key]}) as gw,
    ):
        for size in range(0x60000, 0xE0000, 0x10000):
            paused = BODY[:-1] + b', "x": "' + b"a" * size + b'"}'
            declared = f"{H}{TE}\r\n{2 * limit:x}\r\n".encode()  # and nothing more: its body never comes
            data = await read_until_closed(gw.url, chunked(BODY) + chunked(paused) + declared, within_s=10)
            assert statuses_and_last_error(data) == ([b"200", b"200", b"413"], "request_too_large"), (
                server_side,
                hex(size),
                data[-300:],
            )
