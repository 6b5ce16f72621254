"""A remembered holder's stored response over 1 MiB (``WHOLE_ANSWER_BUFFER_BYTES``), the id shown in
its first bytes: relayed from the one answer, the holder asked once (since session s49). Before, the
holder's attempt held its answer as a hedged search's does, could not hold it past 1 MiB, closed it
and asked the holder again to relay the second answer: two reads of the pod's store per retrieval, and
a second answer that differed (the response deleted or evicted in between) cost the client a 404."""

from __future__ import annotations

from typing import Any

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import pools, remember, stored
from tests.gateway.test_response_search import DOC

BIG = 2 * 1024 * 1024
"""A stored response's text: twice the 1 MiB an answer is held to."""


async def test_a_remembered_holder_s_large_response_is_asked_for_once(gateway: Any) -> None:
    holder = FakeModelServer("a")
    other = FakeModelServer("b")
    stored(holder, "resp_1", output_text="x" * BIG)
    async with running(holder, other), gateway(DOC, pools([holder, other])) as gw:
        remember(gw, "resp_1", holder)
        answer = await gw.http.get(gw.url + "/v1/responses/resp_1")
        assert answer.status == 200
        doc = await answer.json()
        assert doc["id"] == "resp_1"
        assert len(doc["output_text"]) == BIG
        assert [len(holder.received), len(other.received)] == [1, 0]
        assert gw.state.response_searches.in_flight == 0
