"""Run a gateway app on a socket: connection limits, timeouts, HTTP-level errors, graceful stop.

``handler_cancellation=True`` is what makes a client disconnect cancel the request handler, which
closes the upstream connection immediately (even while waiting for the first token), so the model
server stops generating for nobody. aiohttp sets TCP_NODELAY on every connection it makes or accepts;
every accepted TCP connection gets keep-alive probes after 60 s of silence
(:data:`igw.gateway.tcp_keepalive.CLIENT`), which keep a long silent answer's flow open through an
NLB and end a connection whose client vanished.

:class:`ServerLimits` holds every client-side timeout and limit (``spec.extensions.serverLimits``,
overridden by ``igw serve`` options, see :mod:`igw.gateway.limits_config`; defaults are safe for an
internet-facing gateway behind a load balancer):

- a request head (request line + headers) must arrive within ``header_timeout_s`` of its first byte,
  and a request body within ``body_timeout_s``; a connection idle between requests is closed after
  ``keepalive_timeout_s`` (also the limit for a connection that never sends a byte);
- a client that stops reading its answer is cut off after ``send_timeout_s``: from the moment the
  answer's unsent bytes pass the transport's high-water mark (the socket buffers are full) until they
  drain again; the connection is aborted, which cancels the handler and so closes the upstream
  connection - the model server stops generating for a reader that is gone (nginx's
  ``send_timeout``; without it such a client held a model-server request and an upstream slot for as
  long as it kept the connection open);
- at most ``max_connections`` client connections are open, a TLS one counted from its accept (while
  its handshake runs: :mod:`igw.gateway.tls_accept`); at the limit, a new connection evicts the
  oldest one still in its TLS handshake, else the oldest that has no request in progress (an idle
  or stalled connection), else it is refused - so stalled clients cannot deny service to healthy ones;
- one header field (name + value) may be up to ``max_header_field_bytes`` (a bearer token at the
  guard's own cap of 8192 bytes reaches the guard, which answers 401), at most ``max_headers``
  fields, and a request line of up to :data:`MAX_REQUEST_LINE_BYTES`.

Connections are served by :class:`GatewayRequestHandler` (aiohttp's connection handler with the
behaviour below), or by the subclass an app names under :data:`CONNECTION_HANDLER_KEY` - the gateway's
app names :class:`igw.gateway.lean_server.LeanRequestHandler`, which serves plain inference requests
itself and hands everything else to this class's aiohttp handling.

aiohttp answers HTTP-parser errors (malformed request line, a control byte in a header, conflicting
``Content-Length``/``Transfer-Encoding``, over-limit heads) with a plain-text 400 that echoes the
offending bytes and logs a traceback. :class:`GatewayRequestHandler` replaces that: an OpenAI-shaped
error (400, 414 or 431; Anthropic-shaped when the request line named the Messages API, read where the
head began: :func:`request_target`) with an ``X-Request-Id``, a fixed message that never quotes the
request, and one warning line - the bytes at fault may be a credential. A ``br`` or ``zstd`` body,
which the parser refuses for want of a decoder, gets the 415 of any coding the gateway does not
decode. Two requests the parser accepts are
refused before any handler runs: a request line without an HTTP version (HTTP/0.9, which aiohttp
would answer as if it were a valid request) gets 400, and ``Expect: 100-continue`` with a
``Content-Length`` over ``bbr.maxRequestBodyBytes`` gets 413 instead of ``100 Continue`` (the client
never sends a body that would be refused anyway); any other ``Expect`` gets an OpenAI-shaped 417
(aiohttp's is plain text quoting the field). A version other than HTTP/1.0 and 1.1 (``HTTP/2.0``,
which aiohttp's parser accepts and answered as if it were 1.1) gets 505; a request target with a
fragment (``#``), or a path with a percent-encoded unreserved character (``/v1/%63ompletions``, which
the route table reads decoded while the target is forwarded as it came), gets 400: a target must mean
one thing to the gateway and to the model server (:func:`target_refusal`); so does a ``Host`` value
outside RFC 9112 3.2's grammar (:data:`HOST_SYNTAX`).

Pipelined requests: aiohttp's parser refuses bytes after a request that closes the connection
(``Connection: close``, or HTTP/1.0 without keep-alive) in the same read, and the refusal took the
requests before it along: one 400 for a valid first request, the others unanswered.
:class:`_StopAfterClose` feeds the parser so that it never sees those bytes: the requests up to
the closing one are answered, the connection then closes and the rest is ignored (RFC 9112 9.6).
Likewise a malformed request pipelined behind valid ones in one read: the parser's raise dropped the
requests it had parsed before it in that call (one 400, the valid ones never handled). A read in
which a request head ends before more bytes is fed in steps that each end after one head, so each
valid request comes out of a call of its own; they are answered in order, then the 400 closes the
connection and nothing after it is parsed (RFC 9112 9.3.2), as on the lean side.
The steps stop once aiohttp's queue holds :data:`~aiohttp.web_protocol.MAX_MSG_QUEUE_SIZE` parsed
requests; the rest of the read waits as bytes, with the socket paused, until half were answered.
Likewise once the parser pauses inside a body that is not read yet (past its buffer's high-water
mark): the rest of the read waits until aiohttp resumes the parser.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import os
import re
import resource
import socket
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import HttpVersion, HttpVersion10, HttpVersion11, web
from aiohttp.http_exceptions import (
    BadHttpMessage,
    BadHttpMethod,
    ContentEncodingError,
    HttpProcessingError,
    LineTooLong,
)
from aiohttp.http_parser import HttpParser
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import ERROR, MAX_MSG_QUEUE_SIZE, RequestHandler, RequestPayloadError, _ErrInfo
from aiohttp.web_request import BaseRequest
from yarl import URL

from igw.errors import IgwGatewayError
from igw.gateway.errors import REQUEST_ID_HEADER, anthropic_shaped, gateway_error
from igw.gateway.inference_apis import anthropic_path
from igw.gateway.request_body import (
    BODY_LIMIT_SETTING,
    DECODED_CONTENT_CODINGS,
    MAX_CHUNK_EXTENSION_BYTES,
    BodyTooLarge,
    ChunkExtensionsTooLarge,
    DeclaredBodyTooLarge,
    UnsupportedContentEncoding,
)
from igw.gateway.shutdown import InflightRequests
from igw.gateway.tcp_keepalive import CLIENT, probe_silent_peer
from igw.gateway.tls_accept import TlsHandshake

log = logging.getLogger("igw.gateway")

MAX_REQUEST_LINE_BYTES: Final = 8190
"""Largest request line (aiohttp's default; must differ from the header field limit, see below)."""
FD_RESERVE: Final = 256
"""File descriptors kept free of client connections (upstream, scrape, discovery, logs)."""
LINGER_S: Final = 2.0
"""Longest a plain-TCP connection the gateway closed keeps reading (and discarding) what its client
still sends, its write side closed already (:class:`LingeringClose`; Apache's per-read 2 s, here the
whole)."""
LINGER_BYTES: Final = 2**20
"""Most bytes read and discarded while a connection lingers: past them it is closed (a reset)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """Client-side timeouts and limits of the gateway's listener (see the module docstring)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    send_timeout_s: float = 60.0
    """Longest time an answer may wait for a client that reads none of it (nginx's default, 60 s)."""
    keepalive_timeout_s: float = 75.0
    max_connections: int = 10_000
    """Capped at start to the process's file-descriptor limit minus :data:`FD_RESERVE`."""
    max_headers: int = 100
    """Envoy's default ``max_headers_count``."""
    max_header_field_bytes: int = 16_384
    max_body_bytes_held: int = 0
    """Request-body bytes the process holds at once (:mod:`igw.gateway.body_budget`); 0: derived
    from the container's memory limit at start (256 MiB without one)."""
    drain_s: float = 5.0
    """After SIGTERM: seconds ``/readyz`` answers 503 while requests are still accepted and served."""
    stream_grace_s: float = 25.0
    """After the drain: seconds in-flight streams get to finish before they are ended with an SSE
    error event; the process exits within ``drain_s + stream_grace_s`` (plus a few seconds)."""

    def problems(self) -> list[str]:
        """Every invalid setting, named by its ``igw serve`` option."""
        out = []
        for option, value in (
            ("--header-timeout", self.header_timeout_s),
            ("--body-timeout", self.body_timeout_s),
            ("--send-timeout", self.send_timeout_s),
            ("--keepalive-timeout", self.keepalive_timeout_s),
        ):
            if not value > 0:
                out.append(f"{option}: must be greater than 0 (got {value:g})")
        if self.keepalive_timeout_s > 120:
            out.append(f"--keepalive-timeout: at most 120 seconds (got {self.keepalive_timeout_s:g})")
        if self.max_connections < 1:
            out.append(f"--max-connections: must be at least 1 (got {self.max_connections})")
        if self.max_headers < 1:
            out.append(f"--max-headers: must be at least 1 (got {self.max_headers})")
        if not 1024 <= self.max_header_field_bytes != MAX_REQUEST_LINE_BYTES:
            out.append(
                f"--max-header-bytes: at least 1024 and not {MAX_REQUEST_LINE_BYTES} "
                f"(got {self.max_header_field_bytes})"
            )
        if self.max_body_bytes_held < 0:
            out.append(f"--max-body-bytes-held: must not be negative (got {self.max_body_bytes_held})")
        if self.drain_s < 0 or self.stream_grace_s < 0:
            out.append("--drain-seconds / --stream-grace-seconds: must not be negative")
        return out


LIMITS_KEY = web.AppKey("igw_server_limits", ServerLimits)
INFLIGHT_KEY = web.AppKey("igw_inflight", InflightRequests)
BODY_LIMIT_SETTING_KEY = web.AppKey("igw_body_limit_setting", str)
"""The config field that sets the app's ``client_max_size``, as its 413s name it (default
:data:`~igw.gateway.request_body.BODY_LIMIT_SETTING`, tier 1's; the global router sets its own)."""


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; returns the (new) soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def effective_max_connections(limits: ServerLimits) -> int:
    """``limits.max_connections``, lowered to stay below the file-descriptor limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(1, min(limits.max_connections, soft - FD_RESERVE))


def _refusal(exc: BaseException | None, limits: ServerLimits) -> tuple[str, str]:
    """(error code, fixed message) for an HTTP-parser error; never quotes the request's bytes."""
    if "invalid http version" in _parser_reason(exc):  # HTTP/d.d, but not one llhttp knows (1.2, 3.0)
        return "http_version_not_supported", UNSUPPORTED_VERSION
    if isinstance(exc, LineTooLong):
        limit = exc.args[1] if len(exc.args) > 1 else None
        if limit == MAX_REQUEST_LINE_BYTES:
            return "request_line_too_long", f"request line longer than {MAX_REQUEST_LINE_BYTES} bytes"
        return (
            "request_header_too_large",
            f"a request header field is longer than {limits.max_header_field_bytes} bytes",
        )
    text = _parser_reason(exc)
    if isinstance(exc, BadHttpMessage) and "too many headers" in text:
        return "request_header_too_large", f"more than {limits.max_headers} request header fields"
    if isinstance(exc, BadHttpMethod):
        return "bad_http_request", "malformed or unsupported HTTP method"
    if "content-length" in text or "transfer-encoding" in text or "chunk" in text:
        return (
            "bad_http_request",
            "malformed HTTP request framing (invalid or conflicting Content-Length / Transfer-Encoding)",
        )
    if "status line" in text or "crlf" in text or "version" in text:
        return "bad_http_request", "malformed HTTP request line (or a line not ended by CRLF)"
    if "header" in text or "invalid character" in text or "whitespace" in text:
        return (
            "bad_http_request",
            "malformed HTTP request header (an invalid name or value, a control character, line "
            "folding, no Host, or a field repeated that may appear once)",
        )
    return "bad_http_request", "malformed HTTP request"


def _parser_reason(exc: BaseException | None) -> str:
    """The parser's reason for refusing a head, lower-cased, without the request's bytes that
    aiohttp quotes after it (a blank line apart): matched against those, a bare-LF head or a space
    before a colon read as a framing error because the quoted head held ``Content-Length``."""
    if exc is None:
        return ""
    message = getattr(exc, "message", None)
    text = message if isinstance(message, str) else str(exc)
    return text.split("\n\n", 1)[0].lower()


class GatewayRequestHandler(RequestHandler):
    """aiohttp's connection handler with the gateway's error responses, head and send timeouts and
    eviction."""

    # Attributes of our own: RequestHandler uses __slots__, so they are declared here.
    __slots__ = (
        "_head_began",
        "_head_target",
        "_head_timer",
        "_idle_close",
        "_last_body",
        "_limits",
        "_linger",
        "_max_connections",
        "_send_timer",
        "_socket",
    )

    def __init__(self, *args: object, limits: ServerLimits, max_connections: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        manager = args[0] if args else kwargs.get("manager")
        app = manager.app if isinstance(manager, GatewayServer) else None
        # Not kept in an attribute of its own: aiohttp drops ``_parser`` when the connection is lost,
        # which breaks the parser's reference back to this handler; a second reference would keep
        # handler, parser and wrapper in a cycle per connection (tests/gateway/test_garbage_cycles.py).
        self._parser = _StopAfterClose(self._parser, app=app)  # type: ignore[assignment]
        self._limits = limits
        self._max_connections = max_connections
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_began: float | None = None
        """When the bytes of a request head not yet complete began to arrive while requests before it
        were queued or being answered (no head timer runs then): its timer, started once they are
        answered, counts from then (:meth:`_time_queued_head`)."""
        self._send_timer: asyncio.TimerHandle | None = None
        self._last_body: StreamReader | None = None
        """The body of the last request aiohttp handled on this connection (:meth:`_lingering`)."""
        self._head_target = b""
        """The request target of the head arriving or last arrived (:func:`request_target`): the path
        of an answer to a head aiohttp could not parse (:meth:`api_path`)."""
        self._socket: Any = None
        """The connection's socket (a plain-TCP one: lingered on when the gateway closes it)."""
        self._linger = True
        """Whether a close the gateway makes lingers (:class:`LingeringClose`): not once the client
        half-closed, nor for a connection refused, evicted or aborted."""
        self._idle_close = False
        """Whether the gateway closes the connection for idleness (the keep-alive timeout): it lingers
        only if bytes are unread (:meth:`GatewayServer.linger`)."""

    # ---- connection limit ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:  # aiohttp turns keep-alive on with the kernel's 2-hour timing
            probe_silent_peer(sock, CLIENT)
            if transport.get_extra_info("ssl_object") is None:
                self._socket = sock
        manager = self._manager
        if isinstance(manager, GatewayServer) and not manager.admit(self):
            self.close_at_once()

    def discard_no_body(self) -> None:
        """The answer being written refuses the rest of its request's body: the connection closes once
        it is written, without aiohttp reading and discarding that body for its lingering time (10 s of
        a client's upload, parsed, before the client saw the close); the close itself lingers
        (:class:`LingeringClose`), so the client still reads the answer rather than a reset."""
        self._lingering_time = 0.0

    def close_at_once(self) -> None:
        """Close the connection without lingering (it is refused or evicted: its slot is needed)."""
        self._linger = False
        self.force_close()

    def eof_received(self) -> None:
        self._linger = False  # the client sends no more: nothing to wait for
        return super().eof_received()

    def _process_keepalive(self) -> None:
        """aiohttp's keep-alive timer; a close it makes is an idle one (:attr:`_idle_close`)."""
        closing = self._force_close
        super()._process_keepalive()
        if self._force_close and not closing:
            self._idle_close = True

    def evictable(self) -> bool:
        """No request is being handled on this connection (it is idle or still sending its head), and
        it is still open (one closed to make room for another stays counted until its end is seen)."""
        return not self._request_in_progress and not self._messages and self.transport is not None

    # ---- request-head timeout --------------------------------------------------------------------
    def start_head_timer(self, began: float | None = None) -> None:
        """Start the request-head timeout unless it runs already or a request is being handled; it
        counts from ``began`` (loop time: when the head's first bytes came) when given, else from now."""
        waiting_for_head = not self._request_in_progress and not self._messages
        if waiting_for_head and self._head_timer is None:
            delay = self._limits.header_timeout_s
            if began is not None:
                delay = max(delay - (self._loop.time() - began), 0.0)
            self._head_timer = self._loop.call_later(delay, self._head_timed_out)

    def _note_queued_head(self, arrived: float | None) -> None:
        """Keep when a head began arriving behind requests still queued or being answered (``arrived``:
        this read's time; ``None`` for the parser's own resumption, which brings no new bytes): the
        framing walk says whether the bytes after the last complete request begin one."""
        framing = self._parser
        if not isinstance(framing, _StopAfterClose) or not framing.head_begun():
            self._head_began = None  # none begun (or where it would start is not known)
        elif (
            self._head_began is None and arrived is not None and (self._messages or self._request_in_progress)
        ):
            self._head_began = arrived

    def _time_queued_head(self) -> None:
        """The requests queued before a head still arriving were answered: its timer starts, counted
        from its first bytes. Before session s49 none started until the client sent more: a client
        that pipelined a request and stopped mid-way through the next head held the connection until
        the keep-alive timeout."""
        began = self._head_began
        if began is None or self._messages:
            return  # (the last of the queued requests starts it)
        self._head_began = None
        framing = self._parser
        if self.transport is None or self._lingering():
            return  # (bytes after an unread body are read and discarded first: not a head yet)
        if isinstance(framing, _StopAfterClose) and framing.head_begun():
            self.start_head_timer(began)

    def _lingering(self) -> bool:
        """Whether the bytes arriving are the rest of an answered request's body, which aiohttp
        reads and discards for up to its lingering time (so that the client, still sending, sees
        the answer rather than a reset) - not a request head."""
        body = self._last_body
        if body is None or self._request_in_progress:
            return False
        if body.is_eof():
            self._last_body = None  # read to its end: nothing of it is kept
            return False
        return True

    def data_received(self, data: bytes) -> None:
        # The rest of a body answered early (a 404, a 413, a 408 for a slow body) is not a head:
        # it starts no head timer. Before session s39 it did, and the timer then wrote a second
        # answer, an unasked-for 408, into the connection and closed it - a keep-alive connection
        # ``headerTimeout`` after such a body ended. (A next head that begins in the read ending
        # that body starts its timer with its next read; the keep-alive timeout bounds it.)
        lingering = self._lingering()
        arrived = self._loop.time() if data and not lingering else None
        if data and not lingering and self._head_timer is None and self.evictable():
            self._head_target = request_target(data)  # a head begins: once per request, not per read
        super().data_received(data)
        self._note_queued_head(arrived)
        framing = self._parser
        if isinstance(framing, _StopAfterClose) and framing.refused is not None:
            self._refuse_declared_body(framing, framing.refused)
        if data and not lingering:
            self.start_head_timer()
        if self._head_timer is not None and (self._messages or self._request_in_progress):
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse_declared_body(self, framing: _StopAfterClose, body: StreamReader) -> None:
        """A chunked body declared more than the limit (:class:`ChunkSizes`): its reader ends with
        :class:`DeclaredBodyTooLarge` (the handler reading it answers 413 with ``Connection: close``),
        and the connection is not kept to read the rest (no lingering). A body whose handler has
        answered already (aiohttp reading it to discard it) ends the connection instead."""
        framing.refused = None
        limit = framing.limit
        if body is self._last_body and self._lingering():
            log.warning("closed a connection whose discarded chunked body declared more than %d bytes", limit)
            self.force_close()
            return
        self._lingering_time = 0.0
        if framing.refused_extensions:
            log.warning(
                "refused a chunked request body with over %d bytes of chunk extensions (413)",
                MAX_CHUNK_EXTENSION_BYTES,
            )
            body.set_exception(ChunkExtensionsTooLarge(limit))
            return
        log.warning("refused a chunked request body that declared more than %d bytes (413)", limit)
        body.set_exception(DeclaredBodyTooLarge(limit))

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._request_in_progress or self._messages or self.transport is None:
            return
        rid = uuid.uuid4().hex
        log.warning(
            "closed a connection whose request head did not arrive within %gs (request id %s)",
            self._limits.header_timeout_s,
            rid,
        )
        body = gateway_error(
            "request_timeout", f"request head not received within {self._limits.header_timeout_s:g}s"
        ).body
        assert isinstance(body, bytes)
        head = (
            "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{REQUEST_ID_HEADER}: {rid}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(Exception):
            self.transport.write(head.encode() + body)
        self.force_close()

    # ---- send timeout (a client that stops reading) ---------------------------------------------
    # The transport calls pause_writing when its unsent bytes pass the high-water mark and
    # resume_writing when they fall below the low-water mark: a timer only while paused, so the
    # answers of clients that read cost nothing here.
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self._loop.call_later(self._limits.send_timeout_s, self._send_timed_out)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        transport = self.transport
        if transport is None:
            return
        log.warning(
            "aborted a connection from %s whose client read none of its answer for %gs (send timeout)",
            transport.get_extra_info("peername"),
            self._limits.send_timeout_s,
        )
        # Nothing more can reach this client: abort (drop the unsent bytes) rather than close, which
        # would wait for them. connection_lost cancels the handler, which closes the upstream.
        self._linger = False
        transport.abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        for timer in (self._head_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._send_timer = None
        sock, self._socket = self._socket, None
        manager = self._manager
        if exc is None and self._linger and sock is not None and isinstance(manager, GatewayServer):
            manager.linger(sock, idle=self._idle_close)
        super().connection_lost(exc)

    # ---- requests refused before any handler runs -----------------------------------------------
    async def _handle_request(
        self,
        request: BaseRequest,
        start_time: float | None,
        request_handler: Callable[[BaseRequest], Awaitable[web.StreamResponse]],
    ) -> tuple[web.StreamResponse, bool]:
        manager = self._manager
        app = manager.app if isinstance(manager, GatewayServer) else None
        setting = BODY_LIMIT_SETTING if app is None else app.get(BODY_LIMIT_SETTING_KEY, BODY_LIMIT_SETTING)
        refusal = _refusal_before_handling(request, body_limit_setting=setting)
        if refusal is not None:
            request_handler = refusal
            if "Expect" in request.headers:
                # The client waits for ``100 Continue`` before it sends the body (RFC 9110 10.1.1):
                # none is coming, so the connection closes once answered rather than lingering to
                # read and discard a body (aiohttp's 10 s, which read a declared 10 GB body for that
                # long before session s45).
                self._lingering_time = 0.0
        self._last_body = request.content
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            self._time_queued_head()

    # ---- errors aiohttp answers itself -----------------------------------------------------------
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("the response had started: the connection is closed instead")
        rid = uuid.uuid4().hex
        param: str | None = None
        headers: dict[str, str] | None = None
        if (coding := _undecoded_coding(exc)) is not None:
            # aiohttp refuses the head itself (no decoder for br or zstd is installed): a 400
            # "malformed HTTP request" named nothing the client could change before session s39.
            refused = UnsupportedContentEncoding([coding])
            code, text, param = "unsupported_content_encoding", refused.message, refused.HEADER
            headers = {"Accept-Encoding": refused.accepted()}
            log.warning("refused a request from %s: 415 (request id %s): %s", request.remote, rid, text)
        elif isinstance(exc, HttpProcessingError) or (status == 400 and exc is None):
            code, text = _refusal(exc, self._limits)
            log.warning(
                "refused a malformed HTTP request from %s (request id %s): %s",
                request.remote,
                rid,
                text,
            )
        elif isinstance(exc, RequestPayloadError):
            # A body aiohttp cannot decode (broken chunked framing, corrupt gzip/deflate/br): a client
            # error. The rest of such a body is not drained (aiohttp would re-raise the same error
            # while lingering and log a traceback): the connection closes after this answer.
            code, text = "bad_http_request", "malformed request body (chunked framing or Content-Encoding)"
            log.warning("refused a malformed request body from %s (request id %s)", request.remote, rid)
            self._lingering_time = 0.0
        else:
            return handler_failure_response(status, exc, remote=request.remote, request=request)
        _answer_as_http11(request)
        error = gateway_error(code, text, param=param, request_id=rid, headers=headers)
        response = _in_the_api_s_shape(self.api_path(request), error, rid)
        response.force_close()
        return response

    def api_path(self, request: BaseRequest) -> str:
        """The path whose API shapes an error answer to ``request``: its own, or for aiohttp's
        stand-in for a head it could not parse (whose path is ``/``), the path of the request line
        this connection received last. Before session s39 such an answer on ``/v1/messages`` (a
        header over the limit, a body in ``br``) was OpenAI-shaped: the Anthropic SDK read no
        ``error.type``."""
        if request._message is not ERROR:  # (``Request.message``, public, is deprecated)
            return request.path
        target = self._head_target.decode("latin-1")
        if target.startswith("/"):
            return target
        with contextlib.suppress(ValueError):  # absolute form (RFC 9112 3.2.2): its path
            return URL(target).path
        return ""


_REQUEST_LINE: Final = re.compile(rb"(?:\r?\n)*[^ \r\n]+ ([^ \r\n?]+)")
"""A request line's method and target, the target's query left out (after any empty lines, which
a server ignores before a request line: RFC 9112 2.2)."""


def refuse_rest_of_body(request: web.BaseRequest) -> None:
    """``request``'s answer refuses its body unread (:meth:`GatewayRequestHandler.discard_no_body`):
    on aiohttp's side the connection closes once answered; the lean server's closes so already."""
    protocol = getattr(request, "protocol", None)
    if isinstance(protocol, GatewayRequestHandler):
        protocol.discard_no_body()


def request_target(head: bytes) -> bytes:
    """The request target, without its query, of the request line ``head`` begins with; empty
    when none shows in its first :data:`MAX_REQUEST_LINE_BYTES` bytes (the most aiohttp takes).

    Read once per request, where its head begins; only an answer to a head aiohttp could not parse
    uses it (:meth:`GatewayRequestHandler.api_path`)."""
    found = _REQUEST_LINE.match(head, 0, MAX_REQUEST_LINE_BYTES)
    return found[1] if found is not None else b""


_NAMED_CODING: Final = re.compile(r"\(([a-z0-9-]+)\)")
"""The coding a :class:`ContentEncodingError` names in parentheses: aiohttp's "Can not decode
content-encoding: brotli (br). Please install `Brotli`" (likewise zstandard (zstd))."""


def _undecoded_coding(exc: BaseException | None) -> str | None:
    """The ``Content-Encoding`` aiohttp refused a head for because it has no decoder for it
    (``br``, ``zstd``: packages the gateway image does not ship), else ``None`` - also for a body
    that failed to decode (a deflate stream cut short, named without parentheses): a malformed
    body, not an unsupported coding."""
    if not isinstance(exc, ContentEncodingError):
        return None
    found = _NAMED_CODING.search(_parser_reason(exc))
    if found is None or found[1] in DECODED_CONTENT_CODINGS:
        return None
    return found[1]


def handler_failure_response(
    status: int, exc: BaseException | None, *, remote: str | None, request: BaseRequest | None = None
) -> web.Response:
    """The answer to a request handler that timed out (``status`` 504) or raised: an OpenAI-shaped
    504 or 500 that closes the connection, logged with its request id (never the request's bytes)."""
    rid = uuid.uuid4().hex
    if status == 504:
        code, text = "route_timeout", "the request handler timed out"
        log.warning("request %s from %s: handler timed out", rid, remote)
    else:
        code, text = "internal_error", "internal error in the gateway"
        log.error("request %s from %s: unhandled error", rid, remote, exc_info=exc)
    if request is not None:
        _answer_as_http11(request)
    response = gateway_error(code, text, request_id=rid)
    response.force_close()
    return response


HOST_SYNTAX: Final = (
    r"(?:\[(?:[0-9A-Fa-f:.]+|v[0-9A-Fa-f]+\.[-A-Za-z0-9._~!$&'()*+,;=:]+)\]"
    r"|[-A-Za-z0-9._~!$&'()*+,;=]*(?:%[0-9A-Fa-f]{2}[-A-Za-z0-9._~!$&'()*+,;=]*)*)(?::[0-9]*)?"
)
"""A ``Host`` field value as RFC 9112 3.2 spells it: ``uri-host [ ":" port ]`` (RFC 3986 3.2.2-3.2.3:
an IP literal in brackets, IPv6 read loosely as hex digits, colons and dots, or an IPvFuture; or a
reg-name of unreserved characters, sub-delims and percent-escapes, possibly empty; a port of digits,
whose range the grammar leaves open). Anything else - ``evil/x?y``, ``a@evil``, ``a b``, ``[::1``,
``host:8a`` - is an invalid Host, which the RFC says a server must answer with 400. The gateway never
reads, logs or forwards the client's Host (the upstream request names the pod), so the check is the
RFC's rather than a defence of the gateway's own routing: a request whose authority each hop may read
differently is refused, not served as if it meant one thing. Matched in full by both server sides
(:data:`VALID_HOST`, and the lean side's bytes form); the reg-name's escapes are an unrolled loop, so
a plain name is one run of one character class."""
VALID_HOST: Final = re.compile(HOST_SYNTAX)
INVALID_HOST: Final = (
    "invalid Host header value (RFC 9112 3.2: a host name or IP literal, and an optional port)"
)

HTTP09: Final = HttpVersion(0, 9)
"""What aiohttp's parser reports for a request line that has no ``HTTP/x.y`` part."""
UNSUPPORTED_VERSION: Final = "HTTP version not supported: the gateway speaks HTTP/1.1 (and HTTP/1.0)"

_UNRESERVED_ESCAPE: Final = re.compile(r"%(?:3[0-9]|[46][1-9a-f]|[57][0-9a]|2[de]|5f|7e)", re.IGNORECASE)
"""A percent-encoded unreserved character (RFC 3986 2.3: ALPHA, DIGIT, ``-._~``): equivalent to the
character itself, so two readers of the path may disagree on it (no URI producer should make one)."""


CONNECT_REFUSED: Final = "CONNECT asks for a tunnel: the gateway is no forward proxy"
"""The 400 to a ``CONNECT`` (RFC 9110 9.3.6, authority-form target): refused on every listener, as an
absolute-form target naming another scheme is (:func:`_absolute_form_refusal`), the connection closed."""


_ABSOLUTE_FORM: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)")
"""An absolute-form request target's scheme and authority (RFC 9112 3.2.2, RFC 3986 3)."""


def _absolute_form_refusal(target: str) -> str | None:
    """Why absolute-form target ``target`` is refused, else ``None``.

    RFC 9112 3.2.2: a server must accept the absolute form, and the target's authority, not the
    ``Host`` field, names the request's host (aiohttp's ``request.host`` and ``request.url`` take it
    from the target; the gateway routes by path alone and never forwards or logs the client's
    authority, the upstream request naming the pod). So the target's authority must be one the gateway
    can take as that: an ``http``/``https`` URI (another scheme asks for a forward proxy, which the
    gateway is not), a valid host (:data:`VALID_HOST`, as a ``Host`` field must be), and no user-info
    (RFC 9110 4.2.4: a recipient should treat it as an error; a credential in it would otherwise ride
    along). Before session s46 ``POST ftp://user:pw@evil/v1/completions`` was served as
    ``/v1/completions``. A target the regex does not match is aiohttp's to refuse (``http:///x``)."""
    found = _ABSOLUTE_FORM.match(target)
    if found is None:
        return None
    scheme, authority = found.groups()
    if scheme.lower() not in ("http", "https"):
        return "an absolute request target must be an http or https URI (the gateway is no forward proxy)"
    if "@" in authority:
        return "an absolute request target must not carry user information ('user@host')"
    if not authority or VALID_HOST.fullmatch(authority) is None:
        return "invalid authority in the absolute request target (a host or IP literal, and an optional port)"
    return None


def target_refusal(target: str) -> str | None:
    """Why request target ``target`` (as it came) is refused, else ``None``.

    The gateway routes on the path as aiohttp decodes it and forwards the target as it came: a
    fragment (RFC 9112 3.2: a client must not send one) went to the model server as part of the
    path, and ``/v1/%63ompletions`` was routed as ``/v1/completions`` while the model server was
    handed the encoded form, which another reader (a proxy in front, a model server's own router)
    may not decode. Refused rather than rewritten: the forwarded target stays byte for byte what
    the client sent and what every hop in front of the gateway saw. Only the path is checked; a
    query's encoding is its parameters' business. The lean side hands such targets to aiohttp
    (:mod:`igw.gateway.lean_server`), so this one check covers both server sides."""
    if "#" in target:
        return "a request target must not carry a fragment ('#')"
    if not target.startswith("/") and (why := _absolute_form_refusal(target)) is not None:
        return why
    path = target.partition("?")[0]
    if "%" in path and _UNRESERVED_ESCAPE.search(path) is not None:
        return "a percent-encoded unreserved character (ALPHA, DIGIT, '-', '.', '_', '~') in the request path"
    return None


def _refusal_before_handling(
    request: BaseRequest, *, body_limit_setting: str = BODY_LIMIT_SETTING
) -> Callable[[BaseRequest], Awaitable[web.StreamResponse]] | None:
    """A handler answering a request the gateway refuses from its head alone, else ``None``.
    ``body_limit_setting``: the config field a 413 names (:data:`BODY_LIMIT_SETTING_KEY`)."""
    if request.version == HTTP09:
        code, text, status = "bad_http_request", "request line without an HTTP version (HTTP/0.9)", 400
    elif request.version != HttpVersion11 and request.version != HttpVersion10:
        code, text, status = "http_version_not_supported", UNSUPPORTED_VERSION, 505
    elif request.method == "CONNECT":
        # (answered 404 "CONNECT : Not Found" before session s47: the authority-form target has no path)
        code, text, status = "bad_http_request", CONNECT_REFUSED, 400
    elif (why := target_refusal(request.raw_path)) is not None:
        code, text, status = "bad_http_request", why, 400
    elif (host := request.headers.get("Host")) is not None and VALID_HOST.fullmatch(host) is None:
        # (no Host on HTTP/1.1, or two, is refused by aiohttp's parser before this)
        code, text, status = "bad_http_request", INVALID_HOST, 400
    elif (codings := _transfer_codings(request)) is not None and (
        codings != ["chunked"] or request.version < HttpVersion11
    ):
        code, text, status = _transfer_coding_refusal(request, codings)
    elif (expect := request.headers.get("Expect")) is not None and expect.lower() != "100-continue":
        # aiohttp's own answer is a plain-text 417 that quotes the field ("Unknown Expect: ...").
        code, text, status = "expectation_failed", "Expect: only 100-continue is supported", 417
    elif (
        expect is not None
        and request.content_length is not None
        and request.content_length > request.client_max_size
    ):
        code, text, status = (
            "request_too_large",
            str(BodyTooLarge(request.client_max_size, setting=body_limit_setting)),
            413,
        )
    else:
        return None

    async def refuse(request: BaseRequest) -> web.StreamResponse:
        rid = uuid.uuid4().hex
        log.warning("refused a request from %s: %d (request id %s): %s", request.remote, status, rid, text)
        _answer_as_http11(request)
        response = _in_the_api_s_shape(request.path, gateway_error(code, text, request_id=rid), rid)
        response.force_close()  # the body (if any) is not read: the connection cannot be reused
        return response

    return refuse


def _in_the_api_s_shape(path: str, response: web.Response, request_id: str) -> web.StreamResponse:
    """``response`` in the Anthropic error shape when the request was for the Messages API (``path``,
    as the app's own errors there are, :func:`igw.gateway.errors.anthropic_shaped`), else as it is."""
    if anthropic_path(path):
        return anthropic_shaped(response, request_id=request_id)
    return response


def _transfer_codings(request: BaseRequest) -> list[str] | None:
    """The request's transfer codings in order (``None`` without ``Transfer-Encoding``). Read by
    iterating: aiohttp's stand-in for a head it could not parse carries a plain ``dict``."""
    values = [value for name, value in request.headers.items() if name.lower() == "transfer-encoding"]
    if not values:
        return None
    return [c.strip().lower() for value in values for c in value.split(",") if c.strip()]


def _transfer_coding_refusal(request: BaseRequest, codings: list[str]) -> tuple[str, str, int]:
    """Why a request whose ``Transfer-Encoding`` is not ``chunked`` alone is refused (RFC 9112 6.1).

    aiohttp's parser refused ``chunked`` followed by another coding, but read ``identity, chunked``
    (identity is no longer a registered coding) and ``gzip, chunked`` as chunked, and took a
    ``Transfer-Encoding`` on an HTTP/1.0 request, whose framing the RFC says to treat as faulty:
    where a proxy in front reads such a head another way, the two disagree on where a request
    ends. Refused before the body is read, the connection closed."""
    if request.version < HttpVersion11:
        text = "Transfer-Encoding on an HTTP/1.0 request (its framing is faulty: RFC 9112 6.1)"
        return "bad_http_request", text, 400
    others = sorted({c[:40] for c in codings if c != "chunked"})
    if not others:  # empty, or chunked more than once
        return "bad_http_request", "Transfer-Encoding must name chunked once", 400
    text = f"transfer coding {', '.join(others)} is not supported: a request body may only be chunked"
    return "unsupported_transfer_coding", text, 501


def _answer_as_http11(request: BaseRequest) -> None:
    """aiohttp stands an unparseable request in as an HTTP/1.0 one, so its answer would say
    ``HTTP/1.0`` (and one to an ``HTTP/2.0`` request line ``HTTP/2.0``); the gateway speaks HTTP/1.1,
    also when it refuses a request."""
    if request._version != HttpVersion11:
        request._version = HttpVersion11
        request._cache.pop("version", None)  # ``version`` is a cached property


_GatewayRequestHandler = GatewayRequestHandler  # the name tests/gateway patches


_CLOSE_HINT: Final = re.compile(rb"close|HTTP/1\.0", re.IGNORECASE)
"""Bytes without a match hold no request that closes the connection: parsed in one call."""
_HEAD_END: Final = b"\r\n\r\n"


class _StopAfterClose:
    """aiohttp's request parser, never fed the bytes after a request that closes the connection.

    llhttp (and aiohttp's Python parser) raise on any byte after such a request ("Data after
    ``Connection: close``"), and aiohttp turns the raise into one 400 for the whole read: the
    requests parsed before it in that read were lost. Once a read may hold such a request (it says
    ``close`` or ``HTTP/1.0`` somewhere; from then on, for the connection's life), reads are fed in
    steps that end where a request's head can end (after each blank line, and in a read's first
    three bytes, for a blank line begun in the read before): a request that closes the connection
    is returned at the end of a step, only its body follows (its ``Content-Length``, or chunks up to
    the last one), and nothing after it ever reaches the parser. Every other read is fed in one
    call, as aiohttp does."""

    __slots__ = (
        "_app",
        "_body",
        "_body_fed",
        "_closing",
        "_done",
        "_held",
        "_parser",
        "_paused",
        "_previous",
        "_queued",
        "_rest",
        "_seam",
        "_seam_whole",
        "_watch",
        "limit",
        "refused",
        "refused_extensions",
    )

    def __init__(self, parser: HttpParser[Any] | None, *, app: web.Application | None = None) -> None:
        self._parser = parser
        self._app = app
        """Whose ``client_max_size`` (``bbr.maxRequestBodyBytes``) a chunked body's declared sizes
        are held to (``None``: not counted)."""
        self._rest: ChunkSizes | BodyLength | None = None
        """The framing of the body being read, walked as its bytes arrive: a chunked body's declared
        sizes (counted against :attr:`limit`), or what is left of a ``Content-Length``; where it ends
        in a read is where the next request's head starts (:meth:`feed_data`)."""
        self.limit = 0
        self.refused: StreamReader | None = None
        """A chunked body whose declared sizes (or chunk extensions) passed :attr:`limit` in the
        last read (the connection handler refuses it)."""
        self.refused_extensions = False
        """Whether :attr:`refused` was refused for its chunk extensions (:class:`ChunkSizes`)."""
        self._body: StreamReader | None = None
        """The body of the last request the parser returned, while it may still be arriving."""
        self._done = False
        self._watch = False
        self._previous = b""
        """The last bytes of the previous read (a ``close`` split across two reads is still seen)."""
        self._seam: bytes | None = b""
        """The last bytes (up to three) of a request head begun in an earlier read and not ended yet
        (a blank line split across reads is still found); ``b""`` when none was begun - the blank
        lines a client may send before a request line (RFC 9112 2.2) do not begin one; ``None`` when
        where the last request ended was not worked out (the next one is then not walked)."""
        self._seam_whole = False
        """Whether :attr:`_seam` holds every byte after the last request the walk accounted for (not
        just the last three): the walk stopped where the rest of a read was held (:attr:`_held`), and
        the parser, paused inside the body before, may return a head in those bytes when it resumes."""
        self._closing: tuple[Any, Any] | None = None
        """The request that closes the connection (message, body reader), once parsed."""
        self._body_fed = 0
        """Bytes of :attr:`_closing`'s body handed to the parser (counted here: the parser may hold
        some back while a decompressed body waits to be read)."""
        self._queued = 0
        """Requests returned and not yet taken off aiohttp's queue (:meth:`message_consumed`)."""
        self._held = b""
        """The rest of a read not fed yet: aiohttp's queue was full (:meth:`_full`), or the parser
        paused inside a body (:meth:`_paused_in`)."""
        self._paused = False
        """aiohttp paused reading during the last call to the parser (:meth:`pause_reading`)."""

    def head_begun(self) -> bool:
        """Whether bytes after the last complete request begin a head (or are held unparsed, which may):
        ``False`` also when where that request ended was not worked out."""
        return bool(self._seam) or bool(self._held)

    def message_consumed(self) -> None:
        """aiohttp took a request off its queue: one more may be parsed."""
        self._queued = max(self._queued - 1, 0)
        if self._parser is not None:
            self._parser.message_consumed()

    def _full(self, messages: Sequence[tuple[Any, Any]]) -> bool:
        """Whether aiohttp's queue of parsed requests is full with ``messages`` added: the rest of the
        read is then held (:attr:`_held`) until aiohttp, having answered half of them, asks for more
        (``feed_data(b"")``, before it reads the socket again). The parser stops at that bound itself
        (:data:`~aiohttp.web_protocol.MAX_MSG_QUEUE_SIZE`), but fed in steps it parsed on: before
        session s47 every request of a read was queued (a 256 KiB read of tiny pipelined requests,
        thousands of them) instead of aiohttp's 32 while the socket was paused."""
        return self._queued + len(messages) >= MAX_MSG_QUEUE_SIZE

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)

    def pause_reading(self) -> None:
        """aiohttp pauses reading: a body's unread bytes passed its buffer's high-water mark (the
        handler has not read them yet). The parser stops inside that body and keeps the rest of the
        bytes it was given until aiohttp resumes it (``feed_data(b"")``, once the body is read)."""
        self._paused = True
        if self._parser is not None:
            self._parser.pause_reading()

    def _paused_in(self, body: Any) -> bool:
        """Whether the parser stopped inside ``body`` in the call just made (and holds the rest of
        what it was given: :meth:`pause_reading`). No more bytes may be fed to it until it resumes:
        fed with the next step, they came out of one call with the bytes it kept - before session
        s48 a valid request whose head it kept there was dropped with the raise for a malformed one
        in that next step (its answer lost, only the 400 sent). The rest of the read is then held
        (:attr:`_held`) and fed once aiohttp resumes the parser."""
        paused, self._paused = self._paused, False
        return paused and isinstance(body, StreamReader) and not body.is_eof()

    def feed_data(self, data: bytes) -> tuple[Sequence[tuple[Any, Any]], bool, bytes]:
        held = len(self._held)
        if held:  # the rest of a read held while aiohttp's queue was full: a read of its own
            data, self._held = self._held + data, b""
        found = self._feed_read(data, held=held)
        self._queued += len(found[0])
        return found

    def _feed_read(self, data: bytes, *, held: int) -> tuple[Sequence[tuple[Any, Any]], bool, bytes]:
        """Feed ``data``, whose first ``held`` bytes are the rest of an earlier read (:attr:`_held`)."""
        at_boundary = self._body is None or self._body.is_eof()
        rest, resumed = self._rest, None
        if at_boundary:
            self._rest = rest = None  # no body in progress: nothing of one to walk
        if rest is not None and data:
            if rest.feed(data, 0):
                self._refuse(rest)
            if rest.done:
                self._rest = None
                resumed = rest.end if rest.end > 0 else None
        # where the next request's head may start in ``data`` (``None``: the body in progress goes on
        # past it, no head is in it)
        if at_boundary:
            heads_from: int | None = 0
        elif rest is None:
            heads_from = 0  # a body of unknown length: any blank line may end a head
        else:
            heads_from = None if not rest.done else max(rest.end, 0)
        try:
            found = self._feed(data, heads_from, held=held)
        except HttpProcessingError as exc:
            self._done, self._held = True, b""  # the connection closes after the answer to it
            self._fail_body(exc)
            raise
        if found[0] and isinstance(found[0][-1][0], _ErrInfo):  # refused: nothing more is parsed
            self._rest, self._seam = None, None
            return found
        whole = bool(self._held)
        if whole:  # fed up to where the queue filled: the rest is walked when it is fed
            data = data[: len(data) - len(self._held)]
        if found[0]:
            _, body = found[0][-1]
            self._body = body if isinstance(body, StreamReader) and not body.is_eof() else None
        if not data:  # the parser's own resumption: no bytes of ours to walk
            if found[0]:
                self._rest, self._seam = None, None
            return found
        self._previous = data[-8:]
        if at_boundary:
            self._walk(data, 0, self._seam, found[0], whole=whole)
        elif resumed is not None:  # the body in progress ended at ``data[resumed]``
            self._walk(data, resumed, b"", found[0], whole=whole)
        elif rest is None and self._seam_whole and self._seam is not None:
            # held bytes fed after a paused body whose framing was walked to its end: they follow
            # the seam (before session s49 they were not walked, nor was any request in them - a
            # chunked body there declared any size unrefused until its bytes came)
            self._walk(data, 0, self._seam, found[0], whole=whole)
        else:  # inside a body, or one not walked: where the next request starts is not known
            self._seam = None
            if found[0]:
                self._rest = None
        return found

    def _walk(
        self,
        data: bytes,
        start: int,
        seam: bytes | None,
        messages: Sequence[tuple[Any, Any]],
        *,
        whole: bool = False,
    ) -> None:
        """Walk the requests of ``data[start:]`` (``messages``: those whose heads ended in it) by their
        framing to where the next one starts: the head of each is found, the requests before the last
        are walked to their ends (:func:`_request_end`), and the last one's body, when still arriving,
        has its framing walked from just after its head (:attr:`_rest`), a chunked one's declared
        sizes counted against the limit; else what follows it is where the next head begins
        (:attr:`_seam`). ``seam`` is the end of a head begun in an earlier read (``None``: not known:
        nothing is walked). Before session s45 only a request alone in its read was counted: one
        pipelined behind another in the same read declared any size unrefused; before session s46
        one whose read began inside the previous request's body was not counted either; before
        session s47 a blank line before a request line (RFC 9112 2.2) could be taken, with the
        previous request's last bytes, for the end of its head: its sizes went uncounted."""
        self._rest = None
        self._seam_whole = False
        app = self._app
        if app is None or seam is None:
            self._seam = None
            return
        if seam:  # the head begun in an earlier read: searched from its last bytes on
            joined, shift, at, begun = seam + data[start:], start - len(seam), 0, True
        else:
            joined, shift, at, begun = data, 0, start, False
        # ``data[i]`` is ``joined[i - shift]``
        last = len(messages) - 1
        for index, (message, _) in enumerate(messages):
            head = _head_end(joined, at, begun=begun)
            begun = False
            if head < 0:
                self._seam = None
                return
            if index == last and self._body is not None:  # its body still arriving: walk it
                self._seam = b""
                self._walk_body(message, self._body, data, head + shift)
                return
            at = _request_end(joined, head, message)
            if at < 0:
                self._seam = None
                return
        if not begun:
            at = _skip_blank_lines(joined, at)
        self._seam_whole = whole
        self._seam = joined[at:] if whole else joined[max(at, len(joined) - 3) :]

    def _walk_body(self, message: Any, body: StreamReader, data: bytes, start: int) -> None:
        """Walk the framing of ``message``'s body from ``data[start]`` (just after its head)."""
        app = self._app
        assert app is not None
        self.limit = app._client_max_size
        rest: ChunkSizes | BodyLength
        if message.chunked:
            rest = ChunkSizes(body, self.limit)
        else:
            length = message.headers.get("Content-Length") or ""
            if not length.isdigit():
                return
            rest = BodyLength(body, int(length))
        if rest.feed(data, start):
            self._refuse(rest)
        if not rest.done:
            self._rest = rest

    def _refuse(self, rest: ChunkSizes | BodyLength) -> None:
        """``rest``'s body is refused (:attr:`refused`; :attr:`refused_extensions`: for its chunk
        extensions rather than its declared sizes)."""
        self.refused = rest.body
        self.refused_extensions = isinstance(rest, ChunkSizes) and rest.extensions > MAX_CHUNK_EXTENSION_BYTES

    def _fail_body(self, exc: HttpProcessingError) -> None:
        """The parser refused bytes inside a body it had handed on (a chunk-size line or a trailer
        section that is malformed or over the header limits, in a read after the head's): aiohttp's
        C parser raises without ending that body, so the handler reading it waited for the rest until
        ``body_timeout_s`` (then 408 "request body not received", and 10 s of lingering: before session
        s40), while the error answer aiohttp queued waited behind it. The body ends with the error
        instead: the handler's read raises it, answered 400 (:meth:`GatewayRequestHandler.handle_error`)."""
        body, self._body = self._body, None
        if body is not None and not body.is_eof() and body.exception() is None:
            body.set_exception(RequestPayloadError("malformed request body"), exc)

    def _feed(
        self, data: bytes, heads_from: int | None, *, held: int = 0
    ) -> tuple[Sequence[tuple[Any, Any]], bool, bytes]:
        parser = self._parser
        assert parser is not None
        if self._done:
            self._held = b""
            return (), False, b""  # after a request that closes the connection, or a refused one: ignored
        if not data:  # the parser's own resumption (a paused body's held-back bytes)
            return parser.feed_data(data)
        messages: list[tuple[Any, Any]] = []
        if held:  # the bytes the parser kept when the queue filled come first, in a call of their own
            self._paused = False
            try:
                found, upgraded, tail = parser.feed_data(b"")
            except HttpProcessingError as exc:
                return self._refused_after(messages, exc)
            messages.extend(found)
            if upgraded:
                return messages, True, tail + data
            if self._paused_in(found[-1][1] if found else self._body):  # stopped again: all held
                self._held = data
                return messages, False, b""
        if not self._watch:
            # the read itself, then only its seam with the previous one: no copy of a large read (held
            # bytes were searched with the read they came in: searched again, a read of tiny requests
            # was searched once per 16 of them)
            before = self._previous if not held else data[max(held - 8, 0) : held]
            if (
                _CLOSE_HINT.search(data, held) is None
                and _CLOSE_HINT.search(before + data[held : held + 8]) is None
            ):
                if heads_from is None or _next_head_end(self._previous, data, heads_from) >= len(data):
                    if not messages:
                        return parser.feed_data(data)  # no request ends in it before more bytes: one call
                    try:
                        found, upgraded, tail = parser.feed_data(data)
                    except HttpProcessingError as exc:
                        return self._refused_after(messages, exc)
                    return [*messages, *found], upgraded, tail
                return self._feed_pipelined(data, heads_from, messages)
            self._watch = True
        cuts = sorted({*range(1, min(len(data), 3) + 1), *_head_ends(data)})
        start, body = 0, self._body
        while start < len(data):
            closing = self._closing
            if closing is not None and closing[1].is_eof():
                self._done = True
                break
            at = bisect.bisect_right(cuts, start)
            end = cuts[at] if at < len(cuts) else len(data)
            if closing is not None and not closing[0].chunked:  # exactly the rest of its body
                left = int(closing[0].headers.get("Content-Length") or 0) - self._body_fed
                if left <= 0:  # all of it handed over already: what follows is after it
                    self._done = True
                    break
                end = start + left
                self._body_fed += min(end, len(data)) - start
            self._paused = False
            try:
                found, upgraded, tail = parser.feed_data(data[start:end])
            except HttpProcessingError as exc:
                if closing is None or "after `connection: close`" not in _parser_reason(exc):
                    return self._refused_after(messages, exc)
                self._done = True  # a step's cut missed the end of the body: the rest is ignored
                break
            messages.extend(found)
            if upgraded:
                return messages, True, tail + data[end:]
            if closing is None:
                self._closing = next((m for m in found if m[0].should_close), None)
            start = end
            body = found[-1][1] if found else body
            paused = self._paused_in(body)
            if start < len(data) and (paused or (found and self._closing is None and self._full(messages))):
                self._held = data[start:]
                break
        if self._closing is not None and self._closing[1].is_eof():
            self._done = True
        return messages, False, b""

    def _feed_pipelined(
        self, data: bytes, heads_from: int, messages: list[tuple[Any, Any]]
    ) -> tuple[Sequence[tuple[Any, Any]], bool, bytes]:
        """Feed ``data`` in steps that each end just after a request head (found from ``heads_from``
        on; a request's body is skipped by its framing, :func:`_request_end`, not searched for blank
        lines): the parser raises for the first malformed byte and drops every request it parsed in
        that call, so each valid request before a malformed one must come out of a call of its own
        (:meth:`_refused_after`). ``messages``: those parsed before ``data`` in this call. Once
        aiohttp's queue is full the rest of ``data`` is held (:meth:`_full`)."""
        parser = self._parser
        assert parser is not None
        start, search, size, body = 0, heads_from, len(data), self._body
        while start < size:
            end = _next_head_end(self._previous if search == 0 else b"", data, search)
            self._paused = False
            try:
                found, upgraded, tail = parser.feed_data(data[start:end])
            except HttpProcessingError as exc:
                return self._refused_after(messages, exc)
            messages.extend(found)
            if upgraded:
                return messages, True, tail + data[end:]
            search = end
            if found and not found[-1][1].is_eof():  # its body follows: the next head comes after it
                after = _request_end(data, end, found[-1][0])
                search = after if after >= 0 else size
            start = end
            body = found[-1][1] if found else body
            if start < size and (self._paused_in(body) or (found and self._full(messages))):
                self._held = data[start:]
                break
        return messages, False, b""

    def _refused_after(
        self, messages: list[tuple[Any, Any]], exc: HttpProcessingError
    ) -> tuple[Sequence[tuple[Any, Any]], bool, bytes]:
        """The parser refused bytes after ``messages`` (the requests it returned earlier in this read):
        they are answered in order, then the refusal (aiohttp's own stand-in for it, a 400 that closes
        the connection: :meth:`GatewayRequestHandler.handle_error`), and nothing after it is parsed
        (RFC 9112 9.3.2: a server answers pipelined requests in order). aiohttp turned the raise into
        a single 400 for the whole read: before session s47 a valid request pipelined before a
        malformed one in the same read got that 400 and was never handled (nor forwarded). A request
        whose body the refusal fell in is the refused one (one 400, its handler never runs, as for a
        request alone in its read). With no request before it, the raise is aiohttp's to answer."""
        self._done, self._held = True, b""
        if messages and not messages[-1][1].is_eof():
            messages.pop()
        if not messages:
            raise exc
        messages.append((_ErrInfo(status=400, exc=exc, message=exc.message), EMPTY_PAYLOAD))
        return messages, False, b""


def _next_head_end(previous: bytes, data: bytes, at: int) -> int:
    """The offset in ``data`` just after the first ``CRLF CRLF`` that ends at or after ``at`` (one
    begun in the last bytes of ``previous``, the read before, counts at 0), else ``len(data)``. Blank
    lines before a request line (RFC 9112 2.2) are not skipped, unlike :func:`_head_end`: taken here
    for a head's end they only cut one more step, in which the parser finds no request."""
    if at == 0 and previous:
        seam = (previous[-3:] + data[:3]).find(_HEAD_END)
        if seam >= 0:
            return seam + 4 - len(previous[-3:])
    found = data.find(_HEAD_END, at)
    return found + 4 if found >= 0 else len(data)


_HEX: Final = {c: int(chr(c), 16) for c in b"0123456789abcdefABCDEF"}
_SIZE_ENDS: Final = frozenset(b" \t;\r\n")
"""Bytes that may end a chunk-size's digits (spaces: aiohttp's parser is lenient there)."""
_MAX_SIZE_DIGITS: Final = 16
"""llhttp refuses a chunk size past 64 bits (400): such a line is not counted."""


class ChunkSizes:
    """The chunk sizes a chunked request body declares, added up as their lines arrive (RFC 9112 7.1).

    Neither aiohttp's parser nor httptools tells a chunk's declared size, so a body declaring more
    than ``bbr.maxRequestBodyBytes`` (``ffffffffffffffff``, or 1 MiB against 64 KiB) was read until
    the limit's worth of bytes came - a client that never sends them held the handler until the body
    timeout (60 s). This reads only the framing of the bytes the parser is given (a chunk's data is
    skipped by its size, not scanned), and only of a chunked body; anything it does not expect (a
    line the parser will refuse) ends the counting - it never refuses what the parser accepts. Past
    the last chunk it walks the trailer section to its blank line: :attr:`end` says where in a read
    the body ended, so a request pipelined behind it in that read is counted too."""

    __slots__ = (
        "_data_left",
        "_digits",
        "_line",
        "_size",
        "_state",
        "body",
        "declared",
        "done",
        "end",
        "extensions",
        "limit",
    )

    _SIZE: Final = 0
    _LINE: Final = 1  # the rest of a chunk-size line (spaces, extensions), to its LF
    _DATA: Final = 2
    _DATA_END: Final = 3  # the CRLF after a chunk's data
    _LAST_LINE: Final = 4  # the rest of the last chunk's size line
    _TRAILER: Final = 5  # a trailer field line, or the blank line that ends the body

    def __init__(self, body: StreamReader, limit: int) -> None:
        self.body = body
        self.limit = limit
        self.declared = 0
        self.extensions = 0
        """Bytes of the chunk-size lines past their sizes (extensions, spaces; CRLF not counted),
        all lines so far: refused past :data:`MAX_CHUNK_EXTENSION_BYTES`."""
        self.done = False
        self.end = -1
        """Where in the data last fed the body ended (just after its blank line); -1 before, and
        when the walk stopped elsewhere (sizes past the limit, a line the parser refuses)."""
        self._state = self._SIZE
        self._size = 0
        self._digits = 0
        self._data_left = 0
        self._line = b""
        """The first bytes (up to two) of the trailer line being read: ``""`` or CR is the blank one."""

    def feed(self, data: bytes, start: int) -> bool:
        """Count ``data[start:]``; ``True`` when the sizes declared so far pass the limit."""
        at = start
        end = len(data)
        while at < end and not self.done:
            state = self._state
            if state == self._DATA:
                step = min(self._data_left, end - at)
                self._data_left -= step
                at += step
                if self._data_left == 0:
                    self._state = self._DATA_END
            elif state == self._TRAILER:
                lf = data.find(b"\n", at)
                self._line = (self._line + data[at : end if lf < 0 else lf][:2])[:2]
                if lf < 0:
                    return False
                at = lf + 1
                if self._line in (b"", b"\r"):
                    self.done = True
                    self.end = at
                    return False
                self._line = b""
            elif state != self._SIZE:  # the rest of a line, to its LF
                lf = data.find(b"\n", at)
                if state != self._DATA_END:  # a chunk-size line's extensions (and spaces), its CR not
                    stop = end if lf < 0 else lf
                    self.extensions += stop - at - data.count(b"\r", at, stop)
                    if self.extensions > MAX_CHUNK_EXTENSION_BYTES:
                        self.done = True
                        return True
                if lf < 0:
                    return False
                at = lf + 1
                self._state = {self._LINE: self._DATA, self._DATA_END: self._SIZE}.get(state, self._TRAILER)
            else:
                byte = data[at]
                digit = _HEX.get(byte)
                if digit is not None:
                    self._digits += 1
                    if self._digits > _MAX_SIZE_DIGITS:
                        self.done = True  # the parser refuses it
                        return False
                    self._size = self._size * 16 + digit
                    at += 1
                    continue
                if self._digits == 0 or byte not in _SIZE_ENDS:
                    self.done = True  # not a chunk size: the parser refuses it
                    return False
                size, self._size, self._digits = self._size, 0, 0
                self.declared += size
                if self.declared > self.limit:
                    self.done = True
                    return True
                self._data_left = size
                self._state = self._LINE if size else self._LAST_LINE
        return False


class BodyLength:
    """A ``Content-Length`` body's bytes, counted as they arrive: :attr:`end` says where in a read
    it ended (what :class:`ChunkSizes` says of a chunked one)."""

    __slots__ = ("body", "done", "end", "left")

    def __init__(self, body: StreamReader, length: int) -> None:
        self.body = body
        self.left = length
        self.done = False
        self.end = -1

    def feed(self, data: bytes, start: int) -> bool:
        """Count ``data[start:]``; never refuses (the parser holds the body to its length)."""
        step = min(self.left, len(data) - start)
        self.left -= step
        if self.left == 0:
            self.done = True
            self.end = start + step
        return False


def _request_end(data: bytes, at: int, message: Any) -> int:
    """The offset just after the body of ``message`` (a request the parser returned), whose head ends
    at ``data[at]``: its ``Content-Length``, or its chunks and trailer section; -1 when ``data`` does
    not hold all of it as expected (the caller then does not count)."""
    if not message.chunked:
        length = message.headers.get("Content-Length") or "0"
        end = at + int(length) if length.isdigit() else -1
        return end if end <= len(data) else -1
    size = -1
    while size != 0:  # the chunks: a size line, that many bytes, CRLF; the last one's size is 0
        lf = data.find(b"\n", at)
        if lf < 0:
            return -1
        digits = data[at:lf].split(b";", 1)[0].strip(b" \t\r")
        if not digits or len(digits) > _MAX_SIZE_DIGITS or any(c not in _HEX for c in digits):
            return -1
        size = int(digits, 16)
        at = lf + 1 + size
        if size and data[at : at + 2] != b"\r\n":
            return -1
        at += 2 if size else 0
    while True:  # the trailer section, to its empty line
        lf = data.find(b"\n", at)
        if lf < 0:
            return -1
        line, at = data[at:lf], lf + 1
        if line in (b"", b"\r"):
            return at


_BLANK: Final = frozenset(b"\r\n")
"""Bytes llhttp skips before a request line (the blank lines RFC 9112 2.2 lets a client send there)."""


def _skip_blank_lines(data: bytes, at: int) -> int:
    """The offset of the first byte at or after ``data[at]`` that is not CR or LF."""
    while at < len(data) and data[at] in _BLANK:
        at += 1
    return at


def _head_end(data: bytes, at: int, *, begun: bool) -> int:
    """The offset just after the blank line that ends the head starting at ``data[at]`` (``begun``:
    the head began before ``data``, whose first bytes may end it), -1 when ``data`` does not hold it.
    The blank lines before a request line are skipped: with the previous request's last bytes (a
    body ending in CR LF, or a chunked body's end) they would read as a head's end."""
    if not begun:
        at = _skip_blank_lines(data, at)
    found = data.find(_HEAD_END, at)
    return found + 4 if found >= 0 else -1


def _head_ends(data: bytes) -> list[int]:
    """The offsets just after each ``CRLF CRLF`` in ``data``."""
    ends = []
    at = data.find(_HEAD_END)
    while at >= 0:
        ends.append(at + 4)
        at = data.find(_HEAD_END, at + 1)
    return ends


CONNECTION_HANDLER_KEY: Final[web.AppKey[type[GatewayRequestHandler]]] = web.AppKey("igw_connection_handler")
"""The connection handler class an app's listener uses (default :class:`GatewayRequestHandler`;
the gateway's app sets :class:`igw.gateway.lean_server.LeanRequestHandler`)."""


class GatewayServer(web.Server):
    """aiohttp's server object with the gateway's connection handler, limits and app, and the
    connection cap: every connection counts from its accept, a TLS one still in its handshake
    (:mod:`igw.gateway.tls_accept`) as much as one with a handler."""

    limits: ServerLimits = ServerLimits()
    max_connections: int = 10_000  # replaced by GatewayRunner with the capped value
    app: web.Application | None = None
    handler_class: type[GatewayRequestHandler] = GatewayRequestHandler
    lean_requests: int = 0
    """Requests served by :mod:`igw.gateway.lean_server` rather than aiohttp (tests read it)."""
    handshakes: dict[asyncio.Protocol, TlsHandshake]
    """Connections still in their TLS handshake, oldest first, by the handler that will serve them
    (set by :class:`GatewayRunner`)."""

    def __call__(self) -> RequestHandler:
        return self.handler_class(
            self, loop=self._loop, limits=self.limits, max_connections=self.max_connections, **self._kwargs
        )

    lingering: dict[LingeringClose, None]
    """Closed connections still draining their client's last bytes (:class:`LingeringClose`), oldest
    first; counted against ``max_connections`` (set by :class:`GatewayRunner`)."""
    linger_off: bool = False
    """Set at shutdown: connections then close at once."""

    def open_connections(self) -> int:
        """Client connections open: with a handler, still in their TLS handshake, or lingering."""
        return len(self._connections) + len(self.handshakes) + len(self.lingering)

    def linger(self, sock: Any, *, idle: bool = False) -> None:
        """Linger on ``sock``, a connection's plain-TCP socket that the gateway closes now
        (:class:`LingeringClose`), unless the server is shutting down. ``idle``: closed for idleness
        (the keep-alive timeout), so it lingers only if bytes are unread."""
        if self.linger_off:
            return
        with contextlib.suppress(OSError):  # the socket is gone already: nothing to linger on
            fd = sock.fileno()
            if fd >= 0:
                LingeringClose(self, socket.socket(sock.family, sock.type, fileno=os.dup(fd)), idle=idle)

    def admit(self, newcomer: asyncio.Protocol) -> bool:
        """Whether a connection just accepted (``newcomer``, counted already) may stay: the count is
        within ``max_connections``, or another connection was closed to make room - the oldest still
        in its TLS handshake (a client that completes one takes milliseconds), else the oldest with
        no request in progress (idle, or still sending its head). ``False``: none could be closed,
        the newcomer is refused."""
        cap = self.max_connections
        if self.open_connections() <= cap:
            return True
        if self.lingering:  # a closed connection draining its client's last bytes: the first to go
            next(iter(self.lingering)).close()
            return True
        stalled = next((h for other, h in self.handshakes.items() if other is not newcomer), None)
        if stalled is not None:
            log.warning("connection limit %d reached: closed a connection still in its TLS handshake", cap)
            stalled.close()
            return True
        for other in self._connections:
            if other is not newcomer and isinstance(other, GatewayRequestHandler) and other.evictable():
                log.warning("connection limit %d reached: closed an idle or stalled connection", cap)
                other.close_at_once()
                return True
        log.warning("connection limit %d reached: refused a new connection", cap)
        return False

    def admit_handshake(self, handler: asyncio.Protocol, handshake: TlsHandshake) -> bool:
        """Count a TLS connection whose handshake begins (:meth:`admit`); ``False``: refused."""
        self.handshakes[handler] = handshake
        if self.admit(handler):
            return True
        del self.handshakes[handler]
        return False

    def handshake_ended(self, handler: asyncio.Protocol) -> None:
        """The handshake of ``handler``'s connection is over; the handler counts it from now on (in
        ``connection_made``) if it goes on."""
        handshake = self.handshakes.pop(handler, None)
        if handshake is not None and len(self.handshakes) == 0:
            self.handshakes = {}  # (a dict keeps its largest size: a flood's table is let go)

    def pre_shutdown(self) -> None:
        """aiohttp's first step of its shutdown (closing idle connections), which also closes every
        connection still in its TLS handshake (it never served a request: nothing to wait for)."""
        for handshake in list(self.handshakes.values()):
            handshake.close()
        self.handshakes.clear()
        self.linger_off = True
        for lingering in list(self.lingering):
            lingering.close()
        super().pre_shutdown()


class LingeringClose:
    """A connection the gateway closed, draining what its client still sends (RFC 9112 9.6).

    A server that closes a TCP connection whose client is still sending (bytes unread, or arriving
    after the close) makes its kernel answer with a reset, and a reset discards the answers the
    client has not read yet - a 400 to a malformed request pipelined behind valid ones, the 413 to a
    body too large, the answer to a ``Connection: close`` request with more bytes behind it; the
    client sees ``ECONNRESET`` instead. So, as nginx's ``lingering_close`` and Apache do, every close
    the gateway makes of a plain-TCP connection (not one the client half-closed, nor one refused,
    evicted or aborted) goes on here, on a duplicate of the socket taken as its transport lets it
    go (its answers written out): the write side is shut (the client reads a FIN after the answers),
    and what arrives is read and discarded until the client closes its side, :data:`LINGER_S` pass
    or :data:`LINGER_BYTES` were read - then the socket is closed. A lingering connection counts
    against ``max_connections`` and is the first closed to make room; shutdown closes them all.
    TLS connections do not linger (the loop's TLS layer closes the socket itself).

    A close for idleness (``idle``: the keep-alive timeout) expects nothing more from the client: once
    the write side is shut, a socket with no byte unread is closed at once (before session s48 it
    lingered the whole :data:`LINGER_S`, counted against the cap). The check comes after the FIN is
    sent, so bytes that arrived before it - a request sent as the timer fired - are drained as in
    any lingering close; only bytes arriving in the instant between the check and the close meet a
    reset, which on an idle connection destroys no answer the client waits for."""

    __slots__ = ("_left", "_loop", "_server", "_sock", "_timer")

    def __init__(self, server: GatewayServer, sock: socket.socket, *, idle: bool = False) -> None:
        self._server = server
        self._sock: socket.socket | None = sock
        self._left = LINGER_BYTES
        loop = self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        try:
            sock.setblocking(False)
            sock.shutdown(socket.SHUT_WR)
            if idle and not _unread(sock):
                sock.close()
                self._sock = None
                return
            loop.add_reader(sock.fileno(), self._readable)
        except (OSError, ValueError):
            sock.close()
            self._sock = None
            return
        self._timer = loop.call_later(LINGER_S, self.close)
        server.lingering[self] = None

    def _readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            while self._left > 0:
                data = sock.recv(65536)
                if not data:  # the client closed its side: a clean close
                    break
                self._left -= len(data)
        except BlockingIOError:
            return
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        """Stop lingering: close the socket (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._server.lingering.pop(self, None)
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            self._loop.remove_reader(sock.fileno())
        sock.close()


def _unread(sock: socket.socket) -> bool:
    """Whether ``sock`` (non-blocking) has bytes to read; its client's end of stream is none."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False


class GatewayRunner(web.AppRunner):
    """An :class:`~aiohttp.web.AppRunner` whose connections use :class:`GatewayRequestHandler`
    (or the app's subclass under :data:`CONNECTION_HANDLER_KEY`).

    aiohttp has no public hook for the connection handler class; the server object the app builds
    is re-classed (it adds no state of its own beyond the limits), and ``tests/gateway`` pins the
    behaviour over real HTTP so an aiohttp upgrade that breaks this fails a test rather than
    silently reverting to aiohttp's plain-text errors.
    """

    def __init__(self, app: web.Application, *, limits: ServerLimits, **kwargs: object) -> None:
        super().__init__(app, **kwargs)  # type: ignore[arg-type]
        self.limits = limits

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = GatewayServer
        assert isinstance(server, GatewayServer)
        server.limits = self.limits
        server.max_connections = effective_max_connections(self.limits)
        app = self.app
        server.app = app
        server.handler_class = app.get(CONNECTION_HANDLER_KEY, GatewayRequestHandler)
        server.handshakes = {}
        server.lingering = {}
        return server


class GatewaySite(web.TCPSite):
    """aiohttp's TCP site with the TLS handshake run by the gateway (:mod:`igw.gateway.tls_accept`),
    bounded by ``handshake_timeout_s``.

    aiohttp's site takes no handshake timeout, so asyncio's default applied: 60 s, whatever
    ``headerTimeout`` says (before session s39). And with the loop's own TLS termination a connection
    still in its handshake was not yet a connection to the server (its handler is called only once
    the handshake is done): the connection cap neither counted nor could close it, and a client
    opening TCP connections to the TLS port that sent nothing held a file descriptor each, past
    ``maxConnections`` (before session s40). The listener now accepts plain TCP and each connection's
    handshake is counted from its accept.
    """

    __slots__ = ("_handshake_timeout_s",)

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        backlog: int,
        reuse_port: bool | None,
        handshake_timeout_s: float,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, backlog=backlog, reuse_port=reuse_port)
        self._handshake_timeout_s = handshake_timeout_s

    async def start(self) -> None:
        """``TCPSite.start`` with ``ssl_handshake_timeout`` (given only with a TLS context, as asyncio
        requires)."""
        await web.BaseSite.start(self)  # registers the site with its runner (TCPSite's super call)
        server = self._runner.server
        assert server is not None
        tls = self._ssl_context
        factory: Callable[[], asyncio.BaseProtocol] = server
        if tls is not None and isinstance(server, GatewayServer):
            factory = functools.partial(_tls_connection, server, tls, self._handshake_timeout_s)
            tls = None  # the handshake is TlsHandshake's, not the loop's
        self._server = await asyncio.get_running_loop().create_server(
            factory,
            self._host,
            self._port,
            ssl=tls,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl_handshake_timeout=self._handshake_timeout_s if tls is not None else None,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def _tls_connection(server: GatewayServer, context: ssl.SSLContext, timeout_s: float) -> TlsHandshake:
    """An accepted TLS connection's protocol: its handshake, then its handler (``server()``)."""
    return TlsHandshake(
        server,
        server(),
        context,
        timeout_s=timeout_s,
        shutdown_timeout_s=LINGER_S,
        send_timeout_s=server.limits.send_timeout_s,
    )


def _bound_port(site: web.TCPSite) -> int:
    server = site._server
    sockets = getattr(server, "sockets", None)
    if not sockets:
        raise RuntimeError("the gateway's listening socket is not open")
    port: int = sockets[0].getsockname()[1]
    return port


EXIT_LISTEN_FAILED: Final = 1
"""Exit code of a command whose listener could not be opened (:class:`ListenError`; a worker group's
port refused alike): the machine's state at start (a port in use, an address not on this host, no
permission), not a usage error (2), which until session s26 told a supervisor the command line was
wrong. ``igw serve``, ``igw global serve`` and ``igw operator`` (its health port) use it."""


class ListenError(IgwGatewayError):
    """The listening socket could not be opened: address in use, unknown host, no permission."""

    def __init__(self, host: str, port: int, exc: OSError) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {listen_failure(exc)}")


def listen_failure(exc: OSError) -> str:
    """The operating system's reason a listener could not be opened, as it words it
    (``Address already in use``): asyncio's own message for a failed bind repeats the address the
    caller names already (``error while attempting to bind on address ('127.0.0.1', 8080): address
    already in use``). A name that does not resolve keeps its resolver's message."""
    if exc.errno and exc.errno > 0 and not isinstance(exc, socket.gaierror):
        return os.strerror(exc.errno)
    return str(exc.strerror or exc)


async def start_site(site: web.BaseSite, *, host: str, port: int) -> None:
    """``site.start()``, its socket errors raised as :class:`ListenError` (one line for the CLI)."""
    try:
        await site.start()
    except OSError as exc:  # socket.gaierror (unknown host) is an OSError too
        raise ListenError(host, port, exc) from exc


@contextlib.asynccontextmanager
async def serve_app(
    app: web.Application,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    limits: ServerLimits | None = None,
    reuse_port: bool = False,
) -> AsyncIterator[str]:
    """Serve ``app``; yields its base URL (port 0 picks a free port).

    ``reuse_port``: bind with ``SO_REUSEPORT`` (``igw serve --workers``: one port, several processes).

    On exit: stop accepting connections, give in-flight requests ``limits.stream_grace_s`` to
    finish, end the rest (SSE error event, or 503), then close every connection and the services.
    """
    limits = limits or ServerLimits()
    if not app.frozen:
        app[LIMITS_KEY] = limits
    runner = GatewayRunner(
        app,
        limits=limits,
        handler_cancellation=True,
        access_log=None,
        keepalive_timeout=limits.keepalive_timeout_s,
        max_field_size=limits.max_header_field_bytes,
        max_headers=limits.max_headers,
        max_line_size=MAX_REQUEST_LINE_BYTES,
        shutdown_timeout=1.0,
    )
    await runner.setup()
    try:
        site = GatewaySite(
            runner,
            host,
            port,
            ssl_context=ssl_context,
            backlog=1024,
            reuse_port=reuse_port or None,
            handshake_timeout_s=limits.header_timeout_s,
        )
        await start_site(site, host=host, port=port)
        sock_port = _bound_port(site)
        scheme = "https" if ssl_context is not None else "http"
        yield f"{scheme}://{host}:{sock_port}"
    finally:
        inflight = app.get(INFLIGHT_KEY)
        for open_site in list(runner.sites):
            await open_site.stop()
        if inflight is not None:
            await inflight.wait(limits.stream_grace_s)
            await inflight.cut()
        await runner.cleanup()
