"""A test's own aiohttp app served on a free loopback port: the upstreams, metrics pages and model
servers the tests script stand on this, so each one says only what it answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on ``127.0.0.1`` at a port the kernel picks; yields ``http://127.0.0.1:PORT`` and
    stops the server (its open connections closed) on exit."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
