"""The bounds on searching the pods for a stored response no scheduler here remembers
(:mod:`igw.gateway.response_search`): an id found nowhere is not searched for again at once, and a
process runs a bounded number of searches at once. Before session s33 every request for a made-up or
vanished id cost a round trip to every pod (up to 32), at whatever rate the tenant's limits allowed."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from igw.gateway.response_search import ResponseSearches, search_context
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.gateway.test_openai_apis import CHAT_MODEL, metric

DOC = config_doc([scheduler("llama", CHAT_MODEL)])

LLAMA = search_context("", ["llama"])
"""What a search of :data:`DOC`'s gateway (no authentication: scope ``""``) is listed within."""


def test_an_unfound_id_is_remembered_for_its_ttl_then_searched_again() -> None:
    searches = ResponseSearches(ttl_s=5.0)
    searches.unfound("resp_a", now=100.0)
    assert searches.recently_unfound("resp_a", now=104.9)
    assert not searches.recently_unfound("resp_b", now=104.9)
    assert not searches.recently_unfound("resp_a", now=105.0)
    assert not searches.recently_unfound("resp_a", now=101.0)  # forgotten once expired


def test_a_found_id_leaves_the_list_and_memory_is_bounded() -> None:
    searches = ResponseSearches(capacity=3)
    for i in range(5):
        searches.unfound(f"resp_{i}", now=0.0)
    assert [searches.recently_unfound(f"resp_{i}", now=1.0) for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    searches.found("resp_4")
    searches.found("resp_never_seen")
    assert not searches.recently_unfound("resp_4", now=1.0)


def test_an_id_is_listed_within_the_context_its_search_had() -> None:
    """A search's miss answers only searches of the same caller scope over the same pools (since
    session s46; before, any caller's request for the id, whatever pools it may search); a pod found
    storing the id takes it off the list in every context; entries of any context count towards one
    capacity, and the index by id keeps no more than the list."""
    alice = search_context("tenant:a", ["p"])
    bob = search_context("tenant:b", ["p", "q"])
    assert alice != search_context("tenant:b", ["p"]) != bob
    assert bob == search_context("tenant:b", ["q", "p", "q"])  # the pools as a set
    assert search_context("a|1:b", []) != search_context("a", ["b"])  # length-prefixed parts
    searches = ResponseSearches(capacity=3)
    searches.unfound("resp_x", now=0.0, within=alice)
    assert searches.recently_unfound("resp_x", now=1.0, within=alice)
    assert not searches.recently_unfound("resp_x", now=1.0, within=bob)
    assert not searches.recently_unfound("resp_x", now=1.0, within=search_context("tenant:a", ["p", "q"]))
    searches.unfound("resp_x", now=0.0, within=bob)
    searches.found("resp_x")
    assert not searches.recently_unfound("resp_x", now=1.0, within=alice)
    assert not searches.recently_unfound("resp_x", now=1.0, within=bob)
    for i in range(5):
        searches.unfound("resp_y", now=0.0, within=search_context(f"tenant:{i}", ["p"]))
    listed = [
        searches.recently_unfound("resp_y", now=1.0, within=search_context(f"tenant:{i}", ["p"]))
        for i in range(5)
    ]
    assert listed == [False, False, True, True, True]
    assert searches._contexts == {"resp_y": {search_context(f"tenant:{i}", ["p"]) for i in (2, 3, 4)}}
    assert not searches.recently_unfound("resp_y", now=10.0, within=search_context("tenant:2", ["p"]))
    assert len(searches._contexts["resp_y"]) == 2  # an expired entry leaves the index too


def test_searches_in_flight_are_bounded() -> None:
    searches = ResponseSearches(limit=2)
    assert searches.begin()
    assert searches.begin()
    assert not searches.begin()
    assert searches.in_flight == 2
    searches.end()
    assert searches.begin()
    with pytest.raises(ValueError, match="at least 1"):
        ResponseSearches(limit=0)


def asked(pods: list[FakeModelServer]) -> int:
    return sum(len(p.received) for p in pods)


async def test_an_id_no_pod_stores_is_not_searched_for_again_at_once(gateway: Any) -> None:
    """A retrieval and a continuation of an id no pod stores: the first asks each of the four pods,
    the next within the TTL none (404 ``response_not_found`` from the gateway), the one after the TTL
    all four again. A response stored since on one pod is found once the TTL is over."""
    pods = [FakeModelServer(name) for name in "abcd"]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        gw.state.response_searches.ttl_s = 0.5
        url = f"{gw.url}/v1/responses/resp_made_up"
        first = await gw.http.get(url)
        assert first.status == 404
        assert asked(pods) == 4
        again = await gw.http.get(url)
        assert again.status == 404
        assert (await again.json())["error"]["code"] == "response_not_found"
        assert asked(pods) == 4  # answered without asking a pod
        continuation = {"model": CHAT_MODEL, "input": "more", "previous_response_id": "resp_made_up"}
        refused = await gw.post("/v1/responses", continuation)
        assert refused.status == 404
        assert (await refused.json())["error"]["param"] == "previous_response_id"
        assert asked(pods) == 4
        # both counted (since session s47: tier 1 counted none of its refused searches)
        refused = gw.state.metrics.searches_refused
        assert refused.labels("unfound")._value.get() == 2
        # made since (vLLM stores a streamed response when it completes): found after the TTL
        pods[2].stored_responses["resp_made_up"] = {"id": "resp_made_up", "object": "response", "output": []}
        await asyncio.sleep(0.5)
        found = await gw.http.get(url)
        assert found.status == 200
        assert not gw.state.response_searches.recently_unfound(
            "resp_made_up", now=gw.state.clock(), within=LLAMA
        )
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        # the first search's three misses and the last one's two (a, b ahead of c)
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="response-search") == 5


