"""A retrieval's search past pods that do not answer (since session s47): a retrieval that is not
streamed is hedged (:mod:`igw.gateway.hedged_search`), and a pod a search stopped waiting for is
asked last by the searches after it (:meth:`ResponseSearches.slow`). Until then the search asked the
pods one after another, each frozen pod before the holder costing ``search_timeout_s`` (2 s): three
of them took a retrieval 6 s, past the global router's per-cluster search bound (5 s), and every
search of another id paid them again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from igw.gateway.hedged_search import LAST, NEXT, WIN, hedged
from igw.gateway.response_search import SEARCH_TIMEOUT_S, SLOW_CAPACITY, SLOW_TTL_S, ResponseSearches
from igw.global_router.server import SEARCH_TIMEOUT_S as ROUTER_SEARCH_TIMEOUT_S
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import open_to, stored
from tests.gateway.support import wait_for
from tests.gateway.test_openai_apis import metric
from tests.gateway.test_response_search import DOC, LLAMA


def test_a_slow_pod_is_asked_last_for_a_while_and_memory_is_bounded() -> None:
    searches = ResponseSearches()
    searches.slow("a", now=100.0)
    searches.slow("c", now=101.0)
    assert searches.ordered(["a", "b", "c", "d"], now=102.0) == ["b", "d", "a", "c"]
    searches.answered("a")  # answered a search in time: forgotten
    assert searches.ordered(["a", "b", "c", "d"], now=102.0) == ["a", "b", "d", "c"]
    assert searches.ordered(["a", "b", "c", "d"], now=101.0 + SLOW_TTL_S) == ["a", "b", "c", "d"]
    assert searches._slow == {}  # expired entries leave
    for i in range(SLOW_CAPACITY + 5):
        searches.slow(f"pod{i}", now=200.0)
    assert len(searches._slow) == SLOW_CAPACITY
    assert searches.ordered(["pod0", "x"], now=201.0) == ["pod0", "x"]  # the oldest dropped first


async def test_the_hedge_asks_the_next_pod_when_one_is_slow_and_cancels_the_rest() -> None:
    """The next candidate is asked once the last one asked stayed silent for the delay (or at once
    after an answer), at most ``width`` at once; a miss does not end the search while others are in
    flight; the winner's arrival cancels the others, awaited before ``hedged`` returns, which names
    those silent for the delay or more."""
    started: dict[str, float] = {}
    cancelled: list[str] = []
    delays = {"frozen1": 60.0, "frozen2": 60.0, "miss": 0.0, "holder": 0.05}
    t0 = time.monotonic()

    async def ask(key: str) -> str:
        started[key] = time.monotonic() - t0
        try:
            await asyncio.sleep(delays[key])
        except asyncio.CancelledError:
            cancelled.append(key)
            raise
        return "404" if key == "miss" else "200"

    heard: list[tuple[str, object]] = []

    def decide(key: str, outcome: object) -> str:
        heard.append((key, outcome))
        return WIN if outcome == "200" else NEXT

    silent = await hedged(["frozen1", "miss", "holder", "frozen2"], ask, decide, delay_s=0.1, width=3)
    assert list(started) == ["frozen1", "miss", "holder"]  # frozen2 never asked
    assert started["miss"] == pytest.approx(0.1, abs=0.08)  # hedged after the delay
    assert started["holder"] == pytest.approx(started["miss"], abs=0.05)  # at once after the miss
    assert heard == [("miss", "404"), ("holder", "200")]
    assert cancelled == ["frozen1"]
    assert silent == ["frozen1"]


async def test_the_hedge_waits_for_attempts_in_flight_after_a_last_verdict_or_misses() -> None:
    async def ask(key: str) -> str:
        await asyncio.sleep({"slow": 0.2, "error": 0.0, "later": 0.0}[key])
        return key

    heard: list[str] = []

    def decide(key: str, outcome: object) -> str:
        heard.append(key)
        return LAST if key == "error" else NEXT

    assert await hedged(["slow", "error", "later"], ask, decide, delay_s=0.05) == []
    assert heard == ["error", "slow"]  # no pod asked after the LAST verdict; the one in flight heard


async def test_three_frozen_pods_before_the_holder_cost_one_search_timeout_then_none(gateway: Any) -> None:
    """The measured case, with the shipped timeouts: three frozen pods (they accept the request and
    never answer) before the holder. Sequential, the retrieval took 3 x ``SEARCH_TIMEOUT_S``, past
    the global router's per-cluster bound (5 s): it answered 504 although the cluster held the
    response; and a retrieval of another id took as long again. Hedged, the first takes one search
    timeout, and the next asks the pod found slow last (the two cancelled, silent less than the search
    timeout, are not: the next costs their hedge delays, 0.6 s)."""
    frozen = [FakeModelServer(name, stored_delay_s=3600) for name in "abc"]
    holder = FakeModelServer("d")
    stored(holder, "resp_1")
    stored(holder, "resp_2")
    pods = [*frozen, holder]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        searches = gw.state.response_searches
        assert searches.search_timeout_s == SEARCH_TIMEOUT_S
        async with asyncio.timeout(20):
            t0 = time.monotonic()
            first = await gw.http.get(f"{gw.url}/v1/responses/resp_1")
            took = time.monotonic() - t0
            assert first.status == 200
            assert (await first.json())["id"] == "resp_1"
            assert took < ROUTER_SEARCH_TIMEOUT_S - 1.0  # under the router's bound with room
            assert took < 2 * SEARCH_TIMEOUT_S  # sequential: 3 x
            # the pods abandoned (their connections closed, not pooled half-read)
            await wait_for(lambda: open_to(gw, frozen) == 0, what="the frozen pods' connections closed")
            t0 = time.monotonic()
            second = await gw.http.get(f"{gw.url}/v1/responses/resp_2")
            took = time.monotonic() - t0
        assert second.status == 200
        assert (await second.json())["id"] == "resp_2"
        # only the pod silent the whole search timeout is asked last (since session s48; the two
        # cancelled when the holder answered were silent less): those two cost a hedge delay each
        assert took < 3 * searches.hedge_delay_s
        assert [len(p.received) for p in pods] == [1, 2, 2, 2]  # the slow pod not asked again
        assert set(searches._slow) == {frozen[0].key}
        assert searches.in_flight == 0


async def test_a_hedged_search_ends_on_404_or_504_as_the_sequential_one(gateway: Any) -> None:
    """A 404 does not end a hedged search while a pod is still asked: a frozen pod's 504 is the
    client's answer then (it may store the response), the id not listed as found nowhere, and the
    retry counted is the 404 pod's. Every pod answering 404: 404, listed."""
    frozen = FakeModelServer("a", stored_delay_s=3600)
    miss = FakeModelServer("b")
    async with running(frozen, miss), gateway(DOC, {"llama": [frozen.key, miss.key]}) as gw:
        searches = gw.state.response_searches
        searches.search_timeout_s = 0.5
        searches.hedge_delay_s = 0.05
        async with asyncio.timeout(20):
            stalled = await gw.http.get(f"{gw.url}/v1/responses/resp_x")
        assert stalled.status == 504
        assert (await stalled.json())["error"]["code"] == "upstream_timeout"
        assert [len(frozen.received), len(miss.received)] == [1, 1]
        assert not searches.recently_unfound("resp_x", now=gw.state.clock(), within=LLAMA)
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="response-search") == 1
        frozen.stored_delay_s = 0.0
        nowhere = await gw.http.get(f"{gw.url}/v1/responses/resp_y")
        assert nowhere.status == 404  # the last pod's own 404, as a sequential search's
        assert searches.recently_unfound("resp_y", now=gw.state.clock(), within=LLAMA)
        assert searches.in_flight == 0


async def test_an_answer_too_large_to_hold_is_asked_again_and_relayed(gateway: Any) -> None:
    """Each hedged attempt holds its answer; one it cannot hold (past the whole-answer buffer) is
    closed unread and that pod asked again, its answer relayed as it arrives: the client gets it
    whole, and nothing of the abandoned attempts."""
    frozen = FakeModelServer("a", stored_delay_s=3600)
    holder = FakeModelServer("b")
    big = "x" * (1536 * 1024)
    stored(holder, "resp_big", instructions=big)
    async with running(frozen, holder), gateway(DOC, {"llama": [frozen.key, holder.key]}) as gw:
        gw.state.response_searches.hedge_delay_s = 0.05
        async with asyncio.timeout(20):
            found = await gw.http.get(f"{gw.url}/v1/responses/resp_big")
            assert found.status == 200
            doc = await found.json()
        assert doc["id"] == "resp_big"
        assert doc["instructions"] == big
        assert [len(frozen.received), len(holder.received)] == [1, 2]
        assert gw.state.response_searches.in_flight == 0
