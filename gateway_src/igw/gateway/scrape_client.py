"""A lean HTTP/1.1 GET client for scraping: persistent keep-alive connections per pod, nothing else.

Why not aiohttp's client, which the scraper used before: a scrape is the simplest HTTP exchange there
is (a fixed ``GET`` without a body, to one ``host:port``, answered by a page held in memory), repeated
every ``scrapeInterval`` for every pod. aiohttp builds a request object, a response object, a
connection-pool lookup, a timer context, tracing signals and a stream reader for each one, and
those dominated the cost of a scrape (docs/gateway.md, "Scrape cost", has the profile and the
measurements). This client keeps, per pod, an idle :class:`asyncio.Protocol` connection, writes a
request head encoded once per pod, and feeds the bytes that arrive to ``httptools``' response parser
(llhttp, the parser Node.js and uvicorn use) - so the HTTP grammar (chunked bodies, keep-alive rules,
malformed responses) is a maintained library's, and only the connection bookkeeping is written
here, because no maintained client exposes a connection without the per-request layers above it.

One request at a time per connection; concurrent requests to the same pod (two schedulers sharing a
pod) open a second connection. A connection the server closes, or that fails or times out, is
dropped and the next request opens a new one.

Request timeouts share timers: a request's deadline is rounded up to the next multiple of
:data:`TIMEOUT_GRAIN` and every request due in the same slot is checked by one timer, so the scraper's
groups (requests sent together) cost one timer, not one each, and a completed request cancels
nothing. A timeout therefore fires up to one grain late. A caller that wakes at known times anyway
(the scraper's group ticks) passes one of them as the deadline instead: the check then runs in the
same event-loop turn as the caller's own timer rather than waking an idle process once more (after
a long sleep a wake-up costs far more than the callback it runs: its code and data are no longer
in the CPU's caches).

Two ways to ask. :meth:`ScrapeClient.get` awaits the answer (connecting first when the pod has no idle
connection). :meth:`ScrapeClient.start` is the scraper's steady state: on an idle connection it writes
the pre-encoded request and returns at once; the connection's ``data_received`` feeds llhttp, and the
complete answer (or the failure, or the shared deadline timer's timeout) is handed to the caller's
``done`` callback from inside that callback - no task, no future and no extra event-loop turn per
scrape. Both bound the whole request: :meth:`~ScrapeClient.get` takes one deadline, ``timeout_s``
away, before it connects, so a slow connect (a SYN dropped by a full accept queue) shortens the wait
for the answer instead of adding to it; :meth:`~ScrapeClient.start` never connects (it sends only
on an idle kept-alive connection) and fails the request ``timeout_s`` after sending it, or at the
caller's deadline (the scraper's first group tick after ``timeout_s``: up to one scrape interval
later). Why llhttp and not a hand-written reader for the common fixed-length answer: llhttp is C,
a whole 2 KB answer costs it two Python callbacks, and a hand-written reader would have to repeat
its handling of chunked bodies, ``Connection: close`` and malformed heads, which is where scrape
failures come from.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable
from typing import Final, NamedTuple, Protocol, cast

import httptools
from mypy_extensions import mypyc_attr

from igw.errors import IgwGatewayError

USER_AGENT: Final = "igw-scraper"
TIMEOUT_GRAIN: Final = 0.01
"""Seconds: request deadlines in the same slot of this width share one timer."""


@mypyc_attr(native_class=False)  # mypyc: it subclasses OSError, so it stays a Python class
class ScrapeRequestError(IgwGatewayError, OSError):
    """A scrape's HTTP exchange failed: refused, reset, malformed, over the size limit, or timed out."""


class ScrapeResponse(NamedTuple):
    """A complete answer (a tuple: the cheapest immutable record to build once per scrape)."""

    status: int
    body: bytes


Landed = Callable[[int, bytes, BaseException | None], None]
"""``done(status, body, error)``: called once per started request, with ``error`` set on a failure."""


def _ignore(status: int, body: bytes, error: BaseException | None) -> None:
    """The ``done`` of a connection with no request outstanding."""


class PageGetter(Protocol):
    """What the scraper needs from an HTTP client (``igw perf scrape`` also runs aiohttp through it)."""

    async def get(self, key: str, path: str, *, timeout_s: float, max_bytes: int) -> ScrapeResponse: ...

    def forget(self, key: str) -> None: ...


