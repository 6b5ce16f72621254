"""A pod's IP reused by another pod: the scraper starts the new pod afresh.

:meth:`EndpointPool.replace` makes an address that now names another pod a new endpoint (a new
:class:`EndpointState`). The scraper kept its per-address state: the old pod's page mode (filtered),
when ``/v1/models`` was last read (so the new pod's context window stayed unknown for up to
:data:`MODEL_INFO_REFRESH_S`), and the "model not listed" flag. Real scraper and client, a real
loopback pod whose behaviour changes as if another pod took its address.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time

import orjson
import pytest

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointState
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.scrape_client import ScrapeClient
from igw.gateway.scraper import PAGE_MISSING, WHOLE_PAGE, FilteredPage, Scraper
from igw.gateway.telemetry import GatewayMetrics
from tests.gateway.scrape_support import MetricsPod
from tests.gateway.support import FAST_ROUTING, config_doc, scheduler, wait_for


class ModelPod(MetricsPod):
    """A :class:`MetricsPod` that also answers ``/v1/models`` with ``models`` (model id -> limit)."""

    def __init__(self, behaviour: str, models: dict[str, int]) -> None:
        super().__init__(behaviour)
        self.models = models

    def _answer(self, target: str) -> tuple[int, str]:
        if target == "/v1/models":
            data = [{"id": name, "object": "model", "max_model_len": n} for name, n in self.models.items()]
            return 200, orjson.dumps({"object": "list", "data": data}).decode()
        return super()._answer(target)


async def test_a_new_pod_behind_a_reused_address_is_scraped_afresh() -> None:
    rt = GatewayRuntime(
        build_gateway_config(config_doc([scheduler("s", "m")], routing=FAST_ROUTING)),
        rng=random.Random(0),
        clock=time.monotonic,
    )
    pool = rt.schedulers["s"].pool
    pod = ModelPod("honour", {"other-model": 4096})  # the old pod: serves another model
    client = ScrapeClient()
    async with pod.running():
        scraper = Scraper(
            runtime=lambda: rt,
            client=client,
            clock=time.monotonic,
            metrics=GatewayMetrics(lister=rt.endpoints, clock=time.monotonic),
        )
        try:
            pool.replace([DiscoveredEndpoint(key=pod.key, pod="ns/old")])
            scraper.sync()
            old = pool.states[pod.key]
            await wait_for(lambda: old.max_model_len == 4096, what="the old pod's context window")
            await wait_for(
                lambda: isinstance(scraper.page_mode("s", pod.key), FilteredPage), what="the filter checked"
            )
            assert ("s", pod.key) in scraper._unlisted

            # Another pod gets the address: it serves the pool's model with another context window,
            # and (an older server) ignores the name[] filter.
            pod.models, pod.behaviour = {"m": 8192}, "ignore"
            added, removed = pool.replace([DiscoveredEndpoint(key=pod.key, pod="ns/new")])
            assert added == removed == [pod.key]
            scraper.sync()
            new = pool.states[pod.key]
            assert new is not old
            await wait_for(lambda: new.max_model_len == 8192, what="the new pod's context window")
            await wait_for(
                lambda: scraper.page_mode("s", pod.key) == WHOLE_PAGE, what="the filter checked again"
            )
            assert ("s", pod.key) not in scraper._unlisted
        finally:
            await scraper.close()
            await client.close()


def _all_report(states: list[EndpointState], family: str) -> bool:
    return all(family in s.missing for s in states)


async def test_missing_signal_warnings_of_pods_that_left_are_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pods without ``/metrics`` come and go (a fleet rolled daily, new pod IPs each time): each is
    warned about once, and the record of what was warned leaves with the pod. It kept every address
    ever seen (one entry per address and missing family, for the gateway's lifetime) until session
    s39. Real scraper and client, real loopback pods answering 404."""
    rt = GatewayRuntime(
        build_gateway_config(config_doc([scheduler("s", "m")], routing=FAST_ROUTING)),
        rng=random.Random(0),
        clock=time.monotonic,
    )
    pool = rt.schedulers["s"].pool
    client = ScrapeClient()
    scraper = Scraper(
        runtime=lambda: rt,
        client=client,
        clock=time.monotonic,
        metrics=GatewayMetrics(lister=rt.endpoints, clock=time.monotonic),
    )
    rounds, per_round = 6, 10
    try:
        with caplog.at_level(logging.WARNING, logger="igw.gateway.scraper"):
            for r in range(rounds):
                async with contextlib.AsyncExitStack() as stack:
                    pods = [
                        await stack.enter_async_context(MetricsPod("absent").running())
                        for _ in range(per_round)
                    ]
                    pool.replace(
                        [DiscoveredEndpoint(key=p.key, pod=f"ns/pod-{r}-{i}") for i, p in enumerate(pods)]
                    )
                    scraper.sync()
                    states = [pool.states[p.key] for p in pods]
                    await wait_for(
                        functools.partial(_all_report, states, PAGE_MISSING),
                        what="every pod's missing /metrics reported",
                    )
                    assert len(scraper._reported) == per_round
                    pool.replace([])  # the whole round rolled away
                    scraper.sync()
                    assert scraper._reported == {}, f"round {r}: kept {len(scraper._reported)} addresses"
    finally:
        await scraper.close()
        await client.close()
    warned = [r for r in caplog.records if "does not publish /metrics" in r.getMessage()]
    assert len(warned) == rounds * per_round  # each pod once, none twice
