"""What a cluster's odd answer to a stored-response search does: a 200 that does not carry the response
asked for (a body that does not parse, a response object without an ``id``, one over 1 MiB whose held
first MiB names no ``id`` or names it late) and a 404 with a body over 1 MiB are misses, the search
asks the next cluster (since session s48: before, each was relayed to the client as it came and the
search ended there, the cluster storing the response never asked).

The clusters are aiohttp apps on loopback; the router has no ``spec.auth``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import ROUTER_KEY, create_global_app
from tests.global_router.support import MODEL, global_doc

RESPONSE_ID = "resp_abc123"
BIG = 8 * 1024 * 1024
"""A body well past the 1 MiB an error answer is buffered to (``ERROR_ANSWER_BUFFER_BYTES``)."""

ODD_ANSWERS: dict[str, tuple[int, bytes]] = {
    "200, JSON cut short": (200, b'{"id": "resp_abc'),
    "200, a response object naming no id": (200, b'{"object":"response","output_text":"not yours"}'),
    "404 over 1 MiB": (404, b'{"error":{"message":"' + b"x" * BIG + b'"}}'),
    "200 over 1 MiB naming no id": (200, b'{"object":"response","output_text":"' + b"x" * BIG + b'"}'),
    "200 over 1 MiB, no response object": (200, b'{"data":"' + b"x" * BIG + b'"}'),
    "200 over 1 MiB naming the id past its first MiB": (
        200,
        b'{"object":"response","output_text":"' + b"x" * BIG + b'","id":"' + RESPONSE_ID.encode() + b'"}',
    ),
}


def _odd(status: int, body: bytes) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/responses/{response_id}", answer)
    app.router.add_post("/v1/responses/{response_id}/cancel", answer)
    return app


def _holder(asked: list[str], *, text: str = "") -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        asked.append(request.match_info["response_id"])
        doc = {"id": request.match_info["response_id"], "object": "response", "output_text": text}
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get("/v1/responses/{response_id}", answer)
    app.router.add_post("/v1/responses/{response_id}/cancel", answer)
    return app


async def _retrieve(*apps: web.Application, cancel: bool = False) -> tuple[int, str | None, bytes]:
    """A retrieval (``cancel``: a cancel) of :data:`RESPONSE_ID` through a router in front of
    ``apps``: its status, the cluster that answered, its body."""
    path = f"/v1/responses/{RESPONSE_ID}" + ("/cancel" if cancel else "")
    async with _router(*apps) as (url, http), http.request("POST" if cancel else "GET", url + path) as resp:
        return resp.status, resp.headers.get("x-igw-cluster"), await resp.read()


@contextlib.asynccontextmanager
async def _router(*apps: web.Application) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """A router (no auth, no heartbeats) in front of ``apps``, asked in their order (one region)."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(serve_app(a, host="127.0.0.1", port=0)) for a in apps]
        clusters = [
            {"name": f"c{index}", "region": "east", "endpoint": url, "models": [MODEL]}
            for index, url in enumerate(urls)
        ]
        doc = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        url = await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        yield url, http


@pytest.mark.parametrize("cancel", [False, True], ids=["retrieval", "cancel"])
@pytest.mark.parametrize("odd", list(ODD_ANSWERS))
async def test_a_search_moves_on_past_an_answer_that_does_not_carry_the_response(
    odd: str, cancel: bool
) -> None:
    """The first cluster answers oddly, the second stores the response: the client gets the second's
    answer, nothing of the first's."""
    asked: list[str] = []
    status, cluster, body = await _retrieve(_odd(*ODD_ANSWERS[odd]), _holder(asked), cancel=cancel)
    assert (status, cluster) == (200, "c1"), body[:200]
    assert orjson.loads(body)["id"] == RESPONSE_ID
    assert asked == [RESPONSE_ID]


async def test_a_found_answer_over_1_mib_is_relayed_whole() -> None:
    """The cluster storing the response answers 8 MiB, its ``id`` first: relayed to its end, as
    before (the check reads the held first MiB, nothing more)."""
    asked: list[str] = []
    status, cluster, body = await _retrieve(_holder(asked, text="x" * BIG))
    assert (status, cluster) == (200, "c0")
    doc = orjson.loads(body)
    assert (doc["id"], len(doc["output_text"])) == (RESPONSE_ID, BIG)


async def test_a_last_404_over_1_mib_is_answered_openai_shaped_and_bounded() -> None:
    """Every cluster answering 404, the last with a body over 1 MiB: the client gets a 404 in the
    OpenAI shape, a few hundred bytes, not the cluster's 8 MiB."""
    status_404, body_404 = ODD_ANSWERS["404 over 1 MiB"]
    status, _, body = await _retrieve(_odd(404, b'{"error":{"message":"no"}}'), _odd(status_404, body_404))
    assert status == 404
    assert len(body) < 4096
    assert set(orjson.loads(body)["error"]) >= {"message", "type", "code"}


@pytest.mark.parametrize("cancel", [False, True], ids=["retrieval", "cancel"])
@pytest.mark.parametrize("odd", list(ODD_ANSWERS))
async def test_the_remembered_cluster_is_judged_by_the_search_s_rule(odd: str, cancel: bool) -> None:
    """The cluster remembered as the holder answers oddly (one rule with a search's, and with tier 1's
    remembered holder, since session s48): a 200 that does not carry the response is withheld - a
    404 ``response_not_found``, the cluster forgotten - and a large error is answered with its status
    alone, a few hundred bytes in the OpenAI shape. Before, both were relayed as they came and the
    cluster stayed remembered."""
    status_odd, body_odd = ODD_ANSWERS[odd]
    path = f"/v1/responses/{RESPONSE_ID}" + ("/cancel" if cancel else "")
    async with contextlib.AsyncExitStack() as stack:
        url_odd = await stack.enter_async_context(
            serve_app(_odd(status_odd, body_odd), host="127.0.0.1", port=0)
        )
        clusters = [{"name": "c0", "region": "east", "endpoint": url_odd, "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        url = await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        router = app[ROUTER_KEY]
        router.responses.remember(RESPONSE_ID, "c0")
        async with http.request("POST" if cancel else "GET", url + path) as resp:
            status, body = resp.status, await resp.read()
        assert status == 404, body[:200]
        assert len(body) < 4096
        error = orjson.loads(body)["error"]
        if status_odd < 400:
            assert error["code"] == "response_not_found"
            assert router.responses.endpoint_of(RESPONSE_ID) is None  # forgotten: the next one searches
        else:
            assert router.responses.endpoint_of(RESPONSE_ID) == "c0"  # a 404 of its own: as before