def split_host_port(key: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); a clear error for anything else."""
    host, sep, port = key.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ScrapeRequestError(f"endpoint {key!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)


class _Connection:
    """One keep-alive connection to one pod; answers one request at a time.

    An asyncio protocol by its methods, not by subclassing ``asyncio.Protocol``: the event loop only
    calls them, and a subclass of a Python class stays an interpreted class in the compiled build,
    where the loop's and httptools' calls into it (several per scrape) are then interpreted too.
    """

    def __init__(
        self, on_idle: Callable[[_Connection], None], on_lost: Callable[[_Connection], None]
    ) -> None:
        self._on_idle = on_idle
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        """The connection's response parser, dropped once the connection is lost: it holds this
        protocol's methods, a reference cycle that kept each closed connection (its socket object,
        buffers and callbacks) for the cyclic collector."""
        self._done: Landed | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._max_bytes = 0
        self.request = 0
        """Number of the connection's current (or last) request: a timeout names the one it is for."""
        self.closed = False

    # ---- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # lost: nothing more to read
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ScrapeRequestError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ScrapeRequestError(f"malformed HTTP response: {exc}"))

    def eof_received(self) -> bool | None:
        """The pod closed its side: ``None`` lets the transport close (``asyncio.Protocol``'s)."""
        return None

    def pause_writing(self) -> None:
        """Nothing to pause: a request head is one small write per request."""

    def resume_writing(self) -> None:
        """See :meth:`pause_writing`."""

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._transport = None
        self._on_lost(self)
        reason = f": {exc}" if exc is not None else ""
        self._fail(ScrapeRequestError(f"the server closed the connection{reason}"))
        self._parser = None  # the cycle it closes with this protocol, broken (see __init__)

    # ---- httptools callbacks (only those defined are called: the status is read at the end) --------
    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max_bytes:
            self._fail(ScrapeRequestError(f"response body larger than {self._max_bytes} bytes"))
            return
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        done, self._done = self._done, None
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        parser = cast(httptools.HttpResponseParser, self._parser)  # it is calling this: not dropped
        status = parser.get_status_code()
        if not parser.should_keep_alive():
            self._close()
        if not self.closed:
            self._on_idle(self)  # before ``done``: it may ask the same pod again
        if done is not None:
            done(status, body, None)

    # ---- requests ---------------------------------------------------------------------------------
    def send(self, head: bytes, *, max_bytes: int, done: Landed) -> None:
        """Write ``head``; ``done`` gets the response or the failure (the caller watches the deadline)."""
        if self._transport is None or self.closed:
            raise ScrapeRequestError("the connection is closed")
        self.request += 1
        self._done = done
        self._chunks, self._size, self._max_bytes = [], 0, max_bytes
        self._transport.write(head)

    def time_out(self, request: int, timeout_s: float) -> None:
        """Fail request number ``request`` if it is still waiting (its deadline passed)."""
        if request == self.request and self._done is not None:
            self._fail(TimeoutError(f"no complete response within {timeout_s:g}s"))

    def _fail(self, exc: BaseException) -> None:
        done, self._done = self._done, None
        self._close()
        if done is not None:
            done(0, b"", exc)

    def _close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def abort(self) -> None:
        """Drop the connection now (client closing, or a request abandoned by its caller)."""
        self._fail(ScrapeRequestError("the scrape client closed the connection"))


class _Pod:
    """The idle connections to one ``host:port`` and its pre-encoded request heads."""

    __slots__ = ("heads", "host", "idle", "port")

    def __init__(self, key: str) -> None:
        self.host, self.port = split_host_port(key)
        self.idle: list[_Connection] = []
        self.heads: dict[str, bytes] = {}

    def head(self, key: str, path: str) -> bytes:
        head = self.heads.get(path)
        if head is None:
            head = self.heads[path] = (
                f"GET {path} HTTP/1.1\r\nHost: {key}\r\nUser-Agent: {USER_AGENT}\r\nAccept: */*\r\n\r\n"
            ).encode("latin-1")
        return head


