"""A tier-1 search for a stored response as a whole is bounded (since session s47,
``igw.gateway.response_search.SEARCH_DEADLINE_S``, 4.5 s): before, each pod's search timeout alone
bounded it, and past enough frozen pods the search outlasted the global router's 5 s wait for the
whole cluster (measured with the real bounds, an id stored nowhere: a ``GET`` past 8 frozen pods
6.3 s, a ``DELETE`` 16.0 s). Short bounds here; the shape is the same."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest

from igw.gateway.response_ids import logged_id
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.search_support import answered, bounded, frozen, pools
from tests.gateway.test_response_search import DOC, LLAMA


async def test_a_hedged_search_past_frozen_pods_ends_at_its_deadline(gateway: Any) -> None:
    """Eight frozen pods, three asked at once: the pods asked before the deadline are given up by it
    (the 504 of a silent pod), the last two never asked; nothing listed as found nowhere. Before, each
    pod had its whole timeout, all eight were asked, and the search outlasted the deadline."""
    pods = frozen("abcdefgh")
    async with running(*pods), gateway(DOC, pools(pods)) as gw:
        searches = bounded(gw, timeout_s=0.5, deadline_s=1.0, hedge_s=0.05)
        error = await answered(gw, "GET", "/v1/responses/resp_x", status=504)
        assert error["code"] == "upstream_timeout"
        assert [len(p.received) for p in pods] == [1, 1, 1, 1, 1, 1, 0, 0]
        assert not searches.recently_unfound("resp_x", now=gw.state.clock(), within=LLAMA)
        assert searches.in_flight == 0


async def test_a_sequential_search_past_frozen_pods_ends_at_its_deadline(gateway: Any) -> None:
    """A ``DELETE`` (one pod after another) past four frozen pods: two get their whole timeout, the
    third what is left of the deadline, the fourth is never asked; the answer is the silent pod's 504.
    Before, every pod had its whole timeout (4 x 0.5 s here; 8 x 2 s = 16 s with the real bounds)."""
    pods = frozen("abcd")
    async with running(*pods), gateway(DOC, pools(pods)) as gw:
        bounded(gw, timeout_s=0.5, deadline_s=1.4)
        error = await answered(gw, "DELETE", "/v1/responses/resp_x", status=504)
        assert error["code"] == "upstream_timeout"
        assert [len(p.received) for p in pods] == [1, 1, 1, 0]
        assert gw.state.response_searches.in_flight == 0


async def test_pods_never_asked_at_the_deadline_make_it_a_504_not_a_404(gateway: Any) -> None:
    """Pods slow to answer 404 (0.4 s each) and a 1 s deadline: two answer 404, then less than
    ``SEARCH_ASK_LEAST_S`` (0.3 s) is left and the others are not asked. The answer is a 504 saying the
    search ran out of time, never the 404 of the pods asked (a pod not asked may store the
    response), and the id is not listed as found nowhere."""
    slow = [FakeModelServer(name, stored_delay_s=0.4) for name in "abcd"]
    async with running(*slow), gateway(DOC, pools(slow)) as gw:
        bounded(gw, timeout_s=2.0, deadline_s=1.0)
        async with asyncio.timeout(10):
            answer = await gw.http.delete(f"{gw.url}/v1/responses/resp_x")
            assert answer.status == 504
            error = (await answer.json())["error"]
        assert error["code"] == "upstream_timeout"
        assert error["message"] == (
            "the search for response 'resp_x' did not end within 1s: some model servers were not "
            "asked; retry the request"
        )
        assert answer.headers["X-Request-Id"]
        assert [len(p.received) for p in slow] == [1, 1, 0, 0]
        searches = gw.state.response_searches
        assert not searches.recently_unfound("resp_x", now=gw.state.clock(), within=LLAMA)
        assert searches._slow == {}
        assert searches.in_flight == 0


async def test_a_search_out_of_time_logs_the_ids_reference_not_the_id(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller is told the id it sent; the access line's ``error`` (and the span's status, the
    same text) names its one-way reference: the id reads and deletes the response. Until session
    s50 the line held the id, every other log line of a stored response its reference."""
    caplog.set_level(logging.DEBUG)
    rid = "resp_0123456789abcdef_not_for_the_log"
    slow = [FakeModelServer(name, stored_delay_s=0.4) for name in "abcd"]
    async with running(*slow), gateway(DOC, pools(slow)) as gw:
        bounded(gw, timeout_s=2.0, deadline_s=1.0)
        async with asyncio.timeout(10):
            answer = await gw.http.delete(f"{gw.url}/v1/responses/{rid}")
            assert answer.status == 504
            assert rid in (await answer.json())["error"]["message"]  # the caller's own id
    [line] = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
    assert line["error"] == (
        f"the search for response {logged_id(rid)} did not end within 1s: some model servers were not asked"
    )
    assert not [r for r in caplog.records if rid in r.getMessage()]
