"""Faults in the simulated fleet, behind an in-process gateway: frozen metrics, context length,
pod killed mid-stream, stale exclusion and recovery, overload, slow readers."""

from __future__ import annotations

import asyncio
import collections
import logging
import tracemalloc
from pathlib import Path

import aiohttp
import orjson
import pytest

from igw.sim.live import run_fleet
from igw.sim.spec import FaultKind, FaultSpec
from tests.gateway.support import data_events
from tests.reliability.harness import (
    MODEL,
    fleet_spec,
    gateway_doc,
    in_process_gateway,
    served_by,
    wait_until,
)


async def send_many(
    gw: object, n: int, *, concurrency: int, max_tokens: int = 16
) -> collections.Counter[str]:
    """``n`` completions, ``concurrency`` at a time; how many each pod served."""
    served: collections.Counter[str] = collections.Counter()
    queue = list(range(n))

    async def worker() -> None:
        while queue:
            i = queue.pop()
            resp = await gw.complete(f"request {i} " + "word " * (i % 7), max_tokens=max_tokens)  # type: ignore[attr-defined]
            assert resp.status == 200, await resp.text()
            served[served_by(await resp.json())] += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return served


async def test_frozen_metrics_page_is_excluded_and_trusted_again_when_it_moves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="igw.gateway.scraper")
    spec = fleet_spec("llama-3.1-8b/h100", "llama-3.1-8b/h100", "llama-3.1-8b/h100")
    async with run_fleet(spec, admin=False) as fleet:
        keys = [p.key for p in fleet.pods]
        async with in_process_gateway(tmp_path, gateway_doc(), keys) as gw:
            await fleet.inject("p0", FaultSpec(kind=FaultKind.FREEZE_METRICS))
            served = await send_many(gw, 90, concurrency=6)
            frozen = gw.endpoint(keys[0])
            # Bounded detection: staleThreshold (400 ms here) after the first unreflected dispatch.
            await wait_until(lambda: frozen.page.frozen, within=10, what="the frozen page detected")
            served += await send_many(gw, 30, concurrency=6)
            total = sum(served.values())
            assert served["p0"] <= 2 * total / 3  # at most twice its fair share (1/3)
            assert not gw.fresh(keys[0])
            assert all(gw.fresh(k) for k in keys[1:])
            metrics = await (await gw.http.get(gw.url + "/metrics")).text()
            assert f'igw_endpoint_metrics_frozen{{endpoint="{keys[0]}",scheduler="{MODEL}"}} 1.0' in metrics
            readyz = await (await gw.http.get(gw.url + "/readyz")).json()
            assert readyz["schedulers"][MODEL]["endpoints"][keys[0]]["metrics_frozen"] is True
            warnings = [r.getMessage() for r in caplog.records if "frozen metrics" in r.getMessage()]
            assert len(warnings) == 1
            assert keys[0] in warnings[0]
            await fleet.clear("p0", FaultKind.FREEZE_METRICS)
            await wait_until(lambda: gw.fresh(keys[0]), within=10, what="the unfrozen pod back")
            assert not frozen.page.frozen
            again = await send_many(gw, 30, concurrency=6)
            assert again["p0"] > 0


async def test_requests_go_only_to_pods_whose_context_window_holds_them(tmp_path: Path) -> None:
    spec = fleet_spec("llama-3.1-8b/a10g", "llama-3.1-8b/h100", "llama-3.1-8b/a10g")
    # The context-window filter is under test: GIE's queue/kvCache/prefix scoring (predictedLatency 0
    # also drops igw's speed-aware scorers, which would steer short requests by GPU speed).
    doc = gateway_doc(weights={"predictedLatency": 0})
    async with run_fleet(spec, admin=False) as fleet:
        keys = [p.key for p in fleet.pods]
        async with in_process_gateway(tmp_path, doc, keys) as gw:
            await wait_until(
                lambda: [gw.endpoint(k).max_model_len for k in keys] == [16384, 131072, 16384],
                within=10,
                what="context windows learned from /v1/models",
            )
            long_prompt = "w" * (4 * 17_000)  # ~17,000 tokens: over the A10G pods' 16,384
            for i in range(10):
                resp = await gw.complete(f"{i} {long_prompt}", max_tokens=4)
                assert resp.status == 200, await resp.text()
                assert served_by(await resp.json()) == "p1"
            received = [fleet.pod(k).stats.requests_received for k in keys]
            resp = await gw.complete("x", max_tokens=200_000)
            assert resp.status == 400
            error = (await resp.json())["error"]
            assert error["code"] == "context_length_exceeded"
            assert error["param"] == "max_tokens"
            assert "131072" in error["message"]
            assert [fleet.pod(k).stats.requests_received for k in keys] == received  # no pod touched
            short = await send_many(gw, 12, concurrency=3)
            assert set(short) == {"p0", "p1", "p2"}  # a request that fits anywhere goes anywhere


