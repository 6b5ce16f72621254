"""One real :class:`Scraper` with its scrape client over one loopback endpoint, and a loopback vLLM pod
that answers ``name[]`` as prometheus_client does, for scraper tests."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointState
from igw.gateway.page_filter import FILTER_PARAM
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.scrape_client import ScrapeClient
from igw.gateway.scraper import PageMode, Scraper
from igw.gateway.telemetry import GatewayMetrics
from igw.perf.scrape_fleet import page_variants
from igw.sim.metrics_page import restrict_page
from tests.gateway.support import config_doc, scheduler

PAGES = [p.decode() for p in page_variants(3)]
"""Simulated vLLM pages that differ in a token counter (each scrape sees a changed page)."""


class MetricsPod:
    """A loopback pod serving vLLM pages; ``behaviour`` says how it answers a filtered request:
    ``honour`` (prometheus_client's way), ``ignore`` (the whole page), ``empty`` (200, no body) or
    ``reject`` (400); ``absent``: no ``/metrics`` page at all (404). Records each request target;
    ``down`` makes it drop connections; ``stall`` makes it stop answering, ``pages`` sets what it serves."""

    def __init__(self, behaviour: str = "honour") -> None:
        self.behaviour = behaviour
        self.targets: list[str] = []
        self.down = False
        self.stall: str | None = None
        """``freeze``: read requests, never answer, keep the connection open; ``cut``: send the head
        and half the body, then close."""
        self.pages = PAGES
        self.encoder: Callable[[bytes], bytes] | None = None
        """Applied to every answer's body, sent with ``Content-Encoding: gzip`` whether asked or not."""
        self.pages_served = 0
        """``/metrics`` answers written in full (each a successful scrape once it lands)."""
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def key(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def _answer(self, target: str) -> tuple[int, str]:
        page = self.pages[len(self.targets) % len(self.pages)]
        url = urlsplit(target)
        names = parse_qs(url.query).get(FILTER_PARAM)
        if url.path != "/metrics" or self.behaviour == "absent":
            return 404, ""
        if not names or self.behaviour == "ignore":
            return 200, page
        if self.behaviour == "empty":
            return 200, ""
        if self.behaviour == "reject":
            return 400, "bad query"
        return 200, restrict_page(page, names)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while not self.down:
                head = await reader.readuntil(b"\r\n\r\n")
                if self.down:
                    break
                if self.stall == "freeze":
                    continue
                target = head.split(b" ", 2)[1].decode()
                self.targets.append(target)
                status, body = self._answer(target)
                data = body.encode()
                coding = b""
                if self.encoder is not None:
                    data, coding = self.encoder(data), b"Content-Encoding: gzip\r\n"
                reply = b"HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s" % (status, coding, len(data), data)
                if self.stall == "cut":
                    writer.write(reply[: len(reply) - len(data) // 2])
                    await writer.drain()
                    break
                writer.write(reply)
                await writer.drain()
                self.pages_served += status == 200
        self._writers.discard(writer)
        writer.close()

    def drop_connections(self) -> None:
        for w in list(self._writers):
            w.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[MetricsPod]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        try:
            yield self
        finally:
            self._server.close()
            self.drop_connections()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()


@dataclasses.dataclass
class ScrapeRig:
    scraper: Scraper
    sr: SchedulerRuntime
    state: EndpointState

    async def scrape(self) -> None:
        await self.scraper.scrape_once(self.sr, self.state, timeout_s=2)

    @property
    def mode(self) -> PageMode | None:
        return self.scraper.page_mode(self.sr.spec.name, self.state.key)


@contextlib.asynccontextmanager
async def scrape_rig(
    key: str,
    *,
    model: str = "m",
    routing: Mapping[str, Any] | None = None,
    bbr_adapters: Mapping[str, str] | None = None,
    idle_pacing: bool = True,
    **scheduler_fields: Any,
) -> AsyncIterator[ScrapeRig]:
    """Scheduler ``s`` of ``model`` with the one endpoint ``key``; the client closes on exit."""
    rt = GatewayRuntime(
        build_gateway_config(config_doc([scheduler("s", model, **scheduler_fields)], routing=routing)),
        rng=random.Random(0),
        clock=time.monotonic,
        bbr_adapters=dict(bbr_adapters or {}),
    )
    sr = rt.schedulers["s"]
    sr.pool.replace([DiscoveredEndpoint(key=key)])
    client = ScrapeClient()
    try:
        scraper = Scraper(
            runtime=lambda: rt,
            client=client,
            clock=time.monotonic,
            metrics=GatewayMetrics(lister=rt.endpoints, clock=time.monotonic),
            idle_pacing=idle_pacing,
        )
        yield ScrapeRig(scraper, sr, sr.pool.states[key])
    finally:
        await client.close()