async def test_a_search_that_could_not_reach_a_pod_is_not_remembered_as_unfound(gateway: Any) -> None:
    """A pod that refused the connection may come back with its store: only a search in which every
    pod answered 404 is remembered."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    async with (
        running(FakeModelServer("b")) as (b,),
        gateway(DOC, {"llama": [dead, b.key]}, wait_fresh=False) as gw,
    ):
        await wait_for(lambda: gw.fresh("llama", b.key), what="b scraped")
        assert (await gw.http.get(f"{gw.url}/v1/responses/resp_x")).status == 404
        assert not gw.state.response_searches.recently_unfound("resp_x", now=gw.state.clock(), within=LLAMA)
        assert (await gw.http.get(f"{gw.url}/v1/responses/resp_x")).status == 404
        assert len(b.received) == 2  # asked again


async def test_searches_beyond_the_limit_are_told_to_retry_not_that_the_response_is_gone(
    gateway: Any,
) -> None:
    """With the process's searches all in flight, a further retrieval or continuation of an unknown
    id is a 503 with ``Retry-After`` (the SDKs retry it), asking no pod; once a place is free the
    search runs."""
    pods = [FakeModelServer(name, stored_delay_s=0.5) for name in "ab"]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        gw.state.response_searches.limit = 1
        slow = asyncio.ensure_future(gw.http.get(f"{gw.url}/v1/responses/resp_slow"))
        await wait_for(lambda: gw.state.response_searches.in_flight == 1, what="the slow search")
        busy = await gw.http.get(f"{gw.url}/v1/responses/resp_other")
        continuation = {"model": CHAT_MODEL, "input": "more", "previous_response_id": "resp_other"}
        busy_too = await gw.post("/v1/responses", continuation)
        for resp in (busy, busy_too):
            assert resp.status == 503
            assert resp.headers["Retry-After"] in {"1", "2"}  # 1 s, spread (retry_spread)
            error = (await resp.json())["error"]
            assert error["code"] == "response_search_busy"
            assert f"retry after {resp.headers['Retry-After']}s" in error["message"]
        assert all(r.path.endswith("resp_slow") for p in pods for r in p.received)
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_response_searches_refused_total", reason="busy") == 2  # since s47
        assert (await slow).status == 404
        assert gw.state.response_searches.in_flight == 0
        assert (await gw.http.get(f"{gw.url}/v1/responses/resp_other")).status == 404
        assert asked(pods) == 4


async def test_a_burst_refused_for_busy_searches_is_told_different_retry_afters(gateway: Any) -> None:
    """30 retrievals refused at once while the process's searches are all in flight: their
    ``Retry-After`` is spread over 1 and 2 s like every other tier-1 refusal's
    (:mod:`igw.scheduling.retry_spread`), so that they do not all come back in the same second.
    Until session s43 every one was told 1."""
    pods = [FakeModelServer(name, stored_delay_s=0.5) for name in "ab"]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        gw.state.response_searches.limit = 1
        slow = asyncio.ensure_future(gw.http.get(f"{gw.url}/v1/responses/resp_slow"))
        await wait_for(lambda: gw.state.response_searches.in_flight == 1, what="the slow search")
        told = []
        for i in range(30):
            resp = await gw.http.get(f"{gw.url}/v1/responses/resp_other_{i}")
            assert resp.status == 503
            assert (await resp.json())["error"]["code"] == "response_search_busy"
            told.append(resp.headers["Retry-After"])
        assert gw.state.response_searches.in_flight == 1  # all 30 refused during the one search
        assert set(told) == {"1", "2"}
        assert (await slow).status == 404


class TakenDuringThePick(ResponseSearches):
    """A place free when the continuation is checked, taken by the time its pick is made (another
    search began while the pick waited in flow control's queue)."""

    def begin(self, scope: str | None = None) -> bool:
        return False


async def test_a_continuation_whose_search_place_went_during_the_pick_asks_only_its_picks(
    gateway: Any,
) -> None:
    """No search then, and no 503 either (the pick is made): the pick's own candidates are asked, as
    in a one-pod pool - the retry policy's attempts (404 retried once by default), not the pool."""
    pods = [FakeModelServer(name) for name in "abcd"]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        gw.state.response_searches = TakenDuringThePick()
        continuation = {"model": CHAT_MODEL, "input": "more", "previous_response_id": "resp_elsewhere"}
        resp = await gw.post("/v1/responses", continuation)
        assert resp.status == 404
        assert asked(pods) == gw.state.runtime.settings.retry.attempts == 2
        assert gw.state.response_searches.in_flight == 0


async def test_an_id_longer_than_any_engine_makes_is_neither_searched_for_nor_kept(gateway: Any) -> None:
    """The ids a search found nowhere are kept (4,096 of them) and a continuation's body goes to
    every pod asked: before session s35 a megabyte-long ``previous_response_id`` was both."""
    pods = [FakeModelServer(name) for name in "ab"]
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        huge = "resp_" + "x" * 1_000_000
        refused = await gw.post(
            "/v1/responses", {"model": CHAT_MODEL, "input": "x", "previous_response_id": huge}
        )
        assert refused.status == 400
        assert (await refused.json())["error"]["param"] == "previous_response_id"
        long_path = await gw.http.get(f"{gw.url}/v1/responses/resp_{'y' * 300}")
        assert long_path.status == 404
        assert (await long_path.json())["error"]["code"] == "response_not_found"
        assert asked(pods) == 0
        assert len(gw.state.response_searches._unfound) == 0
        ordinary = await gw.post(
            "/v1/responses", {"model": CHAT_MODEL, "input": "x", "previous_response_id": "resp_" + "z" * 250}
        )
        assert ordinary.status == 404  # searched for as before: every pod's 404
        assert asked(pods) == 2


async def test_a_search_every_pod_answered_with_another_response_found_it_nowhere(gateway: Any) -> None:
    """Every pod asked answers the retrieval 200 with another response object (a pod's lie or mix-up,
    s44: the search passes such an answer as a 404): no pod showed the id, so it is remembered as
    found nowhere like a search of 404s, and the next request within the TTL asks no pod. Until session
    s45 such answers were not counted as misses: the id was never listed, each poll cost every pod a
    round trip. None of those answers is the client's (since s45; before, it got the last pod's): it
    gets 404 ``response_not_found``, as for a response stored nowhere (tier 2 likewise)."""
    pods = [FakeModelServer(name) for name in "abc"]
    for pod in pods:
        pod.stored_responses["resp_polled"] = {"id": f"resp_{pod.name}", "object": "response", "output": []}
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        url = f"{gw.url}/v1/responses/resp_polled"
        first = await gw.http.get(url)
        assert first.status == 404
        assert (await first.json())["error"]["code"] == "response_not_found"
        # each pod's withheld answer counted (since s46; before, the request's last alone: 1)
        assert "\nigw_usage_misnamed_total 3.0\n" in await (await gw.http.get(gw.url + "/metrics")).text()
        assert asked(pods) == 3
        assert gw.state.response_searches.recently_unfound("resp_polled", now=gw.state.clock(), within=LLAMA)
        again = await gw.http.get(url)
        assert again.status == 404
        assert (await again.json())["error"]["code"] == "response_not_found"
        assert asked(pods) == 3
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="response-search") == 2


