"""Flow control and canary splitting through ``igw serve`` as a real process: shedding order and
Retry-After in front of model servers whose metrics show saturation, and a canary split over the
simulated fleet."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from igw.perf.serve_process import ServeProcess, serve_process
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_all_fresh


@asynccontextmanager
async def igw_serve(
    tmp_path: Path, doc: Mapping[str, Any], endpoints: Mapping[str, list[str]]
) -> AsyncIterator[ServeProcess]:
    config, eps = tmp_path / "igwc.yaml", tmp_path / "endpoints.yaml"
    config.write_text(yaml.safe_dump(dict(doc)))
    eps.write_text(yaml.safe_dump({"schedulers": dict(endpoints)}))
    lines: list[str] = []
    async with serve_process(config, eps, on_line=lines.append) as process:
        yield process


async def test_igw_serve_sheds_the_lowest_band_with_retry_after(tmp_path: Path) -> None:
    # A generous staleThreshold: on a loaded machine a late scrape must not turn "saturated" into the
    # all-stale fallback (which places the request instead of queueing it).
    routing = {"retryAfter": {"minSeconds": 1, "maxSeconds": 5}, "staleThreshold": "10s"}
    doc = config_doc([scheduler("m", "m")], routing=routing)
    doc["spec"]["extensions"]["flowControl"] = {"maxRequests": 1, "pollInterval": "10ms"}
    async with (
        running(FakeModelServer("pod", waiting=9)) as (pod,),
        igw_serve(tmp_path, doc, {"m": [pod.key]}) as gw,
        aiohttp.ClientSession() as http,
    ):
        await wait_all_fresh(http, gw.url)  # saturation is only known once the pod's page is read

        async def send(objective: str) -> aiohttp.ClientResponse:
            body = {"model": "m", "prompt": "hi", "max_tokens": 2}
            headers = {"x-gateway-inference-objective": objective}
            return await http.post(gw.url + "/v1/completions", json=body, headers=headers)

        batch = asyncio.create_task(send("Sheddable"))
        queued = 'igw_flow_queue_depth{priority="-1",scheduler="m"} 1.0'
        for _ in range(3000):  # until the gateway reports it queued (generous: a loaded machine)
            if queued in await (await http.get(gw.url + "/metrics")).text():
                break
            await asyncio.sleep(0.01)
        chat = asyncio.create_task(send("Critical"))
        shed = await asyncio.wait_for(batch, timeout=30)
        assert shed.status == 429
        assert shed.headers["Retry-After"] == "5"
        assert (await shed.json())["error"]["code"] == "request_shed"
        pod.waiting = 0
        served = await asyncio.wait_for(chat, timeout=30)
        assert served.status == 200
        assert (await served.json())["server"] == "pod"
        metrics = await (await http.get(gw.url + "/metrics")).text()
        assert (
            'igw_flow_rejections_total{priority="-1",reason="displaced",scheduler="m",tenant="anonymous"} 1.0'
            in metrics
        )


async def test_igw_serve_splits_a_model_over_the_simulated_fleet(tmp_path: Path) -> None:
    pods = [
        {"name": "old", "preset": "llama-3.1-8b/h100", "served_model_name": "llama-v1"},
        {"name": "new", "preset": "llama-3.1-8b/h100", "served_model_name": "llama-v2"},
    ]
    spec = FleetSpec.from_mapping({"time_scale": 0.01, "seed": 7, "pods": pods})
    doc = config_doc([scheduler("llama-v1", "llama-v1"), scheduler("llama-v2", "llama-v2")])
    targets = [{"model": "llama-v1", "weight": 3}, {"model": "llama-v2", "weight": 1}]
    rule = {"model": "llama", "targets": targets, "stickyBy": "header", "stickyHeader": "x-user"}
    doc["spec"]["extensions"]["modelRewrites"] = {"rules": [rule]}
    doc["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms"}  # bursts of 20 wait, not 429
    async with run_fleet(spec, admin=False) as fleet:
        endpoints = {"llama-v1": [fleet.pods[0].key], "llama-v2": [fleet.pods[1].key]}
        async with igw_serve(tmp_path, doc, endpoints) as gw, aiohttp.ClientSession() as http:

            async def one(headers: dict[str, str]) -> str:
                body = {"model": "llama", "prompt": "hello", "max_tokens": 2}
                resp = await http.post(gw.url + "/v1/completions", json=body, headers=headers)
                assert resp.status == 200, await resp.text()
                return str((await resp.json())["id"]).split("-")[1]

            n = 200
            split: Counter[str] = Counter()
            for _ in range(n // 20):
                split.update(await asyncio.gather(*(one({}) for _ in range(20))))
            assert abs(split["new"] - n / 4) <= 4 * math.sqrt(n * 0.25 * 0.75)
            assert split["old"] + split["new"] == n
            for user in ("alice", "bob", "carol", "dave"):
                assert len({await one({"x-user": user}) for _ in range(5)}) == 1


async def test_igw_serve_answers_a_request_still_queued_at_sigterm(tmp_path: Path) -> None:
    """SIGTERM with a request waiting in flow control: it is answered 503 ``shutting_down`` once the
    stream grace ends (its connection used to be dropped without an answer), and the process exits
    without a traceback."""
    routing = {"staleThreshold": "10s"}  # a late scrape must not turn "saturated" into the fallback
    doc = config_doc([scheduler("m", "m")], routing=routing)
    doc["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms"}
    config, eps = tmp_path / "igwc.yaml", tmp_path / "endpoints.yaml"
    config.write_text(yaml.safe_dump(doc))
    lines: list[str] = []
    async with running(FakeModelServer("pod", waiting=9)) as (pod,):
        eps.write_text(yaml.safe_dump({"schedulers": {"m": [pod.key]}}))
        args = ("--drain-seconds", "0", "--stream-grace-seconds", "1")
        async with (
            serve_process(config, eps, *args, on_line=lines.append) as gw,
            aiohttp.ClientSession() as http,
        ):
            await wait_all_fresh(http, gw.url)
            body = {"model": "m", "prompt": "hi", "max_tokens": 2}
            waiting = asyncio.create_task(http.post(gw.url + "/v1/completions", json=body))
            queued = 'igw_flow_queue_depth{priority="0",scheduler="m"} 1.0'
            for _ in range(3000):  # until the gateway reports it queued (generous: a loaded machine)
                if queued in await (await http.get(gw.url + "/metrics")).text():
                    break
                await asyncio.sleep(0.01)
            assert await gw.stop() == 0
            resp = await asyncio.wait_for(waiting, timeout=30)
            assert resp.status == 503
            assert (await resp.json())["error"]["code"] == "shutting_down"
        assert pod.received == []
    assert not [line for line in lines if "Traceback" in line]
