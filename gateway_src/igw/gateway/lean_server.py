"""The inference routes' own HTTP/1.1 server: httptools (llhttp) parsing, no router or middleware.

Every client connection is served by :class:`LeanRequestHandler`, a subclass of the gateway's aiohttp
connection handler (:class:`igw.gateway.serving.GatewayRequestHandler`). A request whose head is
plain - ``POST`` to one of the lean routes (the inference routes,
:data:`~igw.gateway.inference_apis.INFERENCE_PATHS`), HTTP/1.1,
a ``Content-Length`` body within ``bbr.maxRequestBodyBytes``, no ``Transfer-Encoding``,
``Content-Encoding``, ``Expect`` or ``Upgrade``, every field within the header limits, the head
within :data:`_HEAD_LIMIT` bytes - is parsed by
httptools and handed straight to the route's handler as a :class:`LeanRequest`; its response is
written as one head-and-body write (a streamed response through :class:`LeanStreamWriter`). The
handler starts once the read that completed the head is parsed: a body that came with its head (the
usual case) is handed over whole (:class:`ReceivedBody`), one still arriving through aiohttp's
``StreamReader``, which the following reads feed.

Anything else - another route, a malformed or over-limit head, a chunked, compressed or
``Expect: 100-continue`` body, HTTP/1.0 or 0.9 - hands the connection over to aiohttp for good, with
the bytes of the current request replayed into its parser, so every other route and every edge case
keeps aiohttp's behaviour and the gateway's error answers for it (400/413/414/431, the head
timeout, eviction at the connection cap). The handover always happens at a request boundary: the
lean side parses a request only once the previous one was answered, and a pipelined request that
arrived behind it is kept as raw bytes until then.

What the lean side keeps of aiohttp's connection handling: the head timeout, the keep-alive timer,
the connection cap's eviction (a request in progress is not evictable), cancellation of the handler
when the client disconnects, and the graceful shutdown (a handler in progress gets the shutdown
timeout to finish). Written by hand because no maintained server can share one listener and one
connection with aiohttp's handler; the parser is httptools, as uvicorn's.

``IGW_HTTP_SERVER=aiohttp`` turns the lean side off (every request served by aiohttp).

:class:`LeanRequest` carries only what the inference path reads of ``web.Request`` today (``app``,
``headers``, ``method``, ``path``, ``path_qs``, ``content``, ``content_length``, ``remote``, ``get``
and item assignment) plus the header fields as received (``raw_fields``: the upstream request's
fields are serialised from them without decoding); a handler that starts reading another attribute
needs it added there - ``tests/gateway/test_lean_server.py`` and the gateway suites run the handlers
on the lean side.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast

import httptools
from aiohttp import HttpVersion11, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client_exceptions import ClientConnectionResetError
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http_writer import StreamWriter, _serialize_headers
from aiohttp.streams import StreamReader
from multidict import CIMultiDict, CIMultiDictProxy
from mypy_extensions import mypyc_attr

from igw.errors import IgwGatewayError
from igw.gateway.errors import REQUEST_ID_HEADER
from igw.gateway.forwarded_answer import ForwardedAnswer
from igw.gateway.inference import REQUEST_ID_KEY, request_id_for
from igw.gateway.server_identity import SERVER_NAME
from igw.gateway.serving import (
    HOST_SYNTAX,
    MAX_REQUEST_LINE_BYTES,
    GatewayRequestHandler,
    GatewayServer,
    ServerLimits,
    handler_failure_response,
    request_target,
)

log = logging.getLogger("igw.gateway")

LeanHandler = Callable[[web.Request], Awaitable[web.StreamResponse | ForwardedAnswer]]
"""A lean route's handler: called with a :class:`LeanRequest` standing in for aiohttp's request; a
model server's complete answer comes back as a :class:`ForwardedAnswer` and is written as it is."""
LEAN_ROUTES_KEY: Final[web.AppKey[dict[str, LeanHandler]]] = web.AppKey("igw_lean_routes")
"""``path -> handler`` of the routes the lean side serves itself (``POST`` only)."""
SWITCH_ENV: Final = "IGW_HTTP_SERVER"
"""``aiohttp``: serve every request with aiohttp; anything else (or unset): the lean side is on."""

