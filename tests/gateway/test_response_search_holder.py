"""A retrieval of a stored response whose pod is remembered, that pod frozen (since session s47), and
the 504 of a pod a search gave up at its deadline. Before, the remembered holder was asked with no
bound but ``responseTimeout`` (600 s by default; the probe: no answer to a ``GET`` or its input items
within 12 s), and a pod given up at the deadline was told as "within 0.4s" (the rest of the deadline
it had) and asked last for a minute as if silent for the whole per-pod timeout."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import answered, bounded, frozen, frozen_holder, pools, remember, stored
from tests.gateway.test_response_search import DOC, LLAMA


@pytest.mark.parametrize("path", ["/v1/responses/resp_1", "/v1/responses/resp_1/input_items"])
async def test_a_frozen_remembered_holder_is_given_up_and_the_others_searched(
    gateway: Any, path: str
) -> None:
    """The holder is silent: given up at the search timeout, the other pod asked (404), the holder
    not asked again (since session s48; before, asked again last); the client gets the holder's 504
    within the search's deadline, not after ``responseTimeout``. Still remembered (nobody else has
    it), asked last by searches for a while."""
    async with frozen_holder(gateway, hedge_s=0.05) as case:
        case.assert_given_up(await answered(case.gw, "GET", path, status=504, within_s=5))


async def test_a_response_found_past_a_frozen_holder_is_remembered_where_found(gateway: Any) -> None:
    async with frozen_holder(gateway, stores="ab", hedge_s=0.05) as case:
        found = await answered(case.gw, "GET", "/v1/responses/resp_1", status=200, within_s=5)
        assert found["id"] == "resp_1"
        assert case.asked() == [1, 1]
        assert case.responses.endpoint_of("resp_1") == case.other.key
        assert case.searches.in_flight == 0


async def test_a_remembered_holder_answering_in_time_is_the_only_pod_asked(gateway: Any) -> None:
    """Its answer, a 404 too, is the client's (as before): no other pod is asked, no search place
    taken, nothing listed as found nowhere."""
    holder = FakeModelServer("a")
    other = FakeModelServer("b")
    stored(holder, "resp_1")
    async with running(holder, other), gateway(DOC, pools([holder, other])) as gw:
        remember(gw, "resp_1", holder)
        remember(gw, "resp_gone", holder)
        found = await gw.http.get(gw.url + "/v1/responses/resp_1")
        assert found.status == 200
        gone = await gw.http.get(gw.url + "/v1/responses/resp_gone")
        assert gone.status == 404
        assert [len(holder.received), len(other.received)] == [2, 0]
        searches = gw.state.response_searches
        assert not searches.recently_unfound("resp_gone", now=gw.state.clock(), within=LLAMA)
        assert searches._slow == {}
        assert searches.in_flight == 0


async def test_no_search_place_free_leaves_a_frozen_holder_s_504(gateway: Any) -> None:
    async with frozen_holder(gateway, stores="", hedge_s=0.05) as case:
        case.searches.in_flight = case.searches.limit  # every place taken
        await answered(case.gw, "GET", "/v1/responses/resp_1", status=504, within_s=5)
        assert case.asked() == [1, 0]
        assert case.searches.in_flight == case.searches.limit


async def test_a_pod_given_up_at_the_deadline_is_told_so_and_not_asked_last(gateway: Any) -> None:
    """A ``DELETE`` past four frozen pods (timeout 0.5 s, deadline 1.4 s): the third has 0.4 s left
    of the deadline. Its 504 names the deadline (before: "within 0.4s"), and it is not asked last
    afterwards (silent 0.4 s, less than the per-pod timeout); the two silent 0.5 s are."""
    pods = frozen("abcd")
    async with running(*pods), gateway(DOC, pools(pods)) as gw:
        searches = bounded(gw, timeout_s=0.5, deadline_s=1.4)
        error = await answered(gw, "DELETE", "/v1/responses/resp_x", status=504)
        assert error["code"] == "upstream_timeout"
        assert error["message"] == (
            "the search for response 'resp_x' did not end within 1.4s: a model server did not answer "
            "in time; retry the request"
        )
        assert [len(p.received) for p in pods] == [1, 1, 1, 0]
        assert set(searches._slow) == {pods[0].key, pods[1].key}


async def test_a_hedged_attempt_given_up_at_the_deadline_is_told_so_and_not_asked_last(gateway: Any) -> None:
    """Five frozen pods, three asked at once (0.5 s each), the deadline 0.9 s: the two asked when
    the first three were given up have 0.4 s or less. The answer names the deadline; only the three
    silent the whole timeout are asked last afterwards."""
    pods = frozen("abcde")
    async with running(*pods), gateway(DOC, pools(pods)) as gw:
        searches = bounded(gw, timeout_s=0.5, deadline_s=0.9, hedge_s=0.05)
        error = await answered(gw, "GET", "/v1/responses/resp_x", status=504)
        assert "did not end within 0.9s" in error["message"]
        assert [len(p.received) for p in pods] == [1, 1, 1, 1, 1]
        assert set(searches._slow) == {p.key for p in pods[:3]}