async def test_a_retrieval_search_moves_on_from_a_pod_that_does_not_answer(gateway: Any) -> None:
    """A frozen pod (it accepts the request and never answers; its /metrics still do, so it stays in
    its pool) first in the search's order: the search stops waiting for it after ``search_timeout_s``
    and asks the next pod, which stores the response. When every other pod answers 404 the client
    gets the frozen pod's 504 - it may store the response - never a 404, and the id is not listed as
    found nowhere. Until session s46 the search waited for that pod until ``responseTimeout`` (600 s)
    and then ended on its 504 without asking the others (tier 2's clusters moved on since s46). Not
    hedged here (its delay past the timeout: the sequential search's rule); the second search asks the
    frozen pod last (since session s47), its 504 the client's answer, not a retry."""
    frozen = FakeModelServer("a", stored_delay_s=3600)
    holder = FakeModelServer("b")
    holder.stored_responses["resp_there"] = {"id": "resp_there", "object": "response", "output": []}
    async with running(frozen, holder), gateway(DOC, {"llama": [frozen.key, holder.key]}) as gw:
        gw.state.response_searches.search_timeout_s = 0.3
        gw.state.response_searches.hedge_delay_s = 60.0
        async with asyncio.timeout(20):  # a failure, not a hang of responseTimeout (600 s)
            found = await gw.http.get(f"{gw.url}/v1/responses/resp_there")
            assert found.status == 200
            assert (await found.json())["id"] == "resp_there"
            assert [len(frozen.received), len(holder.received)] == [1, 1]
            nowhere = await gw.http.get(f"{gw.url}/v1/responses/resp_elsewhere")
        assert nowhere.status == 504
        assert (await nowhere.json())["error"]["code"] == "upstream_timeout"
        assert [len(frozen.received), len(holder.received)] == [2, 2]
        assert not gw.state.response_searches.recently_unfound(
            "resp_elsewhere", now=gw.state.clock(), within=LLAMA
        )
        assert gw.state.response_searches.in_flight == 0
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        assert metric(text, "igw_upstream_retries_total", scheduler="llama", cause="search-timeout") == 1