_REFUSED_HEADERS: Final = frozenset({b"transfer-encoding", b"content-encoding", b"expect", b"upgrade"})
_SPECIAL_NAME_LENGTHS: Final = frozenset(
    len(name) for name in (*_REFUSED_HEADERS, b"content-length", b"host")
)
"""Header name lengths worth a case-insensitive look (most names are skipped by length alone)."""
_CHARSET: Final = "utf-8"
_UNDECODABLE: Final = "surrogateescape"
"""Header bytes decoded as aiohttp's parser decodes them."""
_BODY_BUFFER: Final = 2**16
_PENDING_LIMIT: Final = 2**16
"""Bytes of pipelined requests kept while the one before them is answered; past this, reading pauses
(the transport's reading: aiohttp's own ``pause_reading`` pauses its parser, which asserts a body in
progress - before session s48 the lean side called it, and a client that pipelined more than this in
one go had its connection dropped by the assertion)."""
_HEAD_LIMIT: Final = 2**16
"""Bytes of a head still arriving past which the lean side hands it to aiohttp, whose parser applies
the field and count limits as the bytes arrive (a 431 at once). httptools reports a header field only
once it is complete, so without this an unterminated field (or an endless run of blank lines before
the request line) was buffered - twice, each read copying all of it again - until the head timeout."""
_VALID_HOST: Final = re.compile(HOST_SYNTAX.encode("ascii"))
"""A valid ``Host`` value (:data:`igw.gateway.serving.HOST_SYNTAX`): a head with another is handed to
aiohttp's side, which answers 400."""
_TARGETS_PER_CONNECTION: Final = 16
"""Request targets whose route look-up a connection remembers (a client sends one or two)."""


def lean_enabled() -> bool:
    """Whether the lean side serves the lean routes (the ``IGW_HTTP_SERVER`` switch)."""
    return os.environ.get(SWITCH_ENV, "lean").strip().lower() != "aiohttp"


async def _no_prepare_hook(response: web.StreamResponse) -> None:
    """aiohttp's request runs the app's ``on_response_prepare`` signals here; the gateway has none."""