async def test_pod_killed_mid_stream_ends_the_stream_and_new_requests_succeed(tmp_path: Path) -> None:
    spec = fleet_spec("llama-3.1-8b/h100", "llama-3.1-8b/h100", time_scale=0.5)
    async with run_fleet(spec, admin=False) as fleet:
        keys = [p.key for p in fleet.pods]
        async with in_process_gateway(tmp_path, gateway_doc(), keys) as gw:
            resp = await gw.complete("a long answer please", max_tokens=2000, stream=True)
            assert resp.status == 200
            first = await resp.content.readany()
            assert first
            victim = "p0" if gw.endpoint(keys[0]).inflight else "p1"
            await fleet.inject(victim, FaultSpec(kind=FaultKind.KILL))
            rest = await asyncio.wait_for(resp.read(), timeout=30)
            events = data_events(first + rest)
            assert events[-1] == b"data: [DONE]"
            assert orjson.loads(events[-2].removeprefix(b"data: "))["error"]["type"] == "upstream_error"
            survivor = "p1" if victim == "p0" else "p0"
            for i in range(10):
                ok = await gw.complete(f"after the kill {i}", max_tokens=4)
                assert ok.status == 200
                assert served_by(await ok.json()) == survivor


async def test_hung_pod_is_excluded_while_stale_and_readmitted(tmp_path: Path) -> None:
    spec = fleet_spec("llama-3.1-8b/h100", "llama-3.1-8b/h100")
    async with run_fleet(spec, admin=False) as fleet:
        keys = [p.key for p in fleet.pods]
        async with in_process_gateway(tmp_path, gateway_doc(), keys) as gw:
            await fleet.inject("p0", FaultSpec(kind=FaultKind.HANG))
            await wait_until(lambda: not gw.fresh(keys[0]), within=10, what="hung pod excluded")
            served = await send_many(gw, 10, concurrency=2)
            assert served == {"p1": 10}
            await fleet.clear("p0", FaultKind.HANG)
            await wait_until(lambda: gw.fresh(keys[0]), within=10, what="pod re-admitted")


async def test_overload_gets_fast_429s_with_retry_after_and_no_5xx(tmp_path: Path) -> None:
    doc = gateway_doc(routing={"saturation": {"queueDepthThreshold": 1, "kvCacheUtilThreshold": 0.5}})
    spec = fleet_spec("llama-3.1-8b/a10g", time_scale=0.1)
    async with (
        run_fleet(spec, admin=False) as fleet,
        in_process_gateway(tmp_path, doc, [fleet.pods[0].key]) as gw,
    ):
        statuses: collections.Counter[int] = collections.Counter()
        retry_after: set[str] = set()
        remaining = list(range(300))

        async def client() -> None:  # a closed loop: the next request as soon as one is answered
            while remaining:
                i = remaining.pop()
                resp = await gw.complete(f"overload {i} " + "x" * 8000, max_tokens=32)
                statuses[resp.status] += 1
                if resp.status == 429:
                    retry_after.add(resp.headers["Retry-After"])
                    assert (await resp.json())["error"]["code"] == "pool_saturated"
                    await asyncio.sleep(0.05)
                await resp.read()

        await asyncio.gather(*(client() for _ in range(40)))
        assert statuses[429] > 0
        assert statuses[200] > 0
        assert not [s for s in statuses if s >= 500]
        assert all(1 <= int(v) <= 30 for v in retry_after)


async def test_slow_readers_keep_gateway_memory_bounded(tmp_path: Path) -> None:
    spec = fleet_spec("llama-3.1-8b/h100", time_scale=0.02)
    async with (
        run_fleet(spec, admin=False) as fleet,
        in_process_gateway(tmp_path, gateway_doc(), [fleet.pods[0].key]) as gw,
    ):
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            host, port = gw.url.removeprefix("http://").split(":")
            body = orjson.dumps({"model": MODEL, "prompt": "slow reader", "max_tokens": 3000, "stream": True})
            conns = []
            for _ in range(20):  # clients that send a request and never read the answer
                reader, writer = await asyncio.open_connection(host, int(port))
                head = (
                    "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                writer.write(head.encode() + body)
                conns.append((reader, writer))
            await asyncio.sleep(3)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
            for _, writer in conns:
                writer.close()
        # 20 streams x 3,000 events of ~250 bytes would be ~15 MB if buffered; TCP back-pressure keeps
        # what the gateway holds per connection to its socket buffers.
        assert grown < 8 * 1024 * 1024
        async with aiohttp.ClientSession() as http:
            assert (await http.get(gw.url + "/healthz")).status == 200
