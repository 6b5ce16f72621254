"""The forward path's HTTP/1.1 client: pooled keep-alive connections, an asyncio protocol per
connection, and httptools (llhttp) parsing the responses.

Why not aiohttp's client here: a proxied request needs one thing from it - POST a body that is
already in memory and hand back the status, headers and body bytes as they arrive - but
``ClientSession.post`` builds a request object, a response object, a stream reader, timer handles
and trace hooks for every call, and that machinery is the largest single share of the gateway's CPU
per request. This module does only what the forward path needs: the request head is built as one
string and written with the body in one call, response bytes go straight from ``data_received``
through the parser into a list the relay drains. The part that has to be exactly right (response
framing, chunked decoding, keep-alive rules) is llhttp's, through httptools; nothing here parses
HTTP by hand.

Behaviour the forward path relies on:

* ``TCP_NODELAY`` on every connection (a streamed event must not wait for the previous one's ACK);
* the requests handed over in one event-loop turn are written at the turn's end, together
  (:meth:`UpstreamPool.queue_write`), so the model server wakes once for them;
* TCP keep-alive probes on every connection (:data:`igw.gateway.tcp_keepalive.UPSTREAM`): a pod
  whose node vanished (terminated instance, network partition: no RST ever comes) fails its
  connection with ``ETIMEDOUT`` after about 30 s of silence instead of leaving a non-streamed
  request - silent until complete, with no ``routeTimeout`` by default - open for as long as its
  client waits; a live but busy model server's kernel answers the probes;
* a connect failure (refused, unreachable, DNS, ``connect_timeout_s``) raises :class:`ConnectFailed`,
  which the caller may retry elsewhere; waiting for a free connection slot is not a connect failure;
* a pooled connection the server closed while idle (the keep-alive race) is replaced by a fresh one
  once, when not a byte of the response had arrived - the server never saw the request;
* a response whose connection closes before it is complete raises :class:`UpstreamBroken`, as does
  one whose head (interim responses included) passes :data:`MAX_RESPONSE_HEAD_BYTES` unfinished, and
  one whose status is outside 100-599 (``HTTP/1.1 000 X``: neither an interim response to wait past
  nor a status to relay), and one with more than :data:`MAX_RESPONSE_FIELDS` header fields, a field
  line past :data:`MAX_RESPONSE_FIELD_BYTES` or fields past :data:`MAX_RESPONSE_FIELDS_BYTES` in all;
* a pooled connection that receives bytes while idle (no request in flight), or bytes after its
  response's end, is closed, never reused: unsolicited bytes left in the parser would be read as the
  start of the next request's response (a desync: the next answer read as the junk's continuation);
* reading pauses while more than :data:`READ_HIGH_WATER` bytes wait to be relayed (a slow client
  slows the model server's socket, not the gateway's memory); a whole body read at once
  (:meth:`UpstreamResponse.read`, a non-streamed answer) is collected as it comes, so reading never
  stays paused, up to :data:`MAX_WHOLE_BODY_BYTES`;
* a connection goes back to the pool only after a complete response with keep-alive; anything else
  (cancellation included: a client that went away) aborts it, so the model server sees the
  disconnect and stops generating;
* :meth:`UpstreamPool.end_stalled`, called on a timer (once a second: the gateway's
  :mod:`igw.gateway.upstream_watchdog`), ends requests whose connection has been silent too long -
  waiting for a response head past the response timeout, or to an endpoint its caller declared
  unresponsive - with :class:`UpstreamStalled`. Silence is measured without a timer or a clock read
  per request: each connection keeps a flag that every received byte (and every new request) sets,
  and the sweep notes when it last found the flag set and clears it, so a connection's silence is
  known to within one sweep.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple, Protocol, cast

import httptools
from multidict import CIMultiDict

from igw.errors import IgwGatewayError
from igw.gateway.slots import Slots
from igw.gateway.tcp_keepalive import UPSTREAM, probe_silent_peer

READ_HIGH_WATER: Final = 256 * 1024
"""Unrelayed response bytes at which the connection stops reading from the model server."""
ORIGIN_CACHE_SIZE: Final = 4096
"""Endpoint strings whose parsed :class:`Origin` is kept (one per pod, typically)."""
MAX_WHOLE_BODY_BYTES: Final = 256 * 1024 * 1024
"""Largest non-streamed answer :meth:`UpstreamResponse.read` collects (the request path holds at
most :data:`~igw.gateway.upstream.WHOLE_ANSWER_BUFFER_BYTES` of a success and
:data:`~igw.gateway.upstream.ERROR_ANSWER_BUFFER_BYTES` of an error answer, then relays it). Far above a
real completion - logprobs with ``top_logprobs=20`` on 32k tokens is ~40 MB - and it bounds the memory
a broken or hostile model server (an endless body delimited by the connection's end) can take."""
SMALL_BODY: Final = 64 * 1024
"""Bodies up to this size are written in the same call as the request head (one segment)."""
MAX_RESPONSE_HEAD_BYTES: Final = 256 * 1024
"""Most bytes a response may take to complete its head (status line and header fields, interim
``1xx`` responses before it included). A model server's head is a few hundred bytes; before session
s39 nothing bounded it: llhttp reports a header field only once it is whole, and httptools
accumulates its value by concatenation, so a broken or hostile model server streaming one endless
field (or endless fields, or endless ``103 Early Hints``) grew the gateway's memory without limit
(from 77 MB to 490 MB resident in 20 s, one request) while the request waited for a head that never came."""

MAX_RESPONSE_FIELDS: Final = 100
"""Most header fields a response may have (Envoy's ``max_headers_count``, which it applies to
upstream responses too; the gateway's own ``--max-headers`` default for requests). A model server
sends about five; the gateway relays what it sends, and before session s40 a head of thousands of
fields reached the client, whose HTTP library refused it with an error of its own (aiohttp's client
``400, message='Too many headers received'``, read as the gateway's 400; Python's ``http.client``
``got more than 100 headers``) instead of the gateway's 502 ``upstream_error``."""

MAX_RESPONSE_FIELD_BYTES: Final = 8190
"""The longest header field line (name, ``: ``, value) a response may have: aiohttp's client refuses
a longer one (its ``max_field_size``), and the gateway relays the model server's fields as they
came. Before session s42 a field of up to :data:`MAX_RESPONSE_HEAD_BYTES` reached the client, whose
HTTP library failed with an error of its own (aiohttp's ``400, message="Got more than 8190 bytes
when reading"``, read as the gateway's 400) instead of the gateway's 502 ``upstream_error``."""
MAX_RESPONSE_FIELDS_BYTES: Final = 16 * 1024
"""The most bytes a response's header fields may take in all: h11 (httpx, so the OpenAI Python SDK)
and Node's HTTP parser refuse a response head over 16 KiB. A model server's fields take a few
hundred bytes. Also what bounds a head that completed in the read that passed
:data:`MAX_RESPONSE_HEAD_BYTES` (that bound is checked between reads)."""


NOTED_FIELDS: Final = frozenset(
    {
        b"connection",
        b"content-type",
        b"content-length",
        b"transfer-encoding",
        b"content-encoding",
        b"date",
    }
)
"""Response fields whose values the forward path reads (lower case), kept aside as they are parsed."""
_NOTED_LENGTHS: Final = frozenset(len(name) for name in NOTED_FIELDS)


_CHARSET: Final = "utf-8"
_UNDECODABLE: Final = "surrogateescape"
"""Header text encoded back to the bytes it was decoded from (as aiohttp's parser decodes them)."""


class UnsafeFieldValue(IgwGatewayError):
    """A header field's value with a line break or NUL: written, it would end the field (or the head)
    early and make the rest into fields or a request of the caller's choosing (header injection,
    request smuggling on a pooled connection)."""


def safe_field_value(name: str, value: str) -> str:
    """``value``, checked to be writable as the value of field ``name`` (:class:`UnsafeFieldValue`
    otherwise). Every field the gateway writes into a request head of its own making passes here,
    whatever checked its source first (a model name with a control character is a 400 before it
    gets this far: ``igw.gateway.request_body``). ``isprintable`` passes ordinary values in one scan."""
    if value.isprintable() or not ("\r" in value or "\n" in value or "\0" in value):
        return value
    raise UnsafeFieldValue(f"header field {name!r} has a line break or NUL in its value")


def header_lines(headers: Mapping[str, str]) -> bytes:
    """``headers`` as a request head's field lines (``name: value\\r\\n`` each, in order)."""
    return "".join(
        [f"{name}: {safe_field_value(name, value)}\r\n" for name, value in headers.items()]
    ).encode(_CHARSET, _UNDECODABLE)


_MEDIA_TYPES: dict[bytes, str] = {}
"""``Content-Type`` values seen -> their media type (a model server sends one or two distinct values)."""


def _media_type(content_type: bytes) -> str:
    """``Content-Type``'s media type, lower case, without parameters."""
    found = _MEDIA_TYPES.get(content_type)
    if found is None:
        found = content_type.split(b";", 1)[0].strip().lower().decode("latin-1")
        if len(_MEDIA_TYPES) >= ORIGIN_CACHE_SIZE:
            _MEDIA_TYPES.clear()  # values are the model servers' to choose: bounded like the origins
        _MEDIA_TYPES[content_type] = found
    return found


class ConnectFailed(IgwGatewayError):
    """The upstream could not be connected to: safe to retry elsewhere."""


class UpstreamBroken(IgwGatewayError):
    """The model server's connection closed, or sent bytes that are not HTTP, before the response
    was complete."""


class UpstreamStalled(UpstreamBroken):
    """The gateway stopped waiting for a model server that sent nothing for too long (see
    :meth:`UpstreamPool.end_stalled`); ``reason`` is ``"unresponsive"`` (the endpoint was declared
    unresponsive) or ``"response_timeout"`` (no response head within the response timeout).
    ``public``: what the client is told, which names no address (a pod's IP and port, a cluster's
    internal URL: an information leak); the message itself (``str()``), for the logs, may."""

    def __init__(self, message: str, *, reason: str, public: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.public = public


class Origin(NamedTuple):
    """Where a connection goes: pooled connections are shared per origin. A named tuple (immutable,
    compared by value) rather than a frozen dataclass: the pool looks an origin up twice per request,
    and a tuple hashes in C where a dataclass runs a generated Python ``__hash__``."""

    host: str
    port: int
    tls: bool

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def parse_origin(endpoint: str) -> Origin:
    """``host:port`` (a pod), or ``http(s)://host[:port]`` (a base URL such as a global router's
    cluster); raises ValueError for anything else."""
    tls = False
    rest = endpoint
    if "://" in endpoint:
        scheme, rest = endpoint.split("://", 1)
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported upstream scheme {scheme!r} in {endpoint!r}")
        tls = scheme == "https"
        rest = rest.split("/", 1)[0]
    default_port = 443 if tls else 80
    if rest.startswith("["):  # [v6]:port
        host, _, tail = rest[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else default_port
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
        port = int(port_text)
    else:
        host, port = rest, default_port
    if not host:
        raise ValueError(f"no host in upstream address {endpoint!r}")
    return Origin(host=host, port=port, tls=tls)


class _Unsolicited(IgwGatewayError):
    """Raised inside the parser when a response begins after the current one's end: nothing asked for
    it, and parsed it would overwrite the current response's status, reason and fields."""


class _Connection:
    """One connection to a model server, parsing one response at a time.

    An asyncio protocol by its methods, not by subclassing ``asyncio.Protocol``: the event loop (and
    its TLS layer) only calls them, and a subclass of a Python class stays an interpreted class in
    the compiled build, where the loop's and httptools' dozen calls into it per request, and every
    attribute the response and the pool read of it, are then interpreted too.
    """

    status: int
    reason: str
    fields: list[tuple[bytes, bytes]]
    noted: dict[bytes, bytes]
    headers_done: bool
    complete: bool
    keep_alive: bool
    received_any: bool
    error: Exception | None
    chunks: deque[bytes]
    buffered: int
    paused: bool
    until_eof: bool
    heard: bool
    """Set by every byte received and by every request sent; cleared by the pool's stall sweep."""
    head_bytes: int
    """Bytes received for the current response while its head was still incomplete."""
    idle: bool
    """Kept in the pool with no request written to it: any byte arriving now is unsolicited."""
    first_bytes: Callable[[bytes], None] | None
    """Called once with the response's first body bytes as they are parsed, before they are queued
    (:meth:`UpstreamResponse.on_first_bytes`)."""

    def __init__(self, pool: UpstreamPool, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.reused = False
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        """Dropped once the connection is lost: it holds this protocol's methods, a reference cycle
        that kept each closed connection (and what its last response held) for the cyclic collector."""
        self._waiter: asyncio.Future[None] | None = None
        self.silent_since = 0.0
        """The loop time of the stall sweep that last found :attr:`heard` set (or first saw the
        connection)."""
        self.idle = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = ""
        self.fields = []
        self.noted = {}
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.received_any = False
        self.error = None
        self.chunks = deque()
        self.buffered = 0
        self.paused = False
        self.until_eof = False
        self.heard = True
        self.head_bytes = 0
        self.first_bytes = None

    # ---- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport subclass
        self.pool.opened(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            probe_silent_peer(sock, UPSTREAM)

    def data_received(self, data: bytes) -> None:
        if self.idle:
            # Bytes no request asked for (a model server's stray or late answer): fed to the parser,
            # they would begin the next request's response. Closed and dropped, as HTTP clients do.
            self.abort()
            return
        parser = self._parser
        if parser is None:  # lost: nothing more to read
            return
        self.received_any = True
        self.heard = True
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamBroken(f"{self.pool.peer} switched protocols"))
            return
        except httptools.HttpParserError as exc:
            if self.complete:  # bytes after the response's end: the response stands, the connection not
                self.abort()
                return
            self._fail(UpstreamBroken(f"malformed HTTP response from {self.pool.peer}: {exc}"))
            return
        if not self.headers_done:  # counted only until the head is complete: one comparison after it
            self.head_bytes += len(data)
            if self.head_bytes > MAX_RESPONSE_HEAD_BYTES and self.error is None:
                self._fail(
                    UpstreamBroken(
                        f"{self.pool.peer}'s response head is larger than {MAX_RESPONSE_HEAD_BYTES} bytes"
                    )
                )

    def eof_received(self) -> bool:
        self.closed = True  # never handed out again, even before connection_lost runs
        return False  # close the transport; connection_lost decides what the EOF meant

    def pause_writing(self) -> None:
        """Nothing to pause: a request is written once, whole (``asyncio.Protocol``'s no-op)."""

    def resume_writing(self) -> None:
        """See :meth:`pause_writing`."""

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.headers_done and self.until_eof and not self.complete and self.error is None:
            self.complete = True  # a body delimited by the connection's end
        elif not self.complete and self.error is None:
            why = f": {exc}" if exc is not None else ""
            self.error = UpstreamBroken(f"{self.pool.peer} closed the connection{why}")
        self._parser = None  # the cycle it closes with this protocol, broken (see __init__)
        self._wake()

    # ---- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:  # a response after the final one, unasked for: stop before it is parsed
            raise _Unsolicited

    def on_status(self, status: bytes) -> None:
        self.reason = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))
        if len(name) in _NOTED_LENGTHS:  # most names are passed over by their length alone
            low = name.lower()
            if low in NOTED_FIELDS:
                noted = self.noted
                if low not in noted:
                    noted[low] = value
                elif low == b"connection":  # every Connection field counts (RFC 9110 7.6.1)
                    noted[low] += b"," + value

    def on_headers_complete(self) -> None:
        parser = cast(httptools.HttpResponseParser, self._parser)  # it is calling this: not dropped
        status = parser.get_status_code()
        if not 100 <= status <= 599:  # no HTTP status: neither interim nor one to relay
            self._fail(UpstreamBroken(f"{self.pool.peer} answered with status {status}, outside 100-599"))
            return
        if status < 200:  # an interim response (100 Continue): the real one follows
            self.fields = []
            self.noted = {}
            return
        if len(self.fields) > MAX_RESPONSE_FIELDS:
            self._fail(
                UpstreamBroken(
                    f"{self.pool.peer}'s response has more than {MAX_RESPONSE_FIELDS} header fields"
                )
            )
            return
        oversized = _oversized_fields(self.fields)
        if oversized is not None:
            self._fail(UpstreamBroken(f"{self.pool.peer}'s response has {oversized}"))
            return
        dropped = self.pool.dropped_fields
        if dropped:
            self.fields = [field for field in self.fields if field[0].lower() not in dropped]
        self.status = status
        self.keep_alive = parser.should_keep_alive()
        framed = b"content-length" in self.noted or b"transfer-encoding" in self.noted
        self.until_eof = not framed and status not in (204, 304)
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        first = self.first_bytes
        if first is not None:
            self.first_bytes = None
            first(body)
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > READ_HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.headers_done:
            return  # the end of an interim response
        self.complete = True
        self._wake()

    # ---- used by the pool and the response -----------------------------------------------------
    def _fail(self, error: Exception) -> None:
        self.error = error
        self.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def progress(self) -> asyncio.Future[None]:
        """A future done when the parser reports progress (what :meth:`wait` waits for, without a
        timeout): awaited directly, without a coroutine of its own around it. A cancelled or
        completed one left behind is harmless (:meth:`_wake` skips a future that is done)."""
        waiter = self._waiter = self.pool.loop.create_future()
        return waiter

    async def wait(self, timeout_s: float | None = None) -> None:
        """Until the parser reports progress (headers, body bytes, the end, or an error), or at most
        ``timeout_s`` (one timer handle: cheaper per streamed event than an ``asyncio.timeout``)."""
        self._waiter = self.pool.loop.create_future()
        timer = None if timeout_s is None else self.pool.loop.call_later(timeout_s, self._wake)
        try:
            await self._waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> bytes:
        """Every body byte received so far (and resume reading if it was paused)."""
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
        return data

    def send(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.pool.queue_write(self, head, body)

    def write_now(self, head: bytes, body: bytes) -> None:
        """Write the request (the pool's end-of-turn flush); a connection closed or aborted since
        the request was queued gets nothing (its request has already failed or been retried)."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        self.idle = False  # from here on, bytes received are this request's response
        if len(body) <= SMALL_BODY:
            transport.write(head + body)
        else:
            transport.writelines((head, body))

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _streaming(conn: _Connection) -> bool:
    """Whether ``conn``'s response is an event stream (its head arrived, ``text/event-stream``)."""
    ctype = conn.noted.get(b"content-type") if conn.headers_done else None
    return ctype is not None and _media_type(ctype) == "text/event-stream"


def _oversized_fields(fields: Sequence[tuple[bytes, bytes]]) -> str | None:
    """What makes a response head's ``fields`` too large to relay (a field line past
    :data:`MAX_RESPONSE_FIELD_BYTES`, all of them past :data:`MAX_RESPONSE_FIELDS_BYTES`), else None."""
    total = 0
    for name, value in fields:
        line = len(name) + len(value) + 2
        if line > MAX_RESPONSE_FIELD_BYTES:
            return f"a header field line of {line} bytes, more than {MAX_RESPONSE_FIELD_BYTES}"
        total += line + 2
    if total > MAX_RESPONSE_FIELDS_BYTES:
        return f"header fields of {total} bytes in all, more than {MAX_RESPONSE_FIELDS_BYTES}"
    return None


class UpstreamResponse:
    """A model server's response whose head has arrived; the body is read with :meth:`read` or
    :meth:`readany`. :meth:`close` must be called (it returns the connection to the pool or ends it)."""

    __slots__ = ("_conn", "_headers", "_released", "content_type", "fields", "noted", "reason", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self._released = False
        self.status = conn.status
        self.reason = conn.reason
        self.fields = conn.fields
        """The header fields as received (raw name and value bytes, in order)."""
        self.noted = conn.noted
        """The first value of each of the :data:`NOTED_FIELDS` present (lower-case name; every
        ``Connection`` field's value, joined with commas)."""
        self._headers: CIMultiDict[str] | None = None
        ctype = self.noted.get(b"content-type")
        self.content_type = "application/octet-stream" if ctype is None else _media_type(ctype)

    @property
    def headers(self) -> CIMultiDict[str]:
        """The header fields decoded (as aiohttp's parser decodes them), made on first use."""
        headers = self._headers
        if headers is None:
            headers = self._headers = CIMultiDict(
                (name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape"))
                for name, value in self.fields
            )
        return headers

    async def readany(self, timeout_s: float | None = None) -> bytes | None:
        """The body bytes that have arrived (waiting for some); ``b""`` at the end of the body;
        ``None`` when ``timeout_s`` passed without any. Raises :class:`UpstreamBroken` when the
        connection fails before the end."""
        conn = self._conn
        deadline = None if timeout_s is None else conn.pool.loop.time() + timeout_s
        while not conn.chunks:
            if conn.complete:
                return b""
            if conn.error is not None:
                raise conn.error
            if deadline is None:
                await conn.progress()
                continue
            left = deadline - conn.pool.loop.time()
            if left <= 0:
                return None
            await conn.wait(left)
        return conn.take()

    @property
    def ended(self) -> bool:
        """Whether the body's end has arrived and every byte before it was read: the next
        :meth:`readany` returns ``b""`` at once (a relay joins what it read last to its client's end
        of stream, one write instead of two)."""
        conn = self._conn
        return conn.complete and not conn.chunks

    def on_first_bytes(self, callback: Callable[[bytes], None]) -> None:
        """Have ``callback`` called with the body's first bytes inside the read that brings them, still
        queued for :meth:`readany` as usual: a relay writes them to its client there, without the
        event-loop turn and the resumption of its waiting coroutine in between (the first event's
        path is what a streamed request's time to first token waits for). Only while nothing of the
        body arrived yet; the callback must not raise. Cleared by :meth:`close`."""
        conn = self._conn
        if not conn.chunks and not conn.complete and conn.error is None:
            conn.first_bytes = callback

    def received(self) -> bytes | None:
        """The whole body when it has all arrived already (the usual case for a complete answer: it
        came in the same read as the head), else ``None`` (then :meth:`read` waits for it)."""
        conn = self._conn
        if conn.complete:
            return conn.take()
        return None

    async def read(self) -> bytes:
        """The whole body. Raises :class:`UpstreamBroken` when the connection fails before its end
        or the body passes :data:`MAX_WHOLE_BODY_BYTES`.

        Reading pauses at :data:`READ_HIGH_WATER` unrelayed bytes; the bytes are taken (which resumes
        it) as they come, else any body larger than that would wait for its end forever."""
        conn = self._conn
        parts: list[bytes] = []
        size = 0
        while not conn.complete:
            if conn.error is not None:
                raise conn.error
            if conn.paused:
                part = conn.take()
                size += len(part)
                if size > MAX_WHOLE_BODY_BYTES:
                    conn.abort()
                    raise UpstreamBroken(f"the response body is larger than {MAX_WHOLE_BODY_BYTES} bytes")
                parts.append(part)
            await conn.progress()
        if not parts:
            return conn.take()
        parts.append(conn.take())
        return b"".join(parts)

    def close(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        conn.first_bytes = None
        reusable = conn.complete and conn.keep_alive and not conn.closed and not conn.chunks
        self._conn.pool.release(conn, reusable=reusable)


class ConnectHooks(Protocol):
    """Observes one request's getting a connection and sending its head (the tracing connect span).

    Called in the task that sends the request, so a hook can find that request's context.
    """

    def connect_started(self) -> None: ...

    def connection_reused(self) -> None: ...

    def connect_done(self, error: str | None = None) -> None: ...


class UpstreamPool:
    """Keep-alive connections per origin, at most ``limit`` open at once (a request waits for a
    slot rather than failing), idle ones closed after ``keepalive_s``. ``hooks``: told when a request
    starts getting a connection, whether it reused one, and when its head was handed to the
    connection (written at the end of that loop turn: :meth:`queue_write`) or it failed. ``peer``:
    how the failures' messages (:class:`UpstreamBroken`, :class:`UpstreamStalled`) name what the
    pool connects to - a tier-1 gateway's model servers, or a global router's cluster (``"the
    cluster"``: until session s48 a cluster's broken answer was logged as ``cluster 'east-1': the
    model server closed the connection``). ``dropped_fields``: lower-case names of response fields
    taken out of every response's fields, whichever way the answer is then relayed."""

    def __init__(
        self,
        *,
        limit: int,
        keepalive_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        hooks: ConnectHooks | None = None,
        peer: str = "the model server",
        dropped_fields: frozenset[bytes] = frozenset(),
    ):
        self.loop = asyncio.get_running_loop()
        self.peer = peer
        self.dropped_fields = dropped_fields
        """Lower-case names of response fields never handed over (after the field count and size
        bounds counted them): both tiers' :data:`~igw.gateway.forwarded_answer.ORIGIN_FIELDS`."""
        self._hooks = hooks
        self._slots = Slots(limit)
        self._idle: dict[Origin, list[_Connection]] = {}
        self._origins: dict[str, tuple[Origin, bytes]] = {}
        """Endpoint string -> its origin and the request head's start up to its header fields
        (``Host`` included), encoded once per endpoint."""
        self._keepalive_s = keepalive_s
        self._ssl_context = ssl_context
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._open: set[_Connection] = set()
        """Every connection whose transport is open (idle or carrying a request)."""
        self._queued: list[tuple[_Connection, bytes, bytes]] = []
        """Requests handed to their connections in this loop turn, written at its end."""

    @property
    def full(self) -> bool:
        """Whether every connection slot is held: a request now would wait for one (a tier-2 router
        tries another cluster instead, :mod:`igw.global_router.server`)."""
        return self._slots.locked()

    def queue_write(self, conn: _Connection, head: bytes, body: bytes) -> None:
        """Write ``conn``'s request once the loop turn's other ready callbacks have run: the requests
        a turn hands over reach the model server together, so it wakes once for them instead of once
        per request (a gateway handling several requests a turn otherwise feeds it one at a time, each
        a request's handling apart). Costs the first request of a turn the handling of the others
        (at concurrency 1, one queued callback)."""
        queued = self._queued
        queued.append((conn, head, body))
        if len(queued) == 1:
            self.loop.call_soon(self._write_queued)

    def _write_queued(self) -> None:
        queued = self._queued
        self._queued = []
        for conn, head, body in queued:
            conn.write_now(head, body)

    async def post(
        self,
        endpoint: str,
        path_qs: str,
        *,
        headers: Mapping[str, str] | bytes,
        body: bytes,
        connect_timeout_s: float | None,
        head_timeout_s: float | None = None,
        method: bytes = b"POST",
    ) -> UpstreamResponse:
        """Send the request (a ``POST`` unless ``method`` says otherwise: a stored response's
        retrieval is a ``GET``) and wait for the response head. ``headers``: a mapping, or its fields
        already serialised (``name: value\\r\\n`` lines, as :func:`header_lines` writes them).
        ``head_timeout_s`` bounds all of it (a free slot, a connection, the head) with TimeoutError:
        on the pooled path it is one timer, armed once the request is written (the exchange's own
        ``asyncio.timeout`` put a timer and a context object before the write of every streamed
        request); waiting for a slot or a new connection, which only happens when they would
        suspend, runs inside ``asyncio.timeout_at``."""
        if self._closed:
            raise RuntimeError("the upstream pool is closed")
        known = self._origins.get(endpoint)
        if known is None:
            try:
                origin = parse_origin(endpoint)
            except ValueError as bad_endpoint:
                raise ConnectFailed(str(bad_endpoint)) from bad_endpoint
            if len(self._origins) >= ORIGIN_CACHE_SIZE:
                self._origins.clear()  # endpoints come and go; a bound keeps the cache from growing forever
            known = self._origins[endpoint] = (
                origin,
                f"Host: {origin.host_header}\r\n".encode(_CHARSET, _UNDECODABLE),
            )
        origin, host_line = known
        block = headers if isinstance(headers, bytes) else header_lines(headers)
        head = b"%b %b HTTP/1.1\r\n%b%bContent-Length: %d\r\n\r\n" % (
            method,
            path_qs.encode(_CHARSET, _UNDECODABLE),
            host_line,
            block,
            len(body),
        )
        hooks = self._hooks
        if hooks is not None:
            hooks.connect_started()
        deadline = None if head_timeout_s is None else self.loop.time() + head_timeout_s
        slots = self._slots
        if not slots.try_take():  # a free slot (the usual case) is taken by one native call
            if deadline is None:
                await slots.take()
            else:
                async with asyncio.timeout_at(deadline):
                    await slots.take()
        conn: _Connection | None = None
        try:
            conn = self._reuse(origin) or await self._connect_by(origin, connect_timeout_s, deadline)
            if hooks is not None and conn.reused:
                hooks.connection_reused()
            conn.send(head, body)
            if hooks is not None:
                hooks.connect_done()
            while not conn.headers_done:
                error = conn.error
                if error is None:
                    if deadline is None:
                        await conn.progress()
                        continue
                    left = deadline - self.loop.time()
                    if left <= 0:
                        raise TimeoutError(f"no response head within {head_timeout_s:g}s")
                    await conn.wait(left)
                elif conn.reused and not conn.received_any:
                    # The keep-alive race: the server closed this idle connection as we sent.
                    conn = await self._connect_by(origin, connect_timeout_s, deadline)
                    conn.send(head, body)
                else:
                    raise error
        except BaseException as exc:
            if hooks is not None:
                hooks.connect_done(str(exc) if isinstance(exc, ConnectFailed) else type(exc).__name__)
            if conn is not None:
                conn.abort()
            slots.release()
            raise
        return UpstreamResponse(conn)

    def _reuse(self, origin: Origin) -> _Connection | None:
        """A pooled connection to ``origin`` still open and within its keep-alive time, if any."""
        idle = self._idle.get(origin)
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive_s:
                conn.reused = True
                return conn
            conn.abort()
        return None

    async def _connect_by(
        self, origin: Origin, connect_timeout_s: float | None, deadline: float | None
    ) -> _Connection:
        """A new connection; past ``deadline`` (the loop's clock) TimeoutError, as before the head."""
        if deadline is None:
            return await self._connect(origin, connect_timeout_s)
        async with asyncio.timeout_at(deadline):
            return await self._connect(origin, connect_timeout_s)

    async def _connect(self, origin: Origin, connect_timeout_s: float | None) -> _Connection:
        tls = self._tls_context() if origin.tls else None
        try:
            async with asyncio.timeout(connect_timeout_s):
                _, made = await self.loop.create_connection(
                    lambda: cast(asyncio.BaseProtocol, _Connection(self, origin)),
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                )
        except TimeoutError as timed_out:
            raise ConnectFailed(
                f"ConnectionTimeoutError: connect to {origin.host}:{origin.port}"
            ) from timed_out
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
        return cast(_Connection, made)

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def release(self, conn: _Connection, *, reusable: bool) -> None:
        """A response is done with its connection: keep it for the next request, or end it."""
        self._slots.release()
        if not reusable or self._closed:
            conn.abort()
            return
        conn.idle_since = self.loop.time()
        conn.idle = True
        self._idle.setdefault(conn.origin, []).append(conn)
        if self._sweep_timer is None:
            # A timer, not the next release, closes connections left idle: after a burst no release
            # may come, and each would hold a descriptor (and a model server's slot) forever.
            self._sweep_timer = self.loop.call_later(self._keepalive_s, self._timed_sweep)

    def _timed_sweep(self) -> None:
        self._sweep_timer = None
        self._sweep(self.loop.time())
        if self._idle and not self._closed:
            oldest = min(conn.idle_since for idle in self._idle.values() for conn in idle)
            delay = max(oldest + self._keepalive_s - self.loop.time(), 0.0) + 0.001
            self._sweep_timer = self.loop.call_later(delay, self._timed_sweep)

    def opened(self, conn: _Connection) -> None:
        """A connection's transport is open (the stall sweep looks at every open connection)."""
        self._open.add(conn)

    def end_stalled(
        self,
        *,
        response_timeout_s: float | None,
        unresponsive: Mapping[str, str],
        silent_for_s: float,
    ) -> dict[str, int]:
        """End the requests whose connection has been silent too long; how many, by reason.

        A request still waiting for its response head after ``response_timeout_s`` of silence
        (``None``: no bound), or for the rest of a body that is not an event stream (a whole
        answer; a stream's gaps are the relay's ``streamIdleTimeout``), ends with reason
        ``response_timeout``; one to an endpoint of
        ``unresponsive`` (endpoint -> why it is declared so, for the message) silent for
        ``silent_for_s`` ends with reason ``unresponsive``. Each is failed with
        :class:`UpstreamStalled` and its connection aborted (the model server, should it wake,
        sees the disconnect). Silence is counted from the sweep that last found the connection's
        :attr:`~_Connection.heard` flag set, so it is known to within the time between two sweeps:
        call this on a timer, not per request."""
        now = self.loop.time()
        dead: dict[Origin, str] = {}
        for endpoint, why in unresponsive.items():
            known = self._origins.get(endpoint)
            try:
                dead[known[0] if known is not None else parse_origin(endpoint)] = why
            except ValueError:
                continue
        ended: dict[str, int] = {}
        for conn in list(self._open):
            if conn.closed or conn.complete or conn.error is not None:
                continue  # idle (its last response complete), or already failing
            if conn.heard:
                conn.heard = False
                conn.silent_since = now
                continue
            silent = now - conn.silent_since
            declared = dead.get(conn.origin)
            where = f"{conn.origin.host}:{conn.origin.port}"
            if declared is not None and silent >= silent_for_s:
                why = f"({declared}; nothing received for {silent:.0f}s)"
                public = f"{self.peer} stopped responding {why}"
                message = f"{self.peer} at {where} stopped responding {why}"
                reason = "unresponsive"
            elif response_timeout_s is not None and silent >= response_timeout_s and not _streaming(conn):
                what = "stopped sending its response for" if conn.headers_done else "sent no response within"
                public = f"{self.peer} {what} {response_timeout_s:g}s"
                message = f"{self.peer} at {where} {what} {response_timeout_s:g}s"
                reason = "response_timeout"
            else:
                continue
            conn._fail(UpstreamStalled(message, reason=reason, public=public))
            ended[reason] = ended.get(reason, 0) + 1
        return ended

    def forget(self, conn: _Connection) -> None:
        """A connection closed: drop it from the open set and the idle lists (it may be in one)."""
        self._open.discard(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)

    def _sweep(self, now: float) -> None:
        for origin, idle in list(self._idle.items()):
            keep = [c for c in idle if not c.closed and now - c.idle_since < self._keepalive_s]
            for conn in idle:
                if conn not in keep:
                    conn.abort()
            if keep:
                self._idle[origin] = keep
            else:
                del self._idle[origin]

    async def close(self) -> None:
        """Close every idle connection; connections in use are ended when their response closes."""
        self._closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        for idle in self._idle.values():
            for conn in list(idle):
                conn.abort()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run connection_lost