class LeanRequest:
    """The attributes of :class:`aiohttp.web.Request` that the inference path and aiohttp's response
    classes read, for a request parsed by :class:`LeanConnection`."""

    __slots__ = (
        "_after",
        "_payload_writer_obj",
        "_protocol",
        "_stream",
        "_values",
        "app",
        "content",
        "content_length",
        "headers",
        "keep_alive",
        "path",
        "path_qs",
        "raw_fields",
        "remote",
        "task",
    )

    method: Final = "POST"
    version: Final = HttpVersion11
    _prepare_hook: Final = staticmethod(_no_prepare_hook)

    def __init__(
        self,
        *,
        app: web.Application,
        protocol: LeanRequestHandler,
        path: str,
        path_qs: str,
        headers: CIMultiDictProxy[str],
        raw_fields: list[tuple[bytes, bytes]],
        content_length: int,
        keep_alive: bool,
        remote: str | None,
    ) -> None:
        self.app = app
        self._protocol = protocol
        self.path = path
        self.path_qs = path_qs
        self.headers = headers
        self.raw_fields = raw_fields
        """The header fields as received (name and value bytes, the value without surrounding
        whitespace): the upstream request's fields are built from these without decoding them."""
        self.content: StreamReader | ReceivedBody | None = None
        """The body: set before the handler runs (:class:`ReceivedBody` when it came with the head)."""
        self.content_length = content_length
        self.keep_alive = keep_alive
        self.remote = remote
        self.task: asyncio.Task[None] | None = None
        self._values: dict[object, object] = {}
        self._payload_writer_obj: StreamWriter | None = None
        self._after: list[Callable[[], object]] = []
        self._stream: AbstractStreamWriter | None = None

    @property
    def handler_task(self) -> asyncio.Task[None] | None:
        """The task running this request's handler (``task``; aiohttp's ``Request.task`` is its
        connection's instead, so the in-flight registry reads this name, which only this class has)."""
        return self.task

    @property
    def response_started(self) -> bool:
        """Whether a streamed response's writer was handed out (its head may be on the wire)."""
        return self._stream is not None or self._payload_writer_obj is not None

    def after_response(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the response was handed to the connection (or its writing failed):
        bookkeeping the client need not wait for."""
        self._after.append(callback)

    def run_after_response(self) -> None:
        """The callbacks :meth:`after_response` collected, in order; a failing one is logged."""
        callbacks, self._after = self._after, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("after-response callback failed")

    @property
    def _payload_writer(self) -> StreamWriter:
        """aiohttp's response writer, made only for a streamed response (``StreamResponse.prepare``)."""
        if self._payload_writer_obj is None:
            self._payload_writer_obj = StreamWriter(self._protocol, self._protocol._loop)
        return self._payload_writer_obj

    def stream_head(self, response: web.StreamResponse, *, keep_alive: bool) -> bytes:
        """``response``'s head as :meth:`start_stream` writes it; built ahead by a relay that has time
        to spare before its first body bytes (the model server computing its first token)."""
        return stream_head(response, keep_alive=keep_alive)

    def start_stream(
        self, response: web.StreamResponse, *, keep_alive: bool, head: bytes | None = None
    ) -> LeanStreamWriter:
        """A chunked response's writer on this connection, its head (``head`` when it was built ahead
        by :meth:`stream_head`, else from ``response``'s status and headers now) held back to leave
        with the first body bytes (the relay's fast path)."""
        if head is None:
            head = stream_head(response, keep_alive=keep_alive)
        stream = self._stream = LeanStreamWriter(self._protocol, head)
        return stream

    def get(self, key: object, default: object = None) -> object:
        return self._values.get(key, default)

    def __setitem__(self, key: object, value: object) -> None:
        self._values[key] = value


def response_head(response: web.Response, body_length: int, *, keep_alive: bool) -> bytes:
    """The status line and headers aiohttp would write for a complete ``response``."""
    headers = response.headers
    if body_length and "Content-Type" not in headers:
        headers["Content-Type"] = "application/octet-stream"
    headers["Content-Length"] = str(body_length)
    return _serialized_head(response, keep_alive=keep_alive)


def stream_head(response: web.StreamResponse, *, keep_alive: bool) -> bytes:
    """The status line and headers of a chunked (``Transfer-Encoding: chunked``) HTTP/1.1 response,
    as aiohttp's ``StreamResponse.prepare`` writes them; ``response.headers`` gains the same fields."""
    headers = response.headers
    headers["Transfer-Encoding"] = "chunked"
    if "Content-Type" not in headers:
        headers["Content-Type"] = "application/octet-stream"
    return _serialized_head(response, keep_alive=keep_alive)


def _serialized_head(response: web.StreamResponse, *, keep_alive: bool) -> bytes:
    """``response``'s status line and headers with the fields aiohttp's server adds (``Date``,
    ``Server`` - the gateway's own, :mod:`igw.gateway.server_identity` - and ``Connection: close``),
    serialised by aiohttp's own serialiser (which refuses CR/LF)."""
    headers = response.headers
    if "Date" not in headers:
        headers["Date"] = rfc822_formatted_time()
    headers["Server"] = SERVER_NAME
    if not keep_alive and "Connection" not in headers:
        headers["Connection"] = "close"
    head: bytes = _serialize_headers(f"HTTP/1.1 {response.status} {response.reason}", headers)
    return head


_LAST_CHUNK: Final = b"0\r\n\r\n"
_WRITE_HIGH_WATER: Final = 2**16
"""Unsent bytes in the client's socket buffer past which a write waits for it to drain (aiohttp's
writer waits at the same size)."""


@mypyc_attr(native_class=False)  # mypyc: a native class cannot have two exception bases (igw.compiled)
class UnsupportedStreamOperation(IgwGatewayError, NotImplementedError):
    """A relayed stream was asked for something the lean side never does by design (compressing the
    model server's bytes, or writing a head other than the one it was built with). Raised loudly
    rather than ignored: a caller reaching it has changed how streams are relayed."""


@mypyc_attr(native_class=False)  # mypyc: it subclasses aiohttp's writer, so it stays a Python class
class LeanStreamWriter(AbstractStreamWriter):
    """A relayed stream's body on the lean side: each chunk framed and handed to the transport in the
    call that relays it, the head joined to the first one.

    aiohttp's ``StreamWriter`` does the same framing, but through a header-preparation pass, a
    per-write compression and length check, a chunk-sent signal and separate buffers for the head;
    per relayed event that is the larger part of the relay's own CPU on a path where the client waits
    for every byte. The chunked framing is written here by hand because it is three lines (RFC 9112
    7.1) and the head already came from aiohttp's serialiser; a client that cannot take chunked
    framing (HTTP/1.0) never reaches the lean side.
    """

    def __init__(self, protocol: LeanRequestHandler, head: bytes) -> None:
        self._protocol = protocol
        self._head = head
        self._eof = False

    def _send(self, data: bytes) -> None:
        transport = self._protocol.transport
        if transport is None or transport.is_closing():
            raise ClientConnectionResetError("Cannot write to closing transport")
        transport.write(data)
        self.output_size += len(data)

    def send_chunk(self, data: bytes) -> None:
        """Frame ``data`` (not empty) and hand it to the transport now, the head joined to the first
        chunk; no wait for the client's buffer to drain (:meth:`write` waits). A relay calls it from
        the model server's read callback for the stream's first bytes."""
        framed = b"%x\r\n%b\r\n" % (len(data), data)
        head = self._head
        if head:
            self._head = b""
            framed = head + framed
        self._send(framed)

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if not chunk:
            return
        self.send_chunk(chunk if isinstance(chunk, bytes) else bytes(chunk))
        transport = self._protocol.transport
        if transport is not None and transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
            await self.drain()

    async def write_eof(self, chunk: bytes = b"") -> None:
        if self._eof:
            return
        self._eof = True
        framed = b"%x\r\n%b\r\n%b" % (len(chunk), chunk, _LAST_CHUNK) if chunk else _LAST_CHUNK
        head, self._head = self._head, b""
        self._send(head + framed)

    async def drain(self) -> None:
        await self._protocol._drain_helper()

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        raise UnsupportedStreamOperation(
            "a relayed stream is not compressed: it is passed through as the model server sent it"
        )

    def enable_chunking(self) -> None:
        """Always chunked."""

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        raise UnsupportedStreamOperation("a relayed stream's head is the one given to its constructor")


class ReceivedBody:
    """A request body that arrived whole with its head (the usual case): what the inference path
    reads of aiohttp's :class:`~aiohttp.streams.StreamReader` (``is_eof``, ``read_nowait``), without
    the reader's buffers, waiters and flow control, which only a body still arriving needs."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def is_eof(self) -> bool:
        return True

    def read_nowait(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes not read yet (all with ``n < 0``); ``b""`` once all were read."""
        data = self._data
        if n < 0 or n >= len(data):
            self._data = b""
            return data
        self._data = data[n:]
        return data[:n]


class _BodyFlow:
    """What a request body's :class:`~aiohttp.streams.StreamReader` needs of its connection: pausing
    the socket while the handler has not read a large body, and the connection state. (Given the
    connection handler itself, every body read would call its ``resume_reading``, which re-enters
    ``data_received`` and the transport even when nothing was paused.)"""

    __slots__ = ("_handler", "_reading_paused", "remote")

    def __init__(self, handler: LeanRequestHandler) -> None:
        self._handler = handler
        self._reading_paused = False
        transport = handler.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        self.remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        """The client's address (for log lines)."""

    @property
    def connected(self) -> bool:
        return self._handler.transport is not None

    def pause_reading(self) -> None:
        transport = self._handler.transport
        if not self._reading_paused and transport is not None:
            self._reading_paused = True
            transport.pause_reading()

    def resume_reading(self, resume_parser: bool = True) -> None:
        transport = self._handler.transport
        if self._reading_paused and transport is not None:
            self._reading_paused = False
            transport.resume_reading()


@mypyc_attr(native_class=False)  # mypyc: an exception class stays a Python class
class _StopParsing(IgwGatewayError):
    """Raised from the parser's message-complete callback to stop it at the end of a request (the
    bytes after it are a pipelined request, kept raw): httptools then raises
    ``HttpParserCallbackError``, which :meth:`LeanRequestHandler._feed` takes for the end of the
    parse (the message is complete)."""


class _Message:
    """What the parser has told about the request being read."""

    __slots__ = (
        "bad",
        "body",
        "complete",
        "consumed",
        "fields",
        "handler",
        "head_end",
        "hosts",
        "length",
        "parts",
        "request",
        "url",
    )

    def __init__(self) -> None:
        self.url = b""
        self.fields: list[tuple[bytes, bytes]] = []
        self.hosts = 0
        """``Host`` fields seen: an HTTP/1.1 request needs exactly one (RFC 9112 3.2), else aiohttp
        answers 400."""
        self.bad = False
        """The head is outside what the lean side serves (aiohttp takes it)."""
        self.request: LeanRequest | None = None
        """Set once the head was accepted (the lean side serves the request; no handover any more)."""
        self.handler: LeanHandler | None = None
        self.parts: list[bytes] = []
        """Body bytes parsed before the handler started (in the read that completed the head)."""
        self.body: StreamReader | None = None
        """The body's reader when the body was still arriving as the handler started."""
        self.complete = False
        self.consumed = 0
        """Bytes of this connection fed to the parser since the message began."""
        self.head_end = -1
        """Bytes of the request line and headers (with the blank line)."""
        self.length = -1
        """The body's ``Content-Length`` (-1: none)."""


@mypyc_attr(native_class=False)  # mypyc: it subclasses aiohttp's handler, so it stays a Python class
class LeanRequestHandler(GatewayRequestHandler):
    """The gateway's connection handler with the lean side in front of aiohttp's (module docstring)."""

    __slots__ = (
        "_lean_app",
        "_lean_flow",
        "_lean_max_body",
        "_lean_msg",
        "_lean_parser",
        "_lean_paused",
        "_lean_pending",
        "_lean_raw",
        "_lean_routes",
        "_lean_server",
        "_lean_targets",
        "_lean_task",
    )

    def __init__(
        self, manager: GatewayServer, *, limits: ServerLimits, max_connections: int, **kwargs: Any
    ) -> None:
        super().__init__(manager, limits=limits, max_connections=max_connections, **kwargs)
        self._lean_server = manager
        app = manager.app
        routes = app.get(LEAN_ROUTES_KEY) if app is not None else None
        self._lean_app: web.Application | None = app if routes else None
        self._lean_routes: Mapping[str, LeanHandler] = routes or {}
        self._lean_max_body = app._client_max_size if app is not None else 0
        self._lean_parser: httptools.HttpRequestParser | None = None
        self._lean_raw: bytes | bytearray | None = None
        self._lean_msg: _Message | None = None
        self._lean_task: asyncio.Task[None] | None = None
        self._lean_pending = bytearray()
        """The pipelined requests read behind the one being answered, from the next one's first byte:
        one buffer, fed to the parser as it is (it stops at that request's end) and cut at the front
        (amortised: CPython moves the buffer's start) - each byte copied a bounded number of times
        however many requests one read holds. Before session s48 the rest was copied three times per
        answer (quadratic in the requests of a read)."""
        self._lean_paused = False
        """Whether the lean side paused the transport's reading (:data:`_PENDING_LIMIT`)."""
        self._lean_flow: _BodyFlow | None = None
        self._lean_targets: dict[bytes, tuple[LeanHandler | None, str, str]] = {}
        """Request target -> its lean route's handler (``None``: not a lean route), path and target
        decoded (:meth:`_target`)."""

    # ---- bytes in -------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """Parse ``data`` on the lean side, or hand the connection to aiohttp."""
        if self._lean_app is None:
            super().data_received(data)
            return
        if self._lean_task is not None and (self._lean_msg is None or self._lean_msg.complete):
            # A pipelined request behind one being answered: read once the answer is written.
            self._lean_pending += data
            if len(self._lean_pending) > _PENDING_LIMIT and not self._lean_paused:
                transport = self.transport
                if transport is not None:
                    self._lean_paused = True
                    transport.pause_reading()
            return
        rest = self._feed(data)
        if rest:  # the next (pipelined) request began in this read: kept from its first byte
            self._lean_pending += memoryview(data)[len(data) - rest :]

    def _feed_pending(self) -> None:
        """Parse the pipelined requests kept behind the one just answered (the next one, up to its
        end: the rest stays in the same buffer, its front cut off)."""
        pending, self._lean_pending = self._lean_pending, bytearray()  # taken: a handover replays it
        rest = self._feed(pending)
        if rest:
            del pending[: len(pending) - rest]  # no head of it is kept (``_lean_raw``): accepted
            self._lean_pending = pending

    def _feed(self, data: bytes | bytearray) -> int:
        """Parse ``data`` (a read, or the pipelined requests kept); returns how many of its last bytes
        follow the request that ended in it (a pipelined one: not parsed yet), else 0."""
        msg = self._lean_msg
        if msg is None:
            if not data:
                return 0
            msg = self._lean_msg = _Message()
            self._lean_raw = data  # no copy: a read is bytes; kept bytes are not cut while a head is
        elif self._lean_raw is not None:  # the head is still arriving: kept for a handover
            self._lean_raw = self._lean_raw + data
        parser = self._lean_parser
        if parser is None:  # one parser per connection, replaced after a pipelined or broken read
            parser = self._lean_parser = httptools.HttpRequestParser(self)
        msg.consumed += len(data)
        try:
            parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            # llhttp stops at an upgrade request (``Upgrade`` + ``Connection: upgrade``, or CONNECT),
            # which the lean side never serves: aiohttp takes it like any other refused head.
            if not msg.complete:  # before the head was accepted: aiohttp answers; later: cannot be
                self._hand_over() if msg.request is None else self._abort()
                return 0
        if msg.bad:
            self._hand_over()
            return 0
        request = msg.request
        if request is None:  # the head is still arriving: it has header_timeout_s to finish
            if len(self._lean_raw or b"") > _HEAD_LIMIT:  # larger than any head the lean side serves
                self._hand_over()
                return 0
            self.start_head_timer()
            return 0
        if request.content is None:  # accepted in this read: the handler starts now
            self._start(msg, request)
        if msg.complete:
            extra = msg.consumed - msg.head_end - msg.length
            if extra > 0:  # the next (pipelined) request began in the same read
                self._lean_parser = None  # it has seen part of that request
                return extra
        return 0

    def _hand_over(self) -> None:
        """aiohttp serves this connection from here on, starting with the current request's bytes."""
        raw = bytes(self._lean_raw or b"")
        # The head began in an earlier read when the head timer runs: aiohttp's side, which reads
        # the target where a head begins, would not see it begin (``raw`` is the head from its start).
        self._head_target = request_target(raw)
        self._lean_app = None
        self._lean_parser = None
        self._lean_raw = None
        self._lean_msg = None
        pending, self._lean_pending = bytes(self._lean_pending), bytearray()
        if self._lean_paused:  # aiohttp's side does its own flow control from here on
            self._lean_paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        super().data_received(raw + pending)

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # ---- httptools callbacks ------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        msg = self._lean_msg
        if msg is not None and msg.request is None:
            msg.url += url
            if len(msg.url) > MAX_REQUEST_LINE_BYTES:
                msg.bad = True

    def on_header(self, name: bytes, value: bytes) -> None:
        msg = self._lean_msg
        if msg is None or msg.request is not None:
            return
        fields = msg.fields
        # llhttp keeps a value's trailing whitespace; RFC 9110 5.5 (and aiohttp) strip it
        fields.append((name, value.strip(b" \t")))
        limits = self._limits
        size = len(name)  # read once: six or so fields per request, each checked twice
        if len(fields) > limits.max_headers or size + len(value) > limits.max_header_field_bytes:
            msg.bad = True
        elif size in _SPECIAL_NAME_LENGTHS:
            low = name.lower()
            if low == b"content-length":
                if msg.length >= 0 or not value.isdigit():  # repeated or not a number
                    msg.bad = True
                else:
                    msg.length = int(value)
            elif low == b"host":
                msg.hosts += 1
                if _VALID_HOST.fullmatch(fields[-1][1]) is None:
                    msg.bad = True
            elif low in _REFUSED_HEADERS:
                msg.bad = True

    def on_headers_complete(self) -> None:
        msg = self._lean_msg
        parser = self._lean_parser
        raw = self._lean_raw
        if msg is None or parser is None or raw is None or msg.request is not None or msg.bad:
            return
        handler = self._eligible(msg, parser, raw)
        if handler is None:
            msg.bad = True
            return
        length = msg.length
        headers: CIMultiDict[str] = CIMultiDict(
            [
                (name.decode(_CHARSET, _UNDECODABLE), value.decode(_CHARSET, _UNDECODABLE))
                for name, value in msg.fields
            ]
        )
        flow = self._lean_flow
        if flow is None:
            flow = self._lean_flow = _BodyFlow(self)
        self._lean_raw = None  # past the head: the request cannot be handed over any more
        _, path, url = self._target(msg.url)
        app = self._lean_app
        assert app is not None
        msg.handler = handler
        msg.request = LeanRequest(
            app=app,
            protocol=self,
            path=path,
            path_qs=url,
            headers=CIMultiDictProxy(headers),
            raw_fields=msg.fields,
            content_length=length,
            keep_alive=bool(parser.should_keep_alive()),
            remote=flow.remote,
        )
        # The handler starts once this read is parsed (``_start``): by then a body sent with the
        # head is complete and needs no reader.

    def on_body(self, data: bytes) -> None:
        msg = self._lean_msg
        if msg is None or msg.request is None or msg.complete:
            return
        if msg.body is not None:
            msg.body.feed_data(data)
        else:
            msg.parts.append(data)

    def on_message_complete(self) -> None:
        msg = self._lean_msg
        if msg is None or msg.complete:
            return
        if msg.request is None:  # a request aiohttp takes (ineligible head): it will see the body
            return
        msg.complete = True
        if msg.body is not None:
            msg.body.feed_eof()
        if msg.consumed > msg.head_end + msg.length:
            # A pipelined request follows in this read: it is parsed (by a fresh parser) once this
            # one is answered, so stop here. Parsed on to the read's end, every request of a read
            # was parsed again behind each answer (quadratic; before session s48).
            raise _StopParsing

    def _start(self, msg: _Message, request: LeanRequest) -> None:
        """Run the accepted request's handler, with its body as received in the head's read: whole
        (the usual case) or a reader that the following reads feed."""
        handler = msg.handler
        assert handler is not None
        parts, msg.parts = msg.parts, []
        if msg.complete:
            request.content = ReceivedBody(parts[0] if len(parts) == 1 else b"".join(parts))
        else:
            body = msg.body = StreamReader(cast(Any, self._lean_flow), _BODY_BUFFER, loop=self._loop)
            for part in parts:
                body.feed_data(part)
            request.content = body
        self._begin_request()
        self._lean_server.lean_requests += 1
        task = self._lean_task = self._loop.create_task(self._serve(request, handler))
        request.task = task

    def _eligible(
        self, msg: _Message, parser: httptools.HttpRequestParser, raw: bytes | bytearray
    ) -> LeanHandler | None:
        """The lean route's handler when the request is one the lean side serves, else ``None``."""
        if parser.get_method() != b"POST" or parser.get_http_version() != "1.1":
            return None
        handler, _, _ = self._target(msg.url)
        if handler is None or raw[:1] in (b"\r", b"\n"):
            return None
        if msg.length < 0 or msg.length > self._lean_max_body or msg.hosts != 1:
            return None
        head_end = raw.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        msg.head_end = head_end + 4
        return handler

    def _target(self, url: bytes) -> tuple[LeanHandler | None, str, str]:
        """The lean route's handler for request target ``url`` (``None`` when its path is not a lean
        route, or is percent-encoded, or the target has a fragment: aiohttp's side answers those, as
        :func:`igw.gateway.serving.target_refusal` says), the path and the target as text;
        remembered per connection (a client sends the same target request after request)."""
        found = self._lean_targets.get(url)
        if found is None:
            path, _, _ = url.partition(b"?")
            plain = b"%" not in path and b"#" not in url
            handler = self._lean_routes.get(path.decode("ascii", "replace")) if plain else None
            text = url.decode(_CHARSET, _UNDECODABLE)
            if len(self._lean_targets) >= _TARGETS_PER_CONNECTION:
                self._lean_targets.clear()
            found = self._lean_targets[url] = (handler, text.partition("?")[0], text)
        return found

    # ---- the request's life -------------------------------------------------------------------
    def _begin_request(self) -> None:
        self._request_in_progress = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _process_keepalive(self) -> None:
        """aiohttp's idle-connection timer: it does not close a connection with a lean request in
        progress (re-armed when the request ends); otherwise aiohttp's own check."""
        if self._lean_task is not None:
            self._keepalive_handle = None
            return
        super()._process_keepalive()

    async def _serve(self, request: LeanRequest, handler: LeanHandler) -> None:
        """Run the handler and write its response: a forwarded answer (the usual case) in this
        coroutine, anything else through :meth:`_write`. One coroutine for the handler's whole life
        (the handler's response is taken here, not in a coroutine of its own: a Python frame less
        to create and to resume at every wake-up of the request)."""
        keep_alive = False
        try:
            request_id = request_id_for(request.headers)
            request._values[REQUEST_ID_KEY] = request_id  # as the app's middleware does: the handler uses it
            try:
                # ``LeanRequest`` has every attribute of ``web.Request`` that the lean routes read.
                response = await handler(request)  # type: ignore[arg-type]
            except (asyncio.CancelledError, ConnectionError):
                raise
            except Exception as exc:
                keep_alive = await self._write(request, self._failed_answer(request, exc))
                return
            if isinstance(response, ForwardedAnswer):  # the usual case: head and body in one write
                transport = self.transport
                if transport is not None and not transport.is_closing():
                    keep_alive = request.keep_alive
                    transport.write(response.head(keep_alive=keep_alive) + response.body)
            else:
                if not response.prepared and REQUEST_ID_HEADER not in response.headers:
                    response.headers[REQUEST_ID_HEADER] = request_id
                keep_alive = await self._write(request, response)
        except ConnectionError:
            keep_alive = False
        finally:
            try:
                request.run_after_response()
            finally:
                # A handler cancelled (its client gone) leaves its CancelledError on this task, and
                # the error's traceback the frames that hold this request: the request naming the
                # task closed a cycle that kept the whole request until the cyclic collector ran.
                request.task = None
                self._end_request(keep_alive)

    @staticmethod
    def _failed_answer(request: LeanRequest, exc: Exception) -> web.Response:
        """The gateway's answer to a handler that raised (504 for a timeout, else 500), as on
        aiohttp's side; a ConnectionError instead when the response had started (a second head
        inside a started stream would corrupt it)."""
        status = 504 if isinstance(exc, TimeoutError) else 500
        answer = _handler_failed(request, status, None if status == 504 else exc)
        if request.response_started:
            raise ConnectionError("the response had started: the connection is closed instead") from exc
        return answer

    async def _write(self, request: LeanRequest, response: web.StreamResponse | ForwardedAnswer) -> bool:
        """Write the response; returns whether the connection stays open for the next request."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        if isinstance(response, ForwardedAnswer):  # the usual case: head and body in one write
            keep_alive = request.keep_alive
            transport.write(response.head(keep_alive=keep_alive) + response.body)
            return keep_alive
        if response.prepared:  # a relayed stream: its head and events are out already
            await response.write_eof()
            return bool(response.keep_alive)
        keep_alive = request.keep_alive if response.keep_alive is None else bool(response.keep_alive)
        body = response.body if type(response) is web.Response else None
        if isinstance(body, bytes) and not response.chunked and not response.compression:
            transport.write(
                response_head(cast(web.Response, response), len(body), keep_alive=keep_alive) + body
            )
            return keep_alive
        await response.prepare(cast(web.Request, request))
        await response.write_eof()
        return bool(response.keep_alive)

    def _end_request(self, keep_alive: bool) -> None:
        self._request_in_progress = False
        self._lean_task = None
        waiter = self._handler_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        msg = self._lean_msg
        self._lean_msg = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not keep_alive or self._force_close or self._close or msg is None or not msg.complete:
            # (a body the handler did not wait for is not drained: the connection closes)
            transport.close()
            return
        self._keepalive = True
        close_time = self._loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = self._loop.call_at(close_time, self._process_keepalive)
        if self._lean_pending:
            self._feed_pending()
        if self._lean_paused and len(self._lean_pending) <= _PENDING_LIMIT:
            self._lean_paused = False
            if not transport.is_closing():
                transport.resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        """The client went away: cancel its handler (which closes the upstream connection)."""
        msg = self._lean_msg
        if msg is not None and msg.body is not None and not msg.complete:
            msg.body.set_exception(ConnectionResetError("the client closed the connection"))
        task = self._lean_task
        if task is not None and not task.done():
            task.cancel()
        super().connection_lost(exc)
        # Both hold this handler (the parser its methods, the flow itself): left in place, each
        # closed connection's handler, parser and flow waited for the cyclic collector (session s40).
        # A body still being read keeps its own reference to the flow.
        self._lean_parser = None
        self._lean_flow = None


def _handler_failed(request: LeanRequest, status: int, exc: BaseException | None) -> web.Response:
    """The gateway's answer to a handler that timed out (504) or raised (500)."""
    return handler_failure_response(status, exc, remote=request.remote)