class ScrapeClient:
    """``GET`` pages from pods over kept-alive connections (see the module docstring)."""

    def __init__(self) -> None:
        self._pods: dict[str, _Pod] = {}
        self._open: set[_Connection] = set()
        """Every connection not yet lost (closing the client aborts them, idle or waiting)."""
        self._closed = False
        self._slots: dict[float, list[tuple[_Connection, int, float]]] = {}
        """Deadline (event-loop time: a multiple of :data:`TIMEOUT_GRAIN`, or the caller's) -> the
        requests due then."""
        self._timers: dict[float, asyncio.TimerHandle] = {}
        self._event_loop: asyncio.AbstractEventLoop | None = None

    async def get(self, key: str, path: str, *, timeout_s: float, max_bytes: int) -> ScrapeResponse:
        """``GET path`` from the pod at ``key`` (``host:port``) within ``timeout_s`` (connect included).

        Raises :class:`ScrapeRequestError` (or ``TimeoutError``) when no complete response arrived;
        a body over ``max_bytes`` is such a failure, not a truncated page.
        """
        if self._closed:
            raise ScrapeRequestError("the scrape client is closed")
        pod = self._pods.get(key)
        if pod is None:
            pod = self._pods[key] = _Pod(key)
        conn = None
        while pod.idle:
            candidate = pod.idle.pop()
            if not candidate.closed:
                conn = candidate
                break
        loop = asyncio.get_running_loop()
        # One deadline for the connect and the answer: a connect that took most of ``timeout_s`` (a
        # SYN dropped by a pod's full accept queue is sent again after 1 s) left the answer a whole
        # ``timeout_s`` more, so a struggling pod was failed up to twice the scrape timeout late.
        deadline = math.ceil((loop.time() + timeout_s) / TIMEOUT_GRAIN) * TIMEOUT_GRAIN
        if conn is None:
            conn = await self._connect(pod, timeout_s)
        answer: asyncio.Future[ScrapeResponse] = loop.create_future()

        def done(status: int, body: bytes, error: BaseException | None) -> None:
            if answer.done():
                return
            if error is None:
                answer.set_result(ScrapeResponse(status, body))
            else:
                answer.set_exception(error)

        try:
            conn.send(pod.head(key, path), max_bytes=max_bytes, done=done)
            self._watch(loop, conn, timeout_s, deadline)
            return await answer
        except asyncio.CancelledError:
            conn.abort()  # the response may still arrive: this connection is out of step now
            raise

    def start(
        self,
        key: str,
        path: str,
        *,
        timeout_s: float,
        max_bytes: int,
        done: Landed,
        deadline: float | None = None,
    ) -> bool:
        """Send ``GET path`` to ``key`` on an idle kept-alive connection and return True; ``done``
        is then called exactly once, from the event loop's I/O or timer callback, with the answer
        or the failure (a ``TimeoutError`` after ``timeout_s``, up to one grain late, or at
        ``deadline`` - an event-loop time at least ``timeout_s`` away - when given). False, with
        nothing sent, when the pod has no idle connection (the caller connects through :meth:`get`).
        """
        pod = self._pods.get(key)
        if pod is None or self._closed:
            return False
        idle = pod.idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                conn.send(pod.head(key, path), max_bytes=max_bytes, done=done)
                self._watch(self._loop(), conn, timeout_s, deadline)
                return True
        return False

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self._event_loop
        if loop is None:
            loop = self._event_loop = asyncio.get_running_loop()
        return loop

    def _watch(
        self,
        loop: asyncio.AbstractEventLoop,
        conn: _Connection,
        timeout_s: float,
        deadline: float | None = None,
    ) -> None:
        """Time out ``conn``'s current request at ``deadline``, or after ``timeout_s`` (up to one
        grain later)."""
        if deadline is None:
            deadline = math.ceil((loop.time() + timeout_s) / TIMEOUT_GRAIN) * TIMEOUT_GRAIN
        due = self._slots.get(deadline)
        if due is None:
            due = self._slots[deadline] = []
            self._timers[deadline] = loop.call_at(deadline, self._expire, deadline)
        due.append((conn, conn.request, timeout_s))

    def _expire(self, deadline: float) -> None:
        del self._timers[deadline]
        for conn, request, timeout_s in self._slots.pop(deadline, ()):
            conn.time_out(request, timeout_s)

    def _idle(self, pod: _Pod, conn: _Connection) -> None:
        """``conn``, done with its request, waits for the next one to ``pod`` (unless closing)."""
        if not self._closed:
            pod.idle.append(conn)

    async def _connect(self, pod: _Pod, timeout_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        # A partial, not a nested function: compiled by mypyc, a nested function the factory below
        # refers to is kept in the environment both hold, a reference cycle left by each connection.
        on_idle = functools.partial(self._idle, pod)
        try:
            async with asyncio.timeout(timeout_s):
                _, made = await loop.create_connection(
                    lambda: cast(asyncio.BaseProtocol, _Connection(on_idle, self._open.discard)),
                    pod.host,
                    pod.port,
                )
        except TimeoutError:
            raise TimeoutError(f"connect not completed within {timeout_s:g}s") from None
        except OSError as exc:
            raise ScrapeRequestError(f"connect failed: {exc.strerror or exc}") from exc
        protocol = cast(_Connection, made)
        if self._closed:
            protocol.abort()
            raise ScrapeRequestError("the scrape client is closed")
        self._open.add(protocol)
        return protocol

    def forget(self, key: str) -> None:
        """Close the idle connections to ``key`` (the pod left the pools)."""
        pod = self._pods.pop(key, None)
        if pod is not None:
            for conn in pod.idle:
                conn.abort()

    async def close(self) -> None:
        self._closed = True
        for key in list(self._pods):
            self.forget(key)
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._slots.clear()
        await asyncio.sleep(0)  # let the transports' close callbacks run
