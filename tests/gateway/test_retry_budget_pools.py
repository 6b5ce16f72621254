"""The retry budget per pool (``spec.extensions.routing.retry``): a pool refusing every request
spends its own budget, never the one that bounds another pool's retries (until session s50 the
budget was the process's, and one failing pool's retries denied a healthy pool's)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for

SLOW_SCRAPES = {"scrapeInterval": "10s", "staleThreshold": "30s"}
"""Scraped once: the good pool's pick order stays best, next (next has 4 waiting)."""
FAILING = 10
"""Requests sent at once to the pool whose pods refuse everything: over its floor of 3 retries."""


async def test_a_failing_pool_does_not_spend_a_healthy_pool_s_retries(gateway: Any) -> None:
    doc = config_doc(
        [scheduler("good", "m1", routeTimeout="10s"), scheduler("bad", "m2", routeTimeout="10s")],
        routing=SLOW_SCRAPES,
    )
    servers = (
        FakeModelServer("best", waiting=0),
        FakeModelServer("next", waiting=4),
        FakeModelServer("bad1", waiting=0),
        FakeModelServer("bad2", waiting=0),
    )
    async with (
        running(*servers) as (best, nxt, bad1, bad2),
        gateway(doc, {"good": [best.key, nxt.key], "bad": [bad1.key, bad2.key]}) as gw,
    ):
        for pod in (bad1, bad2):  # a bad rollout: every pod refuses, slowly
            pod.infer_status = 503
            pod.first_token_delay_s = 1.0
        body = {"model": "m2", "prompt": "hello", "max_tokens": 3}
        failing = [asyncio.create_task(gw.post("/v1/completions", body)) for _ in range(FAILING)]
        # every first attempt refused, the bad pool's budget (its floor, 3) spent on retries in flight
        await wait_for(lambda: len(bad1.received) + len(bad2.received) >= FAILING + 3, within=5)
        # the gauges show the bad pool's budget spent (its retries wait 1 s at the pods), not the good one's
        spent = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_upstream_retries_in_flight{scheduler="bad"} 3.0' in spent, spent
        assert 'igw_upstream_retry_budget{scheduler="bad"} 3.0' in spent
        assert 'igw_upstream_retries_in_flight{scheduler="good"} 0.0' in spent
        best.infer_status = 503  # the healthy pool's one transient refusal
        resp = await gw.post("/v1/completions", {"model": "m1", "prompt": "hi", "max_tokens": 3})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["server"] == "next"
        answers = await asyncio.gather(*failing)
        assert [r.status for r in answers] == [503] * FAILING
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert 'igw_upstream_retries_total{cause="unavailable",scheduler="good"} 1.0' in metrics
        # the bad pool is still bounded: 3 retries, the other 7 refusals reached their clients
        assert 'igw_upstream_retries_total{cause="unavailable",scheduler="bad"} 3.0' in metrics
        assert 'igw_upstream_retry_overflow_total{scheduler="bad"} 7.0' in metrics
        assert len(bad1.received) + len(bad2.received) == FAILING + 3
        # every retry ended: nothing left charged to either pool
        assert 'igw_upstream_retries_in_flight{scheduler="bad"} 0.0' in metrics
