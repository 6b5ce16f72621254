"""A request answered before its body was read: the rest of the body is not a request head.

aiohttp answers such a request (a 404, a refusal, a 408 for a body too slow), then reads and
discards the rest of the body for up to its lingering time, so that a client still sending sees
the answer instead of a reset. Before session s39 those bytes started the gateway's request-head
timer: ``headerTimeout`` later an unasked-for second answer (``408 request head not received``)
went into the connection and it was closed - a keep-alive connection cut long before
``keepAliveTimeout``, and a client sending its next request then got that 408 for it.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from igw.gateway.lean_server import LeanRequestHandler
from igw.gateway.serving import CONNECTION_HANDLER_KEY, GatewayRequestHandler, ServerLimits, serve_app
from tests.gateway.support import connection

HEADER_TIMEOUT_S = 0.3


async def _refuse_unread(request: web.Request) -> web.Response:
    """Answers without reading the body (as a refusal before the body is read does)."""
    return web.json_response({"error": "no"}, status=403)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
    fields = head.split(b"\r\n")
    length = next(int(f.split(b":", 1)[1]) for f in fields if f.lower().startswith(b"content-length:"))
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


@pytest.mark.parametrize("handler", [GatewayRequestHandler, LeanRequestHandler])
@pytest.mark.parametrize(
    ("framing", "first", "rest"),
    [
        pytest.param("Content-Length: 20\r\n", b"0123456789", b"0123456789", id="content-length"),
        pytest.param("Transfer-Encoding: chunked\r\n", b"a\r\n0123456789\r\n", b"0\r\n\r\n", id="chunked"),
    ],
)
async def test_the_rest_of_a_body_answered_early_gets_no_second_answer_and_keeps_the_connection(
    handler: type[GatewayRequestHandler], framing: str, first: bytes, rest: bytes
) -> None:
    app = web.Application()
    app[CONNECTION_HANDLER_KEY] = handler
    app.router.add_post("/refuse", _refuse_unread)
    app.router.add_get("/ok", _ok)
    limits = ServerLimits(header_timeout_s=HEADER_TIMEOUT_S, keepalive_timeout_s=30)
    async with serve_app(app, host="127.0.0.1", port=0, limits=limits) as url:
        port = int(url.rsplit(":", 1)[1])
        async with connection(port) as (reader, writer):
            writer.write(f"POST /refuse HTTP/1.1\r\nHost: gw\r\n{framing}\r\n".encode() + first)
            assert await _answer(reader) == (403, b'{"error": "no"}')
            await asyncio.sleep(HEADER_TIMEOUT_S / 3)
            writer.write(rest)  # the body's end, after the answer: aiohttp reads it and keeps the connection
            with pytest.raises(TimeoutError):  # nothing more is said, the connection stays open
                await asyncio.wait_for(reader.read(1), timeout=HEADER_TIMEOUT_S * 4)
            writer.write(b"GET /ok HTTP/1.1\r\nHost: gw\r\n\r\n")
            assert await _answer(reader) == (200, b"ok")
