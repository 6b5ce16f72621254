"""An adapter loaded on some pods only, behind a real gateway on loopback: a pod without it answers
404 at once and so looked idle, drawing most of that adapter's requests. The gateway now remembers
each such 404 and leaves the pod out for that adapter (``lora-slot-filter``, ``on_model_missing``)."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import pytest

from igw.scheduling.types import RoutingRequest
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.reliability.harness import (
    MODEL,
    gateway_doc,
    in_process_gateway,
    served_by,
    wait_until,
    write_config,
)

REQUESTS = 40


def pod(name: str, adapters: list[str]) -> dict[str, Any]:
    """A simulated vLLM with LoRA serving ``adapters``."""
    return {
        "name": name,
        "preset": "llama-3.1-8b/h100",
        "served_model_name": MODEL,
        "lora_adapters": adapters,
        "max_loras": 2,
    }


def fleet() -> FleetSpec:
    pods = [pod("both", ["sql", "chat"]), pod("sqlonly", ["sql"])]
    return FleetSpec.from_mapping({"time_scale": 0.05, "seed": 7, "pods": pods})


@pytest.mark.parametrize("attempts", [2, 1])
async def test_a_pod_that_answered_404_for_an_adapter_is_left_out_for_it(
    tmp_path: Path, attempts: int
) -> None:
    """With the default retry the one 404 is retried on the other pod (the client sees none); with
    ``attempts: 1`` it reaches the client. Either way the pod is left out for that adapter after it."""
    doc = gateway_doc(loraAdapters=["sql", "chat"], routing={"retry": {"attempts": attempts}})
    async with run_fleet(fleet(), admin=False) as sim:
        keys = [p.key for p in sim.pods]
        async with in_process_gateway(tmp_path, doc, keys) as gw:
            outcome: collections.Counter[str] = collections.Counter()
            for i in range(REQUESTS):
                resp = await gw.complete(f"chat question {i}", max_tokens=4, model="chat")
                if resp.status == 200:
                    outcome[served_by(await resp.json())] += 1
                else:
                    assert resp.status == 404, await resp.text()
                    outcome["404"] += 1
            refused = 1 if attempts == 1 else 0  # the one that found out, unless retried
            assert outcome["404"] == refused
            assert outcome["both"] == REQUESTS - refused
            metrics = await (await gw.http.get(gw.url + "/metrics")).text()
            retried = f'igw_upstream_retries_total{{cause="model-missing",scheduler="{MODEL}"}} 1.0'
            assert (retried in metrics) is (attempts == 2)
            # The memory is per adapter: for "sql" the scheduler still keeps the pod.
            sr = gw.state.runtime.schedulers[MODEL]
            for adapter, left_out in (("chat", {keys[1]}), ("sql", set())):
                request = RoutingRequest(
                    request_id=adapter,
                    model=adapter,
                    base_model=MODEL,
                    prefix_text="q",
                    prompt_tokens=1,
                    adapter=adapter,
                )
                decision = sr.scheduler.pick(request, sr.pool.views(), now=gw.state.clock())
                sr.scheduler.settle()
                assert set(decision.removed) == left_out, adapter


async def test_a_pod_added_to_a_pool_serving_only_adapters_gets_adapter_requests(tmp_path: Path) -> None:
    """A new pod publishes no LoRA metrics until it has run something; session s28's filter left out
    every such pod while others published them, so with only adapter traffic a scale-out pod never
    got a request (0 of 120 here before the fix)."""
    pods = [pod(f"p{i}", ["chat"]) for i in range(3)]
    spec = FleetSpec.from_mapping({"time_scale": 0.05, "seed": 7, "pods": pods})
    doc = gateway_doc(loraAdapters=["chat"])
    async with run_fleet(spec, admin=False) as sim:
        keys = [p.key for p in sim.pods]
        async with in_process_gateway(tmp_path, doc, keys[:2]) as gw:

            async def burst(n: int) -> collections.Counter[str]:
                served: collections.Counter[str] = collections.Counter()
                queue = list(range(n))

                async def worker() -> None:
                    while queue:
                        i = queue.pop()
                        resp = await gw.complete(f"chat {i} " + "w " * 50, max_tokens=64, model="chat")
                        assert resp.status == 200, await resp.text()
                        served[served_by(await resp.json())] += 1

                # 8 at once, 4 per pod of the first two: the saturation check counts dispatches no scrape
                # shows yet, and 12 (6 per pod, past queueDepthThreshold 5) answered 429 on a loaded host
                await asyncio.gather(*(worker() for _ in range(8)))
                return served

            assert set(await burst(60)) == {"p0", "p1"}
            write_config(tmp_path, doc, keys)  # the pool grows: discovery reads the file again
            await wait_until(
                lambda: keys[2] in gw.state.runtime.schedulers[MODEL].pool.states, within=10, what="p2"
            )
            await wait_until(lambda: gw.fresh(keys[2]), within=10, what="p2 scraped")
            assert (await burst(120))["p2"] > 0
