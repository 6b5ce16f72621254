"""The scraper reads the LoRA family only where adapter requests can arrive (a real scrape on loopback)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.scrape_client import ScrapeClient
from igw.gateway.scraper import Scraper
from igw.gateway.telemetry import GatewayMetrics
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


async def _scrape_once(key: str, bbr_adapters: dict[str, str], **extra: Any) -> Any:
    rt = GatewayRuntime(
        build_gateway_config(config_doc([scheduler("s", "base", **extra)])),
        rng=random.Random(0),
        clock=time.monotonic,
        bbr_adapters=bbr_adapters,
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
        )
        state = sr.pool.states[key]
        await scraper.scrape_once(sr, state, timeout_s=2)
    finally:
        await client.close()
    return state


@pytest.mark.parametrize(
    ("extra", "bbr", "adapters"),
    [
        ({}, {}, None),  # no adapter can reach this scheduler: the family is not read
        ({"loraAdapters": ["sql"]}, {}, frozenset({"sql"})),
        ({}, {"sql": "base"}, frozenset({"sql"})),  # a bbr-managed adapter of this model
        ({}, {"sql": "other-model"}, None),
    ],
)
async def test_lora_family_is_read_only_where_adapters_route(
    extra: dict[str, Any], bbr: dict[str, str], adapters: frozenset[str] | None
) -> None:
    async with running(FakeModelServer("p", max_lora=2, running_adapters="sql")) as (pod,):
        state = await _scrape_once(pod.key, bbr, **extra)
    assert state.metrics is not None
    assert state.metrics.waiting == 0
    assert state.metrics.active_adapters == adapters
    assert state.metrics.max_lora == (None if adapters is None else 2)
    assert not any("lora" in m for m in state.missing)
