"""The global router's listener bounds slow clients the way a tier-1 gateway does (``ServerLimits``)."""

from __future__ import annotations

import asyncio
import random

import orjson

from igw.gateway.serving import ServerLimits, serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.global_router.support import global_doc, post_part_of_a_body


async def test_a_body_that_stalls_gets_408_and_the_connection_closed() -> None:
    """The body was read with no bound: a client that sent half of it held the connection forever. Now
    408 and ``Connection: close`` (aiohttp then lingers up to 10 s for the rest before closing)."""
    app = create_global_app(parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False)
    limits = ServerLimits(body_timeout_s=0.5)
    async with serve_app(app, host="127.0.0.1", port=0, limits=limits) as url:
        reader, writer, head = await post_part_of_a_body(url, announced=100, sent=b'{"model":')
        length = int(
            next(
                v
                for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                if k.lower() == b"content-length"
            )
        )
        body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
        writer.close()
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in head.lower()
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert "0.5s" in error["message"]
