"""A group's steady-state scrapes run from its tick's timer and the client's I/O callbacks (real loopback).

No task is created per scrape once an endpoint's page mode is known; a member that does not answer (a
frozen pod that keeps its connection open, a pod that closes mid-answer) is marked failing at its
deadline while the rest of its group goes on being scraped, and it comes back through a fresh
connection once it answers again. A scrape writes only the endpoint fields that changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import AsyncIterator, Generator
from typing import Any

import pytest
import uvloop

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint, EndpointState
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.scrape_client import Landed, ScrapeClient
from igw.gateway.scrape_pacing import SCRAPE_GROUP
from igw.gateway.scraper import FilteredPage, Scraper
from igw.gateway.telemetry import GatewayMetrics
from igw.perf.scrape_setup import fleet as perf_fleet
from tests.compiled.tree import skip_compiled
from tests.gateway.scrape_support import PAGES, MetricsPod, scrape_rig
from tests.gateway.support import config_doc, scheduler, wait_for


class RecordingClient(ScrapeClient):
    """The gateway's scrape client, noting each steady-path request: (pod, loop time sent, deadline)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[tuple[str, float, float | None]] = []

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
        sent = super().start(
            key, path, timeout_s=timeout_s, max_bytes=max_bytes, done=done, deadline=deadline
        )
        if sent:
            self.started.append((key, asyncio.get_running_loop().time(), deadline))
        return sent


@contextlib.asynccontextmanager
async def fleet(
    count: int, client: ScrapeClient | None = None
) -> AsyncIterator[tuple[list[MetricsPod], GatewayRuntime, Scraper, GatewayMetrics]]:
    """``count`` pods in scheduler ``s``, scraped every 50 ms (timeout 500 ms) by a real scraper."""
    async with contextlib.AsyncExitStack() as stack:
        pods = [await stack.enter_async_context(MetricsPod().running()) for _ in range(count)]
        routing = {"scrapeInterval": "50ms", "scrapeTimeout": "500ms", "staleThreshold": "2s"}
        rt = GatewayRuntime(
            build_gateway_config(config_doc([scheduler("s", "m")], routing=routing)),
            rng=random.Random(0),
            clock=time.monotonic,
        )
        rt.schedulers["s"].pool.replace(DiscoveredEndpoint(key=p.key) for p in pods)
        client = client or ScrapeClient()
        metrics = GatewayMetrics(lister=rt.endpoints, clock=time.monotonic)
        scraper = Scraper(
            runtime=lambda: rt, client=client, clock=time.monotonic, metrics=metrics, idle_pacing=False
        )
        try:
            scraper.sync()
            yield pods, rt, scraper, metrics
        finally:
            await scraper.close()
            await client.close()


def _state(rt: GatewayRuntime, pod: MetricsPod) -> EndpointState:
    return rt.schedulers["s"].pool.states[pod.key]


@contextlib.contextmanager
def tasks_created() -> Generator[list[asyncio.Task[Any]], None, None]:
    """The tasks created while inside (the running loop's task factory, restored after; a task's
    name is set after the factory returns, so read names later)."""
    loop = asyncio.get_running_loop()
    created: list[asyncio.Task[Any]] = []
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Future[Any]:
        task = asyncio.Task(coro, loop=loop)
        created.append(task)
        return task

    loop.set_task_factory(factory)
    try:
        yield created
    finally:
        loop.set_task_factory(previous)


async def _settled(rt: GatewayRuntime, scraper: Scraper, pods: list[MetricsPod]) -> None:
    """Every pod read through the filter and scraped at least twice (past its first, task-run scrape)."""
    await wait_for(
        lambda: all(
            isinstance(scraper.page_mode("s", p.key), FilteredPage) and len(p.targets) >= 3 for p in pods
        ),
        within=10,
        what="every pod on the steady path",
    )


