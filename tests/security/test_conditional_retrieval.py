"""A conditional or ranged retrieval of a stored response is answered, not taken for a miss.

Found by probing (session s50): ``GET /v1/responses/{id}`` with ``If-None-Match`` (or
``If-Modified-Since``; ``Range`` likewise) reached the pod holding the response, whose 304 (206)
carried no whole response object, so the gateway's check that a retrieval's answer names the
response asked for failed: the client got 404 ``response_not_found`` at both tiers, the holder was
forgotten, the id remembered as found nowhere (a following ``input_items`` GET answered 404 without
asking), and the misnamed-answer counter and WARNING fired for a pod that had done nothing wrong.
Those fields are no longer forwarded with such a retrieval: the pod answers 200, checked and relayed
with its validators. ``If-Match`` still reaches it (a 200 or a 412, both handled).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from igw.global_router.server import ROUTER_KEY
from tests.global_router.support import MODEL as ROUTED_MODEL
from tests.reliability.harness import MODEL, gateway_doc, in_process_gateway, scripted_upstream
from tests.security.test_upstream_redirects import router_over

STORED = {"id": "resp_1", "object": "response", "status": "completed", "model": MODEL, "output": []}
ETAG = '"v1"'
CONDITIONS = ("If-None-Match", "If-Modified-Since", "If-Range", "Range", "If-Match")

ASKED = [
    {"If-None-Match": ETAG},
    {"If-Modified-Since": "Tue, 08 Dec 2026 00:00:00 GMT"},
    {"Range": "bytes=0-9"},
    {"Range": "bytes=0-9", "If-Range": ETAG},
]


class Holder:
    """A model server (or a cluster) holding ``resp_1`` that honours conditional and range requests
    as an HTTP server may: a 304 to a validator that matches, a 206 with the first bytes to a range.
    ``seen``: the conditional fields of each retrieval it got."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    async def create(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(STORED, headers={"ETag": ETAG})

    async def get(self, request: web.Request) -> web.Response:
        got = {name: request.headers[name] for name in CONDITIONS if name in request.headers}
        if not request.path.endswith("/input_items"):
            self.seen.append(got)
        if request.match_info["id"] != "resp_1":
            error = {"error": {"message": "nf", "type": "invalid_request_error", "code": "not_found"}}
            return web.json_response(error, status=404)
        if "If-None-Match" in got or "If-Modified-Since" in got:
            return web.Response(status=304, headers={"ETag": ETAG, "Location": "http://10.0.0.1/"})
        if "Range" in got:
            headers = {"ETag": ETAG, "Content-Range": "bytes 0-9/*", "Content-Type": "application/json"}
            return web.Response(status=206, headers=headers, body=b'{"id": "re')
        if request.path.endswith("/input_items"):
            return web.json_response({"object": "list", "data": []}, headers={"ETag": ETAG})
        return web.json_response(STORED, headers={"ETag": ETAG})

    def routes(self) -> dict[str, Any]:
        return {
            "POST /v1/responses": self.create,
            "GET /v1/responses/{id}": self.get,
            "GET /v1/responses/{id}/input_items": self.get,
        }


async def assert_answered(resp: aiohttp.ClientResponse) -> None:
    """The whole stored response, with the holder's validator."""
    body = await resp.json()
    assert resp.status == 200, body
    assert body["id"] == "resp_1", body
    assert resp.headers.get("ETag") == ETAG, resp.headers


def assert_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    """No WARNING that a pod (a cluster) answered with another response."""
    warned = [r.getMessage() for r in caplog.records if "another response" in r.getMessage()]
    assert warned == [], warned


@pytest.mark.parametrize("asked", ASKED, ids=lambda a: "+".join(a))
@pytest.mark.parametrize("known", [True, False], ids=["known", "searched"])
async def test_a_conditional_retrieval_is_answered_at_tier_1(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, asked: dict[str, str], known: bool
) -> None:
    caplog.set_level(logging.WARNING)
    holder = Holder()
    async with (
        scripted_upstream(holder.routes()) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        if known:  # created through the gateway: the holder remembered
            body = {"model": MODEL, "input": "hi", "store": True}
            async with gw.http.post(gw.url + "/v1/responses", json=body) as resp:
                assert resp.status == 200, await resp.read()
        url = gw.url + "/v1/responses/resp_1"
        async with gw.http.get(url, headers=asked, allow_redirects=False) as resp:
            await assert_answered(resp)
        # the holder kept, the id not remembered as found nowhere: asked, answered
        async with gw.http.get(url + "/input_items", allow_redirects=False) as resp:
            assert resp.status == 200, await resp.read()
        responses = gw.state.runtime.schedulers[MODEL].scheduler.responses
        assert responses.endpoint_of("resp_1") == pod
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
    assert holder.seen == [{}]  # none of the fields reached the pod
    assert "\nigw_usage_misnamed_total 0.0\n" in metrics
    assert_no_warning(caplog)


async def test_if_match_still_reaches_the_pod(tmp_path: Path) -> None:
    """``If-Match`` draws a 200 or a 412, both handled as any answer: forwarded as it came."""
    holder = Holder()
    async with (
        scripted_upstream(holder.routes()) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        headers = {"If-Match": ETAG, "If-None-Match": ETAG}
        async with gw.http.get(gw.url + "/v1/responses/resp_1", headers=headers) as resp:
            await assert_answered(resp)
    assert holder.seen == [{"If-Match": ETAG}]


@pytest.mark.parametrize("asked", ASKED, ids=lambda a: "+".join(a))
@pytest.mark.parametrize("known", [True, False], ids=["known", "searched"])
async def test_a_conditional_retrieval_is_answered_at_tier_2(
    caplog: pytest.LogCaptureFixture, asked: dict[str, str], known: bool
) -> None:
    caplog.set_level(logging.WARNING)
    holder = Holder()
    cluster = web.Application()
    cluster.router.add_post("/v1/responses", holder.create)
    cluster.router.add_get("/v1/responses/{id}", holder.get)
    cluster.router.add_get("/v1/responses/{id}/input_items", holder.get)
    async with router_over([("east-a", "east", cluster)]) as (url, app), aiohttp.ClientSession() as http:
        router = app[ROUTER_KEY]
        if known:
            body = {"model": ROUTED_MODEL, "input": "hi", "store": True}
            async with http.post(url + "/v1/responses", json=body) as resp:
                assert resp.status == 200, await resp.read()
        async with http.get(url + "/v1/responses/resp_1", headers=asked, allow_redirects=False) as resp:
            await assert_answered(resp)
        async with http.get(url + "/v1/responses/resp_1/input_items", allow_redirects=False) as resp:
            assert resp.status == 200, await resp.read()
        assert router.responses.endpoint_of("resp_1") == "east-a"
        assert router.metrics.usage_misnamed.labels("east-a")._value.get() == 0
    assert holder.seen == [{}]
    assert_no_warning(caplog)
