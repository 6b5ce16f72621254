"""Real processes on loopback: Redis, two ``igw serve`` publishing heartbeats, two ``igw global serve``.

One tier-1 gateway is killed with SIGKILL while traffic flows: no request fails, both replicas
drain it, and its stale heartbeat stays drained. Also checks the delay proxy the demo uses for the
inter-region link, and the measurements the demo report is built from.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from igw.bench.global_fleet import (
    MODEL,
    ClusterPlan,
    DelayProxy,
    GatewayProcess,
    global_config,
    redis_process,
    router_replicas,
    write_gateway_files,
)
from igw.bench.global_report import write_global_report
from igw.bench.global_run import (
    GlobalRunOptions,
    Sample,
    Timeline,
    drained_after,
    percentile,
    policy_summary,
    ramp_curve,
    run_global,
)
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.global_router.support import redis_on_path

PLANS = (ClusterPlan("east-a", "east", 1, 0.5), ClusterPlan("east-b", "east", 1, 0.4))


async def readyz(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(url + "/readyz") as resp:
        data: dict[str, Any] = await resp.json()
        return data


async def all_available(http: aiohttp.ClientSession, urls: list[str]) -> bool:
    states = [await readyz(http, u) for u in urls]
    return all(c["available"] for s in states for c in s["clusters"].values())


async def test_killed_gateway_is_drained_by_both_replicas_without_failed_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", redis_on_path())
    servers = {p.name: FakeModelServer(p.name) for p in PLANS}
    async with running(*servers.values()), redis_process(tmp_path) as redis_url:
        gateways = {}
        try:
            for plan in PLANS:
                write_gateway_files(plan, [servers[plan.name].key], tmp_path, redis_url)
                # the fake server is not in the simulator's label set: match any labels
                doc = yaml.safe_load((tmp_path / f"igwc-{plan.name}.yaml").read_text())
                doc["spec"]["schedulers"][0]["modelName"] = MODEL
                (tmp_path / f"igwc-{plan.name}.yaml").write_text(yaml.safe_dump(doc))
                gateways[plan.name] = GatewayProcess(plan, tmp_path)
                await gateways[plan.name].start()
            config = global_config(
                PLANS,
                {name: gw.url for name, gw in gateways.items()},
                region="east",
                redis_url=redis_url,
                policy="latency-first",
                slo_s=1.0,
                penalty_s=0.05,
                slow_start_s=5,
            )
            path = tmp_path / "global.yaml"
            path.write_text(yaml.safe_dump(config))
            async with (
                router_replicas(path, tmp_path, replicas=2, tag="t") as urls,
                aiohttp.ClientSession() as http,
            ):
                deadline = time.monotonic() + 30
                while not await all_available(http, urls):
                    assert time.monotonic() < deadline, "clusters never became available"
                    await asyncio.sleep(0.1)
                statuses: list[int] = []
                served: set[str] = set()

                async def send(i: int) -> None:
                    body = {"model": MODEL, "prompt": "hi"}
                    async with http.post(urls[i % 2] + "/v1/completions", json=body) as resp:
                        statuses.append(resp.status)
                        served.add(resp.headers.get("x-igw-cluster", ""))
                        await resp.read()

                for i in range(20):
                    await send(i)
                assert served == {"east-a", "east-b"}
                # A stream's usage through both tiers (since session s36): the router asks, the
                # cluster's gateway asks its vLLM pod and relays the chunk, the router keeps it.
                stream = {"model": MODEL, "prompt": "hi", "stream": True}
                async with http.post(urls[0] + "/v1/completions", json=stream) as resp:
                    assert resp.status == 200
                    streamed = await resp.read()
                assert b'"usage"' not in streamed
                assert streamed.endswith(b"data: [DONE]\n\n")
                asked = orjson.loads(servers[resp.headers["x-igw-cluster"]].received[-1].body)
                assert asked["stream_options"] == {"include_usage": True}
                gateways["east-a"].kill()
                killed = time.monotonic()
                for i in range(40):
                    await send(i)
                assert set(statuses) == {200}
                deadline = time.monotonic() + 15
                while True:
                    states = [await readyz(http, u) for u in urls]
                    if all(not s["clusters"]["east-a"]["available"] for s in states):
                        break
                    assert time.monotonic() < deadline, states
                    await asyncio.sleep(0.05)
                assert time.monotonic() - killed < 5.0  # the redirect target
        finally:
            for gw in gateways.values():
                await gw.stop()


def test_connections_open_through_the_delay_proxy_at_shutdown_log_nothing() -> None:
    """SIGTERM during ``igw bench global``'s region-down phase ends ``asyncio.run``, which cancels
    every task: on Python 3.11 each proxied connection's cancelled task was logged as an "Exception in
    callback" with its CancelledError traceback (234 lines for 6 connections; ~45,000 reported)."""
    logged: list[dict[str, Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: logged.append(context))
        proxy = DelayProxy(upstream.getsockname()[1], delay_s=0.05)
        url = await proxy.start()
        _reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.3)  # the proxy has connected upstream and is piping
        # what asyncio.run does on the way out of a SIGTERM: cancel every other task at once
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert others, "no connection task to cancel"
        for task in others:
            task.cancel()
        await asyncio.wait(others, timeout=5)
        await asyncio.sleep(0)  # the tasks' done callbacks run
        await proxy.stop()
        writer.close()
        await writer.wait_closed()

    # an upstream that accepts (the kernel's backlog) and never answers: the connection stays open
    with socket.socket() as upstream:
        upstream.bind(("127.0.0.1", 0))
        upstream.listen(8)
        asyncio.run(main())
    assert [c.get("message") for c in logged] == []