async def test_steady_state_scrapes_of_a_group_create_no_task() -> None:
    async with fleet(3) as (pods, rt, scraper, _):
        await _settled(rt, scraper, pods)
        with tasks_created() as created:
            before = [len(p.targets) for p in pods]
            await wait_for(
                lambda: all(len(p.targets) >= b + 5 for p, b in zip(pods, before, strict=True)),
                within=10,
                what="five more scrapes of every pod",
            )
        scrape_tasks = [t.get_name() for t in created if t.get_name().startswith("scrape ")]
        assert scrape_tasks == []
        for pod in pods:
            state = _state(rt, pod)
            assert not state.scrape_failing
            assert state.metrics == parse_page(PAGES[0], VLLM).metrics  # the pages' gauges are alike


@pytest.mark.parametrize("failure", ["freeze", "cut"])
async def test_a_member_that_does_not_answer_fails_alone_and_comes_back(failure: str) -> None:
    async with fleet(3) as (pods, rt, scraper, _):
        await _settled(rt, scraper, pods)
        bad, good = pods[0], pods[1:]
        bad.stall = failure
        before = [len(p.targets) for p in good]
        await wait_for(lambda: _state(rt, bad).scrape_failing, within=10, what="the pod marked failing")
        error = _state(rt, bad).last_error or ""
        if failure == "freeze":
            assert error.startswith("scrape failed: TimeoutError: no complete response within 0.5s")
            # the group went on while the frozen member waited for its deadline (10 intervals)
            assert all(len(p.targets) >= b + 2 for p, b in zip(good, before, strict=True))
        else:
            assert "closed the connection" in error
        assert not any(_state(rt, p).scrape_failing for p in good)
        connections = bad.connections
        bad.stall = None
        await wait_for(lambda: not _state(rt, bad).scrape_failing, within=10, what="the pod back")
        assert bad.connections > connections  # a fresh connection: the broken one was dropped
        assert _state(rt, bad).last_error is None


async def test_a_scrape_writes_only_changed_fields_and_reads_new_values() -> None:
    async with MetricsPod().running() as pod, scrape_rig(pod.key) as r:
        for _ in range(4):
            await r.scrape()  # the filter check, the template built, then read through it
        notified: list[str] = []
        r.state.on_view_change = notified.append
        metrics = r.state.metrics
        await r.scrape()  # only a token counter moved: the reading stands
        assert r.state.metrics is metrics
        assert notified == [pod.key]  # scraped_at alone
        assert metrics is not None
        line = 'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} '
        assert metrics.waiting == 0
        assert line + "0.0" in PAGES[0]
        pod.pages = [PAGES[0].replace(line + "0.0", line + "7.0")]
        notified.clear()
        await r.scrape()
        assert r.state.metrics is not None
        assert r.state.metrics.waiting == 7
        assert r.state.metrics.running == metrics.running
        assert r.state.metrics.kv_usage == metrics.kv_usage
        assert sorted(notified) == [pod.key, pod.key]  # metrics and scraped_at


async def test_the_scrape_counter_counts_every_landed_page() -> None:
    async with fleet(3) as (pods, rt, scraper, metrics):
        await _settled(rt, scraper, pods)
        await wait_for(lambda: all(p.pages_served >= 10 for p in pods), within=10, what="ten pages each")
        await scraper.close()
        served = sum(p.pages_served for p in pods)
        ok = metrics.registry.get_sample_value("igw_endpoint_scrapes_total", {"result": "ok"})
    assert ok is not None
    # every page that landed was counted once; a page written as the scraper closed may not have
    assert served - len(pods) <= ok <= served


async def test_new_bbr_adapters_change_what_the_steady_path_asks_for() -> None:
    async with fleet(2) as (pods, rt, scraper, _):
        await _settled(rt, scraper, pods)
        assert not any("lora" in t for p in pods for t in p.targets)
        rt.with_bbr_adapters({"sql": "m"})  # adapter requests can now reach scheduler s
        await wait_for(
            lambda: all(any("lora_requests_info" in t for t in p.targets) for p in pods),
            within=10,
            what="the LoRA family asked for",
        )


