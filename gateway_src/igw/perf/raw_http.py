"""A cheap loopback load generator and backend for throughput benchmarks (``igw perf workers``).

On a machine with few cores the load generator and the backend share the CPU with the gateway: with
aiohttp on both ends they cost about half as much CPU per request as the gateway itself, so two
gateway workers cannot get the cores they need and the throughput ratio measures the machine. Both
ends here are plain asyncio protocols with httptools (llhttp) parsing and pre-encoded messages, a
fraction of aiohttp's per-request cost. Written by hand because the job is deliberately minimal: a
closed-loop HTTP/1.1 keep-alive client and a canned-answer server, with nothing else on the path.

Only what the benchmark needs: non-streaming ``POST`` with ``Content-Length`` bodies, answers with
``Content-Length``; the backend answers ``POST /v1/completions`` and ``/v1/chat/completions`` with a
fixed completion, ``GET /metrics`` with a given page and ``GET /health`` with ``ok``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

from igw.errors import IgwToolingError
from igw.perf.activity_page import ActivityPage

_OK_JSON: bytes = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
_OK_TEXT: bytes = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
_NOT_FOUND: bytes = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class RawHttpError(IgwToolingError, RuntimeError):
    """A raw benchmark exchange failed (a non-200 answer, a closed connection, a parse error)."""


def canned_answers(*, completion: bytes, metrics_page: bytes) -> dict[tuple[bytes, bytes], bytes]:
    """``(method, path) -> whole response`` for the backend."""
    infer = (_OK_JSON % len(completion)) + completion
    return {
        (b"POST", b"/v1/completions"): infer,
        (b"POST", b"/v1/chat/completions"): infer,
        (b"GET", b"/metrics"): (_OK_TEXT % len(metrics_page)) + metrics_page,
        (b"GET", b"/health"): (_OK_TEXT % 2) + b"ok",
    }


class BackendProtocol(asyncio.Protocol):
    """One connection to the canned-answer backend (keep-alive, requests answered in order).

    With ``metrics``, ``GET /metrics`` answers that page as it stands, and every ``POST`` moves its
    activity counters (as a live engine's move; see :mod:`igw.perf.activity_page`).
    """

    def __init__(
        self, answers: dict[tuple[bytes, bytes], bytes], metrics: ActivityPage | None = None
    ) -> None:
        self._answers = answers
        self._metrics = metrics
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_message_complete(self) -> None:
        path = self._url.partition(b"?")[0]
        self._url = b""
        method = self._parser.get_method()
        metrics = self._metrics
        if metrics is not None and method == b"POST":
            metrics.served += 1
        if metrics is not None and path == b"/metrics":
            page = metrics.render()
            answer = (_OK_TEXT % len(page)) + page
        else:
            answer = self._answers.get((method, path), _NOT_FOUND)
        if self._transport is not None:
            self._transport.write(answer)


async def serve_backend(
    answers: dict[tuple[bytes, bytes], bytes], *, port: int = 0, metrics: ActivityPage | None = None
) -> asyncio.Server:
    """Start the backend on loopback (``port`` 0: any free port); the caller closes the server."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: BackendProtocol(answers, metrics), "127.0.0.1", port, backlog=1024
    )


class _ClientConnection(asyncio.Protocol):
    """One keep-alive client connection: one request in flight, its answer's end resolves a future."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._done: asyncio.Future[int] | None = None
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(RawHttpError(f"bad response: {exc}"))

    def on_message_complete(self) -> None:
        done, self._done = self._done, None
        if done is not None and not done.done():
            done.set_result(self._parser.get_status_code())

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RawHttpError("the server closed the connection"))

    def _fail(self, error: RawHttpError) -> None:
        done, self._done = self._done, None
        if done is not None and not done.done():
            done.set_exception(error)
        if not self._lost.done():
            self._lost.set_result(None)

    def exchange(self, request: bytes) -> asyncio.Future[int]:
        """Send ``request``; the future resolves to the answer's status when its body has arrived."""
        if self._transport is None or self._lost.done():
            raise RawHttpError("the connection is closed")
        done = self._done = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return done

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def completion_request(host: str, body: bytes) -> bytes:
    """A ``POST /v1/completions`` request with ``body``, pre-encoded."""
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass(frozen=True, slots=True)
class ClosedLoopResult:
    requests: int
    wall_s: float
    latencies_s: list[float]


async def closed_loop(
    base: str, *, concurrency: int, requests: int, request_for: Callable[[int], bytes]
) -> ClosedLoopResult:
    """``concurrency`` keep-alive connections to ``base`` (``host:port``), each sending the next of
    ``requests`` requests (``request_for(i)``) as soon as its previous answer arrived. Any non-200
    answer or lost connection raises :class:`RawHttpError`."""
    host, _, port = base.rpartition(":")
    loop = asyncio.get_running_loop()
    connections: list[_ClientConnection] = []
    try:
        for _ in range(concurrency):
            _transport, conn = await loop.create_connection(_ClientConnection, host, int(port))
            connections.append(conn)
        counter = iter(range(requests))
        latencies: list[float] = []
        clock = time.perf_counter

        async def drive(conn: _ClientConnection) -> None:
            for i in counter:
                t0 = clock()
                status = await conn.exchange(request_for(i))
                latencies.append(clock() - t0)
                if status != 200:
                    raise RawHttpError(f"{base}: HTTP {status}")

        started = clock()
        await asyncio.gather(*(drive(conn) for conn in connections))
        return ClosedLoopResult(requests=requests, wall_s=clock() - started, latencies_s=latencies)
    finally:
        for conn in connections:
            conn.close()
