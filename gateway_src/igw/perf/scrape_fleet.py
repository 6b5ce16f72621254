"""N near-free ``/metrics`` endpoints on loopback for ``igw perf scrape`` (run as its own process).

Each pod is one listening port that answers ``GET /metrics`` with a realistic vLLM page (the
simulator's page writer) and every other path with 404. The pages rotate through a few variants that
differ in a counter, so each scrape sees a changed page, as it would from a live model server.

The responder is a bare :class:`asyncio.Protocol` writing pre-encoded responses, not an HTTP
framework, on purpose: at 1,000 pods scraped every 50 ms the fleet answers 20,000 requests a second,
and it must cost far less than the scraper it measures or the benchmark measures the fleet. It only
understands what the scraper sends (keep-alive ``GET`` requests without a body).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Final, cast

from igw.perf.gateway_backend import realistic_vllm_page

VARIANTS: Final = 8
"""Distinct page bodies each pod cycles through (each scrape gets the next)."""
_NOT_FOUND: Final = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n"


def page_variants(count: int = VARIANTS) -> list[bytes]:
    """``count`` vLLM pages that differ only in the value of one counter."""
    page = realistic_vllm_page()
    marker = "process_cpu_seconds_total "
    start = page.index(marker) + len(marker)
    end = page.index("\n", start)
    return [f"{page[:start]}{100.0 + i:.1f}{page[end:]}".encode() for i in range(count)]


def responses(pages: Sequence[bytes]) -> list[bytes]:
    """The complete HTTP/1.1 answers (headers and body) for ``pages``."""
    return [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        + f"Content-Length: {len(p)}\r\n\r\n".encode()
        + p
        for p in pages
    ]


class _PodProtocol(asyncio.Protocol):
    """One connection to one pod: answer each complete request head in order."""

    def __init__(self, answers: Iterator[bytes]) -> None:
        self._answers = answers
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) != -1:
            head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
            if self._transport is not None:
                metrics = head.startswith(b"GET /metrics ")
                self._transport.write(next(self._answers) if metrics else _NOT_FOUND)


async def serve_fleet(pods: int, host: str = "127.0.0.1") -> list[asyncio.Server]:
    """Start ``pods`` listening ports; each pod's answers cycle through the page variants."""
    answers = responses(page_variants())
    loop = asyncio.get_running_loop()
    servers = []
    for i in range(pods):
        cycle = itertools.cycle(answers[i % len(answers) :] + answers[: i % len(answers)])
        servers.append(await loop.create_server(functools.partial(_PodProtocol, cycle), host, 0))
    return servers


async def run_fleet(pods: int) -> None:
    """Serve until stdin closes; print ``PORTS p1,p2,...`` once listening."""
    servers = await serve_fleet(pods)
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print("PORTS " + ",".join(map(str, ports)), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    for s in servers:
        s.close()
    for s in servers:
        await s.wait_closed()