@skip_compiled(
    "igw.gateway.scrape_client",
    "RecordingClient subclasses ScrapeClient, which mypyc refuses to interpreted subclasses",
)
async def test_a_frozen_member_fails_at_its_groups_first_tick_after_its_timeout_never_before() -> None:
    client = RecordingClient()
    async with fleet(3, client) as (pods, rt, scraper, _):
        await _settled(rt, scraper, pods)
        bad = pods[0]
        bad.stall = "freeze"
        loop = asyncio.get_running_loop()
        frozen_at = loop.time()
        await wait_for(lambda: _state(rt, bad).scrape_failing, within=10, what="the pod marked failing")
        failed_at = loop.time()
        sent = [(at, deadline) for key, at, deadline in client.started if key == bad.key and at >= frozen_at]
        assert sent, "the frozen pod was asked on the steady path"
        at, deadline = sent[0]  # the request it never answered (the only one: it is still in flight)
        assert deadline is not None
        assert deadline >= at + 0.5 - 1e-6  # the timeout is never cut short
        assert failed_at >= at + 0.5 - 0.002  # (the loop's clock is read to the millisecond)
        # every deadline is one of the group's ticks (one group of 3: every 50 ms on the loop clock),
        # so the client checks it in the tick's own event-loop turn, and the requests a tick sends
        # share it: one check per group, not per member
        assert SCRAPE_GROUP >= 3
        deadlines = [d for _, _, d in client.started]
        assert all(d is not None and abs(d / 0.05 - round(d / 0.05)) < 1e-6 for d in deadlines)
        ticks = {math.floor(at / 0.05) for _, at, _ in client.started}
        assert len(set(deadlines)) <= len(ticks)
        assert not any(_state(rt, p).scrape_failing for p in pods[1:])


@skip_compiled(
    "igw.gateway.scrape_client",
    "RecordingClient subclasses ScrapeClient, which mypyc refuses to interpreted subclasses",
)
def test_each_member_is_asked_once_per_tick_on_uvloop() -> None:
    """uvloop's clock runs in whole milliseconds and fires a timer up to one before its due time: an
    answer landing in that millisecond must still wait for the group's next tick, not the one it was
    sent at (which would scrape it twice in one tick). Three groups (phases off the millisecond),
    answered by ``igw perf scrape``'s fleet in its own process (answers land within a millisecond)."""

    async def scenario() -> list[tuple[str, float, float | None]]:
        client = RecordingClient()
        async with perf_fleet(2 * SCRAPE_GROUP + 1) as (_, ports):
            rt = GatewayRuntime(
                build_gateway_config(
                    config_doc(
                        [scheduler("s", "m")],
                        routing={"scrapeInterval": "50ms", "scrapeTimeout": "500ms", "staleThreshold": "2s"},
                    )
                ),
                rng=random.Random(0),
                clock=time.monotonic,
            )
            rt.schedulers["s"].pool.replace(DiscoveredEndpoint(key=f"127.0.0.1:{p}") for p in ports)
            metrics = GatewayMetrics(lister=rt.endpoints, clock=time.monotonic)
            scraper = Scraper(runtime=lambda: rt, client=client, clock=time.monotonic, metrics=metrics)
            try:
                scraper.sync()
                keys = list(rt.schedulers["s"].pool.states)
                await wait_for(
                    lambda: all(isinstance(scraper.page_mode("s", k), FilteredPage) for k in keys),
                    within=10,
                    what="every pod on the steady path",
                )
                await asyncio.sleep(0.2)
                client.started.clear()
                await asyncio.sleep(1.0)
            finally:
                await scraper.close()
                await client.close()
        return client.started

    started = uvloop.run(scenario())
    assert len(started) > 2 * SCRAPE_GROUP * 5  # the steady path ran
    # a request's deadline is its group's first tick after the tick it was sent at plus the timeout:
    # two requests of one pod with the same deadline were sent at the same tick
    asked = [(key, deadline) for key, _, deadline in started]
    assert len(asked) == len(set(asked))
