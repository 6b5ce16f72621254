"""A request that ends after its endpoint left the pool teaches the scheduler nothing about it.

A rolling update takes a pod out of discovery (it is terminating, no longer Ready) while its requests
still run: the scheduler forgets the endpoint at once, and the outcome that arrives later made its
state again (completion times, TTFT means, prefill rates, outlier records), kept for the life of the
process since no removal comes for that address any more. Until session s40 every pod a rollout
drained left such entries behind. An address another pod took meanwhile was charged with the old
pod's answer. Real gateway, real loopback model servers; the endpoints file is rewritten as
discovery would report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import yaml

from igw.gateway.endpoints import DiscoveredEndpoint
from tests.compiled.tree import skip_compiled
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.fixtures import Gateway
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.state_walk import paths_holding

PROMPT = "Summarise the following text in one sentence please. " * 30


async def _complete(gw: Gateway, *, stream: bool) -> int:
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 5, "stream": stream}
    async with await gw.post("/v1/completions", body) as r:
        await r.read()
        return r.status


def _pool(gw: Gateway) -> set[str]:
    return set(gw.state.runtime.schedulers["pool"].pool.states)


async def _drained_while_running(gw: Gateway, leaving: FakeModelServer, staying: FakeModelServer) -> None:
    """A streamed request to ``leaving`` (the only endpoint), the pool switched to ``staying`` while
    it runs, then a few requests served by ``staying`` (the picks' kept candidate lists are its)."""
    sent = asyncio.ensure_future(_complete(gw, stream=True))
    await wait_for(lambda: len(leaving.received) == 1, what="the request at the leaving pod")
    gw.endpoints_path.write_text(yaml.safe_dump({"schedulers": {"pool": [staying.key]}}))
    await wait_for(lambda: _pool(gw) == {staying.key}, what="the pool switched")
    assert not sent.done()
    assert await sent == 200
    for _ in range(3):
        assert await _complete(gw, stream=False) == 200


@skip_compiled(
    "igw.scheduling.scheduler",
    "the state walk (tests/state_walk.py) reads instance attributes, which a compiled class keeps "
    "natively: it would find no endpoint anywhere, and the test's own check that it does fails",
)
async def test_a_pod_drained_after_discovery_dropped_it_leaves_no_state(gateway: Callable[..., Any]) -> None:
    leaving = FakeModelServer("m", tokens=5, token_delay_s=0.1)
    async with (
        running(leaving, FakeModelServer("m")) as (_, staying),
        gateway(config_doc([scheduler("pool", "m")]), {"pool": [leaving.key]}) as gw,
    ):
        await _drained_while_running(gw, leaving, staying)
        scheduler_ = gw.state.runtime.schedulers["pool"].scheduler
        assert paths_holding(scheduler_, leaving.key) == []
        assert paths_holding(scheduler_, staying.key) != []  # the walk does find endpoints


async def test_an_address_another_pod_took_is_not_charged_with_the_old_pods_failure(
    gateway: Callable[..., Any],
) -> None:
    """The old pod fails its last request (a 500) after another pod took its address: outlier
    detection keeps no failure against the new one."""
    old = FakeModelServer("m", infer_status=500, first_token_delay_s=0.3)
    async with running(old) as _, gateway(config_doc([scheduler("pool", "m")]), {"pool": [old.key]}) as gw:
        gw.state.apply_endpoints("pool", [DiscoveredEndpoint(old.key, pod="ns/old")])
        async with aiohttp.ClientSession() as http:
            body = {"model": "m", "prompt": PROMPT, "max_tokens": 5}
            sent = asyncio.ensure_future(http.post(gw.url + "/v1/completions", json=body))
            await wait_for(lambda: len(old.received) == 1, what="the request at the old pod")
            gw.state.apply_endpoints("pool", [DiscoveredEndpoint(old.key, pod="ns/new")])
            async with await sent as answer:
                assert answer.status == 500
        outliers = gw.state.runtime.schedulers["pool"].scheduler.outliers
        assert paths_holding(outliers, old.key) == []
