"""N near-free ``/metrics`` endpoints on loopback for ``igw perf scrape`` (run as its own process).

Each pod is one listening port that answers ``GET /metrics`` with a realistic vLLM page (the
simulator's page writer) and every other path with 404. The pages rotate through a few variants that
differ in the generation-token counter, so each scrape sees a changed page, as it would from a live
model server. ``GET /metrics?name[]=...`` is answered as vLLM's prometheus_client app answers it
(only the named samples, :func:`igw.sim.metrics_page.restrict_page`), unless the fleet was started
with ``filter_names=False`` (a server that ignores the filter).

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
from urllib.parse import parse_qs

from igw.perf.gateway_backend import realistic_vllm_page
from igw.sim.metrics_page import NAME_FILTER, restrict_page

VARIANTS: Final = 8
"""Distinct page bodies each pod cycles through (each scrape gets the next)."""
_NOT_FOUND: Final = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n"


def page_variants(count: int = VARIANTS) -> list[bytes]:
    """``count`` vLLM pages that differ only in the value of the generation-token counter (a sample
    the scraper's filtered request includes, so filtered pages differ as well)."""
    page = realistic_vllm_page()
    start = page.index("\nvllm:generation_tokens_total{")
    start = page.index("} ", start) + 2
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


class Answers:
    """The complete responses every pod cycles through, per query string (filtered on first use)."""

    def __init__(self, pages: Sequence[bytes], *, filter_names: bool) -> None:
        self._pages = pages
        self._filter = filter_names
        self._by_query: dict[bytes, list[bytes]] = {b"": responses(pages)}

    def get(self, query: bytes) -> list[bytes]:
        found = self._by_query.get(query if self._filter else b"")
        if found is None:
            names = parse_qs(query.decode("latin-1")).get(NAME_FILTER, [])
            pages = [restrict_page(p.decode(), names).encode() for p in self._pages]
            found = self._by_query[query] = responses(pages)
        return found


class _PodProtocol(asyncio.Protocol):
    """One connection to one pod: answer each complete request head in order."""

    def __init__(self, answers: Answers, turns: Iterator[int]) -> None:
        self._answers = answers
        self._turns = turns
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) != -1:
            head, self._buffer = self._buffer[:end], self._buffer[end + 4 :]
            if self._transport is None:
                continue
            target = head.split(b" ", 2)[1] if head.startswith(b"GET ") else b""
            path, _, query = target.partition(b"?")
            if path != b"/metrics":
                self._transport.write(_NOT_FOUND)
                continue
            answers = self._answers.get(query)
            self._transport.write(answers[next(self._turns) % len(answers)])


async def serve_fleet(
    pods: int,
    host: str = "127.0.0.1",
    *,
    filter_names: bool = True,
    variants: int = VARIANTS,
    busy: int | None = None,
) -> list[asyncio.Server]:
    """Start ``pods`` listening ports; the first ``busy`` pods (default: all) cycle through ``variants``
    pages, the others are idle pods whose page never changes (as does every pod with ``variants=1``)."""
    answers = Answers(page_variants(variants), filter_names=filter_names)
    idle = Answers(page_variants(1), filter_names=filter_names)
    busy = pods if busy is None else busy
    loop = asyncio.get_running_loop()
    servers = []
    for i in range(pods):
        pages = answers if i < busy else idle
        factory = functools.partial(_PodProtocol, pages, itertools.count(i))  # one turn per pod
        servers.append(await loop.create_server(factory, host, 0))
    return servers


async def run_fleet(
    pods: int, *, filter_names: bool = True, variants: int = VARIANTS, busy: int | None = None
) -> None:
    """Serve until stdin closes; print ``PORTS p1,p2,...`` once listening."""
    servers = await serve_fleet(pods, filter_names=filter_names, variants=variants, busy=busy)
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