async def test_delay_proxy_adds_the_link_latency_both_ways() -> None:
    server = FakeModelServer("far")
    async with running(server):
        proxy = DelayProxy(server.port, delay_s=0.1)
        url = await proxy.start()
        try:
            async with aiohttp.ClientSession() as http:
                t0 = time.monotonic()
                async with http.post(url + "/v1/completions", json={"model": "m", "prompt": "x"}) as resp:
                    assert resp.status == 200
                    await resp.read()
                assert time.monotonic() - t0 >= 0.2  # one way each direction
        finally:
            await proxy.stop()


def test_report_measurements() -> None:
    timeline = Timeline()
    timeline.availability = [
        (1.0, 0, {"a": {"available": True, "ramp": 1}}),
        (1.2, 0, {"a": {"available": False, "ramp": 0}}),
        (1.4, 1, {"a": {"available": False, "ramp": 0}}),
    ]
    assert drained_after(timeline, "a", 1.0, 2) == pytest.approx(0.4)
    assert drained_after(timeline, "a", 1.0, 3) is None
    samples = [
        Sample(sent_at=t, replica=0, stream=False, status=200, cluster=c)
        for t, c in [(10.1, "b"), (10.2, "a"), (11.5, "a"), (11.6, "a")]
    ]
    assert ramp_curve(samples, "a", start=10.0, end=12.0) == [(0.5, 0.5), (1.5, 1.0)]
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    for s in samples:
        s.tokens, s.latency_s = 1000, 0.1
    summary = policy_summary(samples, {"a": 1.0, "b": 0.0})
    assert summary["cost_per_1k_requests_usd"] == pytest.approx(1000 * 3 * 1000 * 1.0 / 1e6 / 4)
    assert summary["share"] == {"a": 0.75, "b": 0.25}


async def test_the_global_run_says_each_phase_as_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``igw demo --global --quick`` printed nothing for about 90 s (on two shared cores), then its
    summary: a newcomer could not tell a slow start from a hang. The run now tells its progress
    callback each phase as it begins, process start-ups included; here with one-second phases, the
    whole script on real processes, and its report written from the results."""
    monkeypatch.setenv("PATH", redis_on_path())
    said: list[tuple[float, str]] = []
    options = GlobalRunOptions(
        out=tmp_path, warmup_s=1, down_s=1, slow_start_s=1, region_down_s=1, policy_s=1
    )
    results = await run_global(options, lambda message: said.append((time.monotonic(), message)))
    assert [m for _, m in said] == [
        "starting redis-server",
        "starting the simulated fleet (6 pods)",
        "starting igw serve for cluster east-a (east)",
        "starting igw serve for cluster east-b (east)",
        "starting igw serve for cluster west-a (west)",
        "starting 2 igw global serve replicas",
        "failover script: 7 s of load at 10 req/s, warm-up 1 s",
        "failover script: kill east-a",
        "failover script: east-a back",
        "failover script: kill region east",
        "restarting east-a and east-b for the cost policies",
        "cost policy latency-first: starting 2 router replicas",
        "cost policy latency-first: 1 s of load",
        "cost policy cost-first-within-slo: starting 2 router replicas",
        "cost policy cost-first-within-slo: 1 s of load",
        "stopping the processes, writing the report",
    ]
    assert [what for _, what in results["events"]] == ["kill east-a", "east-a back", "kill region east"]
    assert results["failed_non_streaming"] == 0
    assert (write_global_report(results, tmp_path, command="test")).is_file()
