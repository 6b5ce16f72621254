"""A deletion, a cancel and a streamed replay of a stored response whose pod is remembered, that pod
frozen (since session s48), and what a hedged search marks slow. Before, each asked the remembered
holder alone with no bound but ``responseTimeout`` (600 s by default; the probe: a ``DELETE``, a
``cancel`` and a ``GET ?stream=true`` got no answer within 10 s), while a retrieval not streamed
already gave it up at the search timeout; a retrieval past a frozen holder asked it twice (4.0 s
with the shipped bounds, one other pod answering 404); and a pod the hedge cancelled after 0.3 s of
silence was asked last for 60 s as if silent the whole search timeout."""

from __future__ import annotations

import time
from typing import Any

import pytest

from igw.gateway.response_search import SEARCH_TIMEOUT_S
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import answered, bounded, frozen, frozen_holder, pools, remember, stored
from tests.gateway.test_response_search import DOC

CHANGES = [("DELETE", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")]


@pytest.mark.parametrize(("method", "path"), CHANGES)
async def test_a_frozen_holder_s_deletion_or_cancel_ends_within_the_search_deadline(
    gateway: Any, method: str, path: str
) -> None:
    """The holder given up at the search timeout, the other pod asked (404), the holder not asked
    again: its 504, well within the deadline; the holder still remembered, asked last a while."""
    async with frozen_holder(gateway) as case:
        t0 = time.monotonic()
        error = await answered(case.gw, method, path, status=504, within_s=5)
        assert time.monotonic() - t0 < 1.2
        case.assert_given_up(error)


@pytest.mark.parametrize(("method", "path"), CHANGES)
async def test_a_frozen_holder_s_deletion_or_cancel_is_done_where_the_search_finds_it(
    gateway: Any, method: str, path: str
) -> None:
    async with frozen_holder(gateway, stores="ab") as case:
        done = await answered(case.gw, method, path, status=200, within_s=5)
        assert done["id"] == "resp_1"
        assert ("resp_1" in case.other.stored_responses) is (method != "DELETE")
        assert case.searches.in_flight == 0


@pytest.mark.parametrize(("method", "path"), CHANGES)
async def test_a_holder_answering_a_deletion_or_cancel_in_time_is_the_only_pod_asked(
    gateway: Any, method: str, path: str
) -> None:
    """Its answer, a 404 too, is the client's (as before): no other pod asked, no place taken."""
    holder = FakeModelServer("a")
    other = FakeModelServer("b")
    async with running(holder, other), gateway(DOC, pools([holder, other])) as gw:
        searches = bounded(gw, timeout_s=0.5, deadline_s=1.4)
        remember(gw, "resp_1", holder)
        await answered(gw, method, path, status=404, within_s=5)
        assert [len(holder.received), len(other.received)] == [1, 0]
        assert searches._slow == {}
        assert searches.in_flight == 0


async def test_a_deletion_the_holder_applied_late_is_answered_504_not_applied_again(gateway: Any) -> None:
    """The holder deletes the response but answers after the search timeout: the client gets its
    504 (the deletion's outcome unknown to the gateway), never a 404 from asking it again (it no
    longer stores the response then: "not found" for a deletion that succeeded). A client retrying
    learns the outcome from the holder then."""
    late = FakeModelServer("a", deleted_late_s=0.8)
    other = FakeModelServer("b")
    stored(late, "resp_1")
    async with running(late, other), gateway(DOC, pools([late, other])) as gw:
        bounded(gw, timeout_s=0.5, deadline_s=1.4)
        remember(gw, "resp_1", late)
        error = await answered(gw, "DELETE", "/v1/responses/resp_1", status=504, within_s=5)
        assert error["code"] == "upstream_timeout"
        assert [len(late.received), len(other.received)] == [1, 1]
        assert "resp_1" not in late.stored_responses  # applied, once


async def test_a_frozen_holder_s_streamed_replay_is_given_up_at_its_head(gateway: Any) -> None:
    """``?stream=true``: no answer head from the holder within the search timeout, the other pod
    asked; it stores the response: its replay relayed as a stream."""
    async with frozen_holder(gateway, stores="ab") as case:
        t0 = time.monotonic()
        replay = await case.gw.http.get(case.gw.url + "/v1/responses/resp_1?stream=true", timeout=5)
        assert replay.status == 200
        assert replay.content_type == "text/event-stream"
        assert b"response.completed" in await replay.read()
        assert time.monotonic() - t0 < 1.2
        assert case.asked() == [1, 1]
        assert case.searches.in_flight == 0


async def test_a_frozen_holder_s_streamed_replay_nobody_else_has_is_its_504(gateway: Any) -> None:
    async with frozen_holder(gateway) as case:
        path = "/v1/responses/resp_1?stream=true"
        error = await answered(case.gw, "GET", path, status=504, within_s=5)
        assert error["message"] == "the model server sent no response within 0.5s"
        assert case.asked() == [1, 1]
        assert case.searches.in_flight == 0


async def test_a_frozen_holder_with_one_404_peer_costs_one_search_timeout(gateway: Any) -> None:
    """The shipped bounds (2 s per pod, 4.5 s deadline): the holder is not asked again after the
    other pod's 404, so the 504 comes after one search timeout (before: 4.0 s, the holder asked
    twice)."""
    async with frozen_holder(gateway, timeout_s=None) as case:
        assert case.searches.search_timeout_s == SEARCH_TIMEOUT_S
        t0 = time.monotonic()
        await answered(case.gw, "GET", "/v1/responses/resp_1", status=504, within_s=10)
        assert time.monotonic() - t0 < 3.0
        assert case.asked() == [1, 1]


async def test_a_pod_the_hedge_cancels_before_the_search_timeout_is_not_asked_last(gateway: Any) -> None:
    """A frozen pod asked first, the holder 0.05 s later answering after 0.2 s: the frozen pod is
    cancelled silent 0.25 s, less than the search timeout (0.5 s), so not asked last (before: any pod
    silent the hedge delay was, for 60 s)."""
    (stuck,) = frozen("a")
    holder = FakeModelServer("b", stored_delay_s=0.2)
    stored(holder, "resp_1")
    async with running(stuck, holder), gateway(DOC, pools([stuck, holder])) as gw:
        searches = bounded(gw, timeout_s=0.5, hedge_s=0.05)
        found = await answered(gw, "GET", "/v1/responses/resp_1", status=200, within_s=5)
        assert found["id"] == "resp_1"
        assert [len(stuck.received), len(holder.received)] == [1, 1]
        assert searches._slow == {}
        assert searches.in_flight == 0


async def test_a_deletion_done_past_a_frozen_holder_moves_the_memory_to_the_pod_that_did_it(
    gateway: Any,
) -> None:
    """The other pod deleted the response: it is remembered in the frozen holder's place, so the next
    request about the id asks it (its 404 at once), not the frozen holder first (before: the holder
    still remembered, the next retrieval waited its search timeout and got its 504). The retrieval's
    search timeout is 2 s, so its 1 s bound leaves a loaded box a second either side."""
    async with frozen_holder(gateway, stores="ab", hedge_s=0.05) as case:
        done = await answered(case.gw, "DELETE", "/v1/responses/resp_1", status=200, within_s=5)
        assert done["id"] == "resp_1"
        assert case.responses.endpoint_of("resp_1") == case.other.key
        bounded(case.gw, timeout_s=2.0, deadline_s=4.5)
        t0 = time.monotonic()
        error = await answered(case.gw, "GET", "/v1/responses/resp_1", status=404, within_s=5)
        assert time.monotonic() - t0 < 1.0
        assert error["code"] == "response_not_found" or "not found" in error["message"]
        assert case.asked() == [1, 2]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses/resp_1",
        "/v1/responses/resp_1?stream=true",
        "/v1/responses/resp_1/cancel",
        "/v1/responses/resp_1/input_items",
    ],
)
async def test_a_response_found_past_a_frozen_holder_is_remembered_where_found(
    gateway: Any, path: str
) -> None:
    """A retrieval (streamed or not), a cancel, its input items: the pod that answered is remembered
    in the frozen holder's place, and the next retrieval asks it alone. (A replay's id is read from
    its ``response.completed`` event with the usage, as vLLM sends it.)"""
    async with frozen_holder(gateway, stores="a", hedge_s=0.05) as case:
        stored(case.other, "resp_1", usage={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5})
        method = "POST" if path.endswith("/cancel") else "GET"
        answer = await case.gw.http.request(method, case.gw.url + path, timeout=5)
        assert answer.status == 200
        await answer.read()
        assert case.responses.endpoint_of("resp_1") == case.other.key
        await answered(case.gw, "GET", "/v1/responses/resp_1", status=200, within_s=5)
        assert case.asked() == [1, 2]  # the other pod alone: the frozen holder not asked again


async def test_a_replay_naming_no_usage_past_a_frozen_holder_is_remembered_where_found(gateway: Any) -> None:
    """A replay whose events carry no ``usage`` (a response stored without it, or an engine that leaves
    it out of ``response.completed``): its id read from the event that carries the response, so the
    pod that answered is remembered in the frozen holder's place (before: the id was read only from
    an event with ``usage``, the frozen holder stayed remembered, and the next retrieval waited its
    search timeout again)."""
    # both store it, with no usage: the replay's response.completed has none
    async with frozen_holder(gateway, stores="ab", hedge_s=0.05) as case:
        replay = await case.gw.http.get(case.gw.url + "/v1/responses/resp_1?stream=true", timeout=5)
        assert replay.status == 200
        assert b'"usage"' not in await replay.read()
        assert case.responses.endpoint_of("resp_1") == case.other.key
        await answered(case.gw, "GET", "/v1/responses/resp_1", status=200, within_s=5)
        assert case.asked() == [1, 2]  # the other pod alone: the frozen holder not asked again
