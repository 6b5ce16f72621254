"""``read_limited`` over real HTTP: a body that arrived whole with its head (read without awaiting)
and one still arriving are both read completely, and both are held to the limit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from igw.gateway.request_body import BodyTooLarge, read_limited

LIMIT = 64


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    async def handler(request: web.Request) -> web.Response:
        try:
            body = await read_limited(request, limit=LIMIT)
        except BodyTooLarge:
            return web.Response(status=413, text="too large")
        return web.Response(body=b"got:" + body)

    app = web.Application()
    app.router.add_post("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def send(port: int, parts: list[bytes]) -> bytes:
    """Send ``parts`` (head first) with a pause between them; the whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i, part in enumerate(parts):
            if i:
                await asyncio.sleep(0.05)
            writer.write(part)
            await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
        await writer.wait_closed()


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


HEAD = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"


async def test_a_body_that_arrived_with_its_head_is_read_and_limited() -> None:
    async with echo_server() as port:
        assert (await send(port, [HEAD + chunked(b"x" * LIMIT)])).endswith(b"got:" + b"x" * LIMIT)
        answer = await send(port, [HEAD + chunked(b"x" * (LIMIT + 1))])
        assert answer.startswith(b"HTTP/1.1 413")


async def test_a_body_still_arriving_is_read_and_limited() -> None:
    async with echo_server() as port:
        assert (await send(port, [HEAD, chunked(b"y" * LIMIT)])).endswith(b"got:" + b"y" * LIMIT)
        answer = await send(port, [HEAD, chunked(b"y" * (LIMIT + 1))])
        assert answer.startswith(b"HTTP/1.1 413")