async def test_a_continuation_gives_its_search_place_back_while_its_answer_generates(gateway: Any) -> None:
    """A continuation of a response no scheduler here remembers searches the pool holding one of the
    process's search places; once ``search_timeout_s`` has passed the pod that has it is generating
    (a pod without it answers 404 at once), and the place is given back while the answer goes on.
    Until session s46 it was held for the whole generation: a tenant's long answers kept the places."""
    pods = [FakeModelServer("a"), FakeModelServer("b", tokens=3, token_delay_s=30.0)]
    pods[1].stored_responses["resp_prev"] = {"id": "resp_prev", "object": "response", "output": []}
    async with running(*pods), gateway(DOC, {"llama": [p.key for p in pods]}) as gw:
        searches = gw.state.response_searches
        searches.search_timeout_s = 0.3
        continuation = {
            "model": CHAT_MODEL,
            "input": "more",
            "previous_response_id": "resp_prev",
            "stream": True,
        }
        async with gw.http.post(f"{gw.url}/v1/responses", json=continuation) as resp:
            assert resp.status == 200
            assert b"response.created" in await resp.content.readline()  # generating on b
            await wait_for(lambda: searches.in_flight == 0, what="the search place given back")
            assert not pods[1].cancelled.is_set()  # the answer still generating
        await wait_for(lambda: len(gw.state.inflight) == 0, what="the stream ended")
        assert searches.in_flight == 0  # given back once, not twice
