"""One real :class:`Scraper` with its scrape client over one loopback endpoint, for scraper tests."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointState
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.scrape_client import ScrapeClient
from igw.gateway.scraper import PageMode, Scraper
from igw.gateway.telemetry import GatewayMetrics
from tests.gateway.support import config_doc, scheduler


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
