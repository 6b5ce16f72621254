"""Run a gateway app on a socket, with the settings the data plane depends on.

``handler_cancellation=True`` is what makes a client disconnect cancel the request handler, which
closes the upstream connection immediately (even while waiting for the first token), so the model
server stops generating for nobody. aiohttp sets TCP_NODELAY on every connection it makes or accepts.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

from aiohttp import web


def _bound_port(site: web.TCPSite) -> int:
    server = site._server
    sockets = getattr(server, "sockets", None)
    if not sockets:
        raise RuntimeError("the gateway's listening socket is not open")
    port: int = sockets[0].getsockname()[1]
    return port


@contextlib.asynccontextmanager
async def serve_app(
    app: web.Application, *, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve ``app``; yields its base URL (port 0 picks a free port). Stops everything on exit."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, backlog=1024)
        await site.start()
        sock_port = _bound_port(site)
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://{host}:{sock_port}"
    finally:
        await runner.cleanup()
