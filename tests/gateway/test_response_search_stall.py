"""A search for a stored response past pods that answer their head and then stall (since session
s47), and a client that leaves a hedged search. Before, the search's bound covered the answer's head
alone: a pod that sent its head and then stalled the body held the search until ``responseTimeout``
(600 s by default; the probe: no answer within 15 s, hedged or not), and one that trickled its body
byte by byte was never silent long enough for any bound. Now the whole answer is bounded by the
search timeout, and such a pod is given up as a silent one is."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import answered, bounded, open_to, pools, stored
from tests.gateway.support import wait_for
from tests.gateway.test_openai_apis import metric
from tests.gateway.test_response_search import DOC, LLAMA


async def test_a_hedged_search_gives_up_pods_that_stall_or_trickle_their_body(gateway: Any) -> None:
    """Both pods answer a head, then one stalls its body and the other trickles it (a byte every
    0.2 s, never silent long): the hedged retrieval ends at the search bound with the 504 a silent
    pod gets, neither listed as storing nothing, both asked last afterwards, their connections
    closed."""
    stalling = FakeModelServer("a", stored_stall_s=3600)
    trickling = FakeModelServer("b", stored_trickle_s=0.2)
    pods = [stalling, trickling]
    async with running(*pods), gateway(DOC, pools(pods)) as gw:
        searches = bounded(gw, timeout_s=0.5, hedge_s=0.05)
        t0 = time.monotonic()
        error = await answered(gw, "GET", "/v1/responses/resp_x", status=504)
        took = time.monotonic() - t0
        assert error["code"] == "upstream_timeout"
        assert error["message"] == "the model server did not finish its response within 0.5s"
        assert took < 2.0
        assert not searches.recently_unfound("resp_x", now=gw.state.clock(), within=LLAMA)
        assert set(searches._slow) == {stalling.key, trickling.key}
        await wait_for(lambda: open_to(gw, pods) == 0, what="the stalled pods' connections closed")
        assert searches.in_flight == 0


async def test_a_sequential_search_asks_the_next_pod_past_a_stalled_body(gateway: Any) -> None:
    """A ``DELETE`` (searched one pod after another): the first pod's answer stalls after its head;
    the search gives it up at its bound and the next pod, which stores the response, answers."""
    stalling = FakeModelServer("a", stored_stall_s=3600)
    holder = FakeModelServer("b")
    stored(holder, "resp_1")
    async with running(stalling, holder), gateway(DOC, pools([stalling, holder])) as gw:
        searches = bounded(gw, timeout_s=0.5)
        t0 = time.monotonic()
        deleted = await answered(gw, "DELETE", "/v1/responses/resp_1", status=200)
        took = time.monotonic() - t0
        assert deleted["deleted"] is True
        assert took < 2.0
        assert "resp_1" not in holder.stored_responses
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="search-timeout") == 1
        assert set(searches._slow) == {stalling.key}
        assert searches.in_flight == 0


async def test_a_client_leaving_a_hedged_search_ends_every_attempt(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The client closes its connection while three attempts are in flight (one pod answered 404
    before): every upstream connection closed, the search's place given back, the id not listed as
    found nowhere (three pods never answered), no pod asked last, and the access log's line a 499
    naming the four pods asked (until session s47 its attempts were 0, no endpoint: the pods in
    flight were not recorded)."""
    caplog.set_level(logging.INFO, logger="igw.access")
    miss = FakeModelServer("a")
    frozen = [FakeModelServer(name, stored_delay_s=3600) for name in "bcde"]
    pods = [miss, *frozen]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        searches = gw.state.response_searches
        searches.hedge_delay_s = 0.05
        task = asyncio.create_task(gw.http.get(f"{gw.url}/v1/responses/resp_1"))
        await wait_for(lambda: open_to(gw, frozen) == 3, what="three attempts in flight")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

        def gone() -> list[dict[str, Any]]:
            entries = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
            return [e for e in entries if e["status"] == 499]

        await wait_for(lambda: len(gone()) == 1, within=10, what="the access-log line")
        await wait_for(lambda: open_to(gw, frozen) == 0, what="every attempt's connection closed")
        (line,) = gone()
        assert line["attempts"] == 4
        assert line["endpoint"] == frozen[2].key
        assert [len(p.received) for p in pods] == [1, 1, 1, 1, 0]
        assert searches.in_flight == 0
        assert searches._scopes == {}
        assert not searches.recently_unfound("resp_1", now=gw.state.clock(), within=LLAMA)
        assert searches._slow == {}
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="response-search") == 1
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="search-timeout") == 0
