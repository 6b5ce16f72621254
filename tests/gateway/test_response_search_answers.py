"""What a pod's odd answer to a tier-1 search for a stored response does (since session s48, as the
global router's search of its clusters, ``tests/global_router/test_stored_search_answers.py``): a
retrieval's or cancel's answer below 400 that does not carry the response asked for (a body cut short,
a response object naming no ``id``, one over 1 MiB whose held first MiB shows no such ``id``) and an
error answer over 1 MiB are misses, the next pod is asked. Before, each was relayed to the client as
it came and the search ended there (the probe: 4 of 4 odd answers, the 8 MiB ones relayed whole, the
pod storing the response never asked). A remembered holder's such answer is withheld as one naming
another response is (the holder forgotten), its large error answered by status alone.

The odd pods are :class:`FakeModelServer` s answering every stored-response request alike."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import answered, bounded, pools, remember, stored
from tests.gateway.test_response_search import DOC, LLAMA

BIG = 8 * 1024 * 1024
"""A body well past the 1 MiB a whole answer is held to (``WHOLE_ANSWER_BUFFER_BYTES``)."""

ODD_ANSWERS: dict[str, tuple[int, bytes]] = {
    "200, JSON cut short": (200, b'{"id": "resp_1'),
    "200, a response object naming no id": (200, b'{"object":"response","output_text":"not yours"}'),
    "200 over 1 MiB naming no id": (200, b'{"object":"response","output_text":"' + b"x" * BIG + b'"}'),
    "200 over 1 MiB naming the id past its first MiB": (
        200,
        b'{"object":"response","output_text":"' + b"x" * BIG + b'","id":"resp_1"}',
    ),
    "404 over 1 MiB": (404, b'{"error":{"message":"' + b"x" * BIG + b'"}}'),
}

ASKS = [("GET", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")]


@pytest.mark.parametrize(("method", "path"), ASKS, ids=["retrieval", "cancel"])
@pytest.mark.parametrize("odd", list(ODD_ANSWERS))
async def test_a_search_moves_on_past_an_answer_that_does_not_carry_the_response(
    gateway: Any, odd: str, method: str, path: str
) -> None:
    """The first pod answers oddly, the second stores the response: the client gets the second's
    answer, nothing of the first's, and the second is remembered."""
    strange = FakeModelServer("a", stored_answer=ODD_ANSWERS[odd])
    holder = FakeModelServer("b")
    stored(holder, "resp_1")
    async with running(strange, holder), gateway(DOC, pools([strange, holder])) as gw:
        searches = bounded(gw, timeout_s=2.0, hedge_s=0.05)
        found = await answered(gw, method, path, status=200, within_s=10)
        assert found["id"] == "resp_1"
        assert [len(strange.received), len(holder.received)] == [1, 1]
        responses = gw.state.runtime.schedulers["llama"].scheduler.responses
        assert responses.endpoint_of("resp_1") == holder.key
        assert searches.in_flight == 0


@pytest.mark.parametrize("odd", ["200, JSON cut short", "200 over 1 MiB naming no id"])
async def test_a_search_every_pod_answers_without_the_response_is_a_404(gateway: Any, odd: str) -> None:
    """No pod's answer carries it: the gateway's 404 ``response_not_found``, nothing of theirs, and
    the id listed as found nowhere (each pod a miss)."""
    pods = [FakeModelServer(name, stored_answer=ODD_ANSWERS[odd]) for name in "ab"]
    async with running(*pods), gateway(DOC, pools(pods)) as gw:
        searches = bounded(gw, timeout_s=2.0, hedge_s=0.05)
        error = await answered(gw, "GET", "/v1/responses/resp_1", status=404, within_s=10)
        assert error["code"] == "response_not_found"
        assert [len(p.received) for p in pods] == [1, 1]
        assert searches.recently_unfound("resp_1", now=gw.state.clock(), within=LLAMA)


async def test_a_last_404_over_1_mib_is_answered_openai_shaped_and_bounded(gateway: Any) -> None:
    first = FakeModelServer("a")
    last = FakeModelServer("b", stored_answer=ODD_ANSWERS["404 over 1 MiB"])
    async with running(first, last), gateway(DOC, pools([first, last])) as gw:
        bounded(gw, timeout_s=2.0, hedge_s=0.05)
        answer = await gw.http.get(gw.url + "/v1/responses/resp_1")
        body = await answer.read()
        assert answer.status == 404
        assert len(body) < 4096
        assert [len(first.received), len(last.received)] == [1, 1]


@pytest.mark.parametrize(
    "odd", ["200, JSON cut short", "200, a response object naming no id", "200 over 1 MiB naming no id"]
)
@pytest.mark.parametrize(("method", "path"), ASKS, ids=["retrieval", "cancel"])
async def test_a_remembered_holder_s_answer_without_the_response_is_withheld_and_it_forgotten(
    gateway: Any, odd: str, method: str, path: str
) -> None:
    """As one naming another response (since session s45): never relayed, the client's 404
    ``response_not_found``, the holder forgotten (the next request searches); no other pod asked."""
    strange = FakeModelServer("a", stored_answer=ODD_ANSWERS[odd])
    other = FakeModelServer("b")
    async with running(strange, other), gateway(DOC, pools([strange, other])) as gw:
        bounded(gw, timeout_s=2.0, hedge_s=0.05)
        responses = remember(gw, "resp_1", strange)
        error = await answered(gw, method, path, status=404, within_s=10)
        assert error["code"] == "response_not_found"
        assert [len(strange.received), len(other.received)] == [1, 0]
        assert responses.endpoint_of("resp_1") is None


async def test_a_remembered_holder_s_404_over_1_mib_is_answered_by_its_status(gateway: Any) -> None:
    strange = FakeModelServer("a", stored_answer=ODD_ANSWERS["404 over 1 MiB"])
    other = FakeModelServer("b")
    async with running(strange, other), gateway(DOC, pools([strange, other])) as gw:
        bounded(gw, timeout_s=2.0, hedge_s=0.05)
        remember(gw, "resp_1", strange)
        answer = await gw.http.get(gw.url + "/v1/responses/resp_1")
        body = await answer.read()
        assert answer.status == 404
        assert len(body) < 4096
        assert [len(strange.received), len(other.received)] == [1, 0]
