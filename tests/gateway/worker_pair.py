"""In-process workers of one ``igw serve --workers N`` group, for the scrape-channel tests.

Each :class:`Worker` has its own runtime (scheduler ``s`` for model ``m`` over the given pods), its
own metrics and the scrape service its role gets (worker 0 scrapes and leads, the others follow),
all talking over the real unix socket in the test's directory.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from pathlib import Path

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointState
from igw.gateway.runtime import GatewayRuntime, SchedulerRuntime
from igw.gateway.scrape_client import ScrapeClient
from igw.gateway.scrape_share import start_scraping
from igw.gateway.scraper import ScrapeService
from igw.gateway.telemetry import GatewayMetrics
from igw.gateway.workers import WorkerRole
from tests.gateway.support import config_doc, scheduler


def worker_runtime(
    *keys: str,
    stale_threshold: str = "300ms",
    weights: Mapping[str, float] | None = None,
    scrape_interval: str | None = None,
) -> GatewayRuntime:
    spec = scheduler("s", "m") if weights is None else scheduler("s", "m", weights=dict(weights))
    routing = {"staleThreshold": stale_threshold}
    if scrape_interval is not None:
        routing["scrapeInterval"] = scrape_interval
    config = build_gateway_config(config_doc([spec], routing=routing))
    rt = GatewayRuntime(config, rng=random.Random(0), clock=time.monotonic)
    rt.schedulers["s"].pool.replace([DiscoveredEndpoint(key=key) for key in keys])
    return rt


class Worker:
    def __init__(
        self, index: int, directory: Path, *keys: str, count: int = 2, runtime: GatewayRuntime | None = None
    ) -> None:
        self.role = WorkerRole(index=index, count=count, directory=str(directory))
        self.runtime = runtime if runtime is not None else worker_runtime(*keys)
        self.metrics = GatewayMetrics(lister=self.runtime.endpoints, clock=time.monotonic)
        self.client = ScrapeClient()
        self.service: ScrapeService | None = None

    @property
    def scheduler(self) -> SchedulerRuntime:
        return self.runtime.schedulers["s"]

    @property
    def state(self) -> EndpointState:
        return next(iter(self.scheduler.pool.states.values()))

    async def start(self) -> None:
        self.service = await start_scraping(
            self.role,
            runtime=lambda: self.runtime,
            client=self.client,
            clock=time.monotonic,
            metrics=self.metrics,
        )
        self.service.sync()

    async def close(self) -> None:
        if self.service is not None:
            await self.service.close()
        await self.client.close()
