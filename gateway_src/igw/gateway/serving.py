"""Run a gateway app on a socket, with the settings the data plane depends on.

``handler_cancellation=True`` is what makes a client disconnect cancel the request handler, which
closes the upstream connection immediately (even while waiting for the first token), so the model
server stops generating for nobody. aiohttp sets TCP_NODELAY on every connection it makes or accepts.

Request header limits are set here deliberately, not left to aiohttp's defaults:

- one header field (name + value) may be up to :data:`MAX_HEADER_FIELD_BYTES` (16 KiB), so a bearer
  token at the guard's own cap (``maxTokenBytes``, 8192 by default, plus ``Bearer ``) reaches the
  guard and larger-but-plausible ones get the guard's 401 rather than a parser error;
- at most :data:`MAX_HEADERS` header fields (Envoy's ``max_headers_count``);
- the request line (method + target) may be up to :data:`MAX_REQUEST_LINE_BYTES`.

A request over a header limit is answered **431 Request Header Fields Too Large** (a request line
over its limit **414 URI Too Long**) with an OpenAI-shaped body, logged once at INFO without the
offending bytes (they may be a token) - not aiohttp's plain-text 400 with an ERROR traceback.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from igw.gateway.errors import error_response

log = logging.getLogger("igw.gateway")

MAX_HEADER_FIELD_BYTES = 16384
"""Largest single request header field (name + value), in bytes."""
MAX_HEADERS = 100
"""Most request header fields (Envoy's default ``max_headers_count``)."""
MAX_REQUEST_LINE_BYTES = 8190
"""Largest request line (aiohttp's default; must differ from MAX_HEADER_FIELD_BYTES, see below)."""


def _oversize_status(exc: BaseException | None) -> tuple[int, str] | None:
    """(status, message) when ``exc`` is the HTTP parser refusing an over-limit request head.

    aiohttp raises :class:`LineTooLong` with the limit it hit as ``args[1]``; the request-line and
    header-field limits have distinct values, which tells the two apart.
    """
    if isinstance(exc, LineTooLong):
        limit = exc.args[1] if len(exc.args) > 1 else None
        if limit == MAX_REQUEST_LINE_BYTES:
            return 414, f"request line longer than {MAX_REQUEST_LINE_BYTES} bytes"
        return 431, f"a request header field is longer than {MAX_HEADER_FIELD_BYTES} bytes"
    if isinstance(exc, BadHttpMessage) and "too many headers" in str(exc).lower():
        return 431, f"more than {MAX_HEADERS} request header fields"
    return None


class _GatewayRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering over-limit request heads with 431/414."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        refused = _oversize_status(exc)
        if refused is None or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        code, text = refused
        log.info("refused a request from %s with %d: %s", request.remote, code, text)
        response = error_response(
            code, message=text, error_type="invalid_request_error", code="request_header_too_large"
        )
        response.force_close()
        return response


class _GatewayServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _GatewayRequestHandler(self, loop=self._loop, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """An :class:`~aiohttp.web.AppRunner` whose connections use :class:`_GatewayRequestHandler`.

    aiohttp has no public hook for the connection handler class; the server object the app builds
    is re-classed (it adds no state), and ``tests/gateway`` pins the behaviour over real HTTP so an
    aiohttp upgrade that breaks this fails a test rather than silently reverting to 400.
    """

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _GatewayServer
        return server


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
    runner = GatewayRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        max_field_size=MAX_HEADER_FIELD_BYTES,
        max_headers=MAX_HEADERS,
        max_line_size=MAX_REQUEST_LINE_BYTES,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, backlog=1024)
        await site.start()
        sock_port = _bound_port(site)
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://{host}:{sock_port}"
    finally:
        await runner.cleanup()
