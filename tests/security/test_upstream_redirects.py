"""A model server's or a cluster's redirect is refused, never relayed.

Found by probing (session s46): a pod (tier 1) or a cluster (tier 2) answering ``302 Location:
http://user:secret@169.254.169.254/latest/meta-data/`` had its answer relayed as it came - status,
``Location`` and body - to the client, which, following redirects as most HTTP clients do, was sent
to an address of its own network (the instance metadata service), and was told an internal address
(and the credentials in it). No OpenAI-compatible API redirects: each 3xx (but 304) is now a 502
``upstream_error`` naming neither the address nor the ``Location``, counted, and logged for the
operator with the ``Location``'s credentials masked; tier 2 tries the next cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import ROUTER_KEY, create_global_app
from tests.global_router.support import MODEL as ROUTED_MODEL
from tests.global_router.support import global_doc
from tests.reliability.harness import MODEL, gateway_doc, in_process_gateway, scripted_upstream

LOCATION = "http://user:secret@169.254.169.254/latest/meta-data/iam/"


async def redirecting(request: web.Request) -> web.Response:
    """An upstream answering every request with the redirect its query names (``?status=&type=``)."""
    await request.read()
    status = int(request.query.get("status", "302"))
    headers = {"Location": LOCATION, "Content-Type": request.query.get("type", "text/html")}
    return web.Response(
        status=status, headers=headers, body=b'<a href="' + LOCATION.encode() + b'">moved</a>'
    )


def assert_refused(status: int, headers: Any, body: bytes, says: str) -> None:
    """A 502 ``upstream_error`` naming ``says``, with neither the Location nor any of it."""
    assert status == 502, body
    assert headers["Content-Type"].startswith("application/json"), headers
    assert "Location" not in headers, headers
    assert b'"code":"upstream_error"' in body, body
    assert says.encode() in body, body
    shown = body.decode() + "\n".join(f"{k}: {v}" for k, v in headers.items())
    for part in ("169.254", "secret", "meta-data"):
        assert part not in shown, shown


REDIRECTS = [
    (302, "text/html"),
    (301, "application/json"),
    (307, "text/event-stream"),
    (308, "text/plain"),
    (300, ""),
]


@pytest.mark.parametrize(("status", "content_type"), REDIRECTS)
async def test_a_pod_s_redirect_is_refused_not_relayed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, status: int, content_type: str
) -> None:
    caplog.set_level(logging.INFO, logger="igw.access")
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": content_type == "text/event-stream"}
    async with (
        scripted_upstream({"POST /v1/completions": redirecting}) as pod,
        in_process_gateway(tmp_path, gateway_doc(routing={"retry": {"attempts": 1}}), [pod]) as gw,
    ):
        params = {"status": str(status), "type": content_type}
        async with gw.http.post(
            gw.url + "/v1/completions", params=params, json=body, allow_redirects=False
        ) as resp:
            answer = await resp.read()
            assert_refused(
                resp.status, resp.headers, answer, f"the model server answered a redirect (HTTP {status})"
            )
            assert pod.rsplit(":", 1)[1] not in answer.decode()
        counted = f'igw_upstream_redirects_total{{model="{MODEL}"}} 1.0'
        for _ in range(200):  # counted once the handler has finished its accounting
            if counted in await (await gw.http.get(gw.url + "/metrics")).text():
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail(f"{counted} not in /metrics")
    # the operator's record keeps where it pointed, its credentials masked
    access = [r.getMessage() for r in caplog.records if r.name == "igw.access"]
    assert any(
        f"redirect HTTP {status} to http://" in line and "169.254.169.254" in line for line in access
    ), access
    assert not any("secret" in r.getMessage() for r in caplog.records), access


@contextlib.asynccontextmanager
async def router_over(clusters: list[tuple[str, str, web.Application]]) -> AsyncIterator[tuple[str, Any]]:
    """A router (region ``east``) in front of ``(name, region, app)`` clusters on loopback."""
    async with contextlib.AsyncExitStack() as stack:
        specs = []
        for name, region, app in clusters:
            url = await stack.enter_async_context(serve_app(app, host="127.0.0.1", port=0))
            specs.append({"name": name, "region": region, "endpoint": url, "models": [ROUTED_MODEL]})
        router = create_global_app(
            parse_global_config(global_doc(specs, heartbeats={"required": False})), read_heartbeats=False
        )
        yield await stack.enter_async_context(serve_app(router, host="127.0.0.1", port=0)), router


def redirecting_cluster() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/completions", redirecting)
    app.router.add_get("/v1/responses/{id}", redirecting)
    return app


async def test_a_cluster_s_redirect_is_refused_and_counted() -> None:
    async with (
        router_over([("east-a", "east", redirecting_cluster())]) as (url, app),
        aiohttp.ClientSession() as http,
    ):
        registry = app[ROUTER_KEY].metrics.registry
        for status, content_type in REDIRECTS[:3]:
            params = {"status": str(status), "type": content_type}
            body = {"model": ROUTED_MODEL, "prompt": "hi", "max_tokens": 3}
            async with http.post(
                url + "/v1/completions", params=params, json=body, allow_redirects=False
            ) as resp:
                answer = await resp.read()
                assert_refused(
                    resp.status, resp.headers, answer, f"cluster 'east-a' answered a redirect (HTTP {status})"
                )
        # a stored response's retrieval (the search's exchange) too
        async with http.get(url + "/v1/responses/resp_1", allow_redirects=False) as resp:
            answer = await resp.read()
            assert resp.status == 502, answer
            assert "Location" not in resp.headers, resp.headers
            assert b"169.254" not in answer
        assert registry.get_sample_value("igw_global_upstream_redirects_total", {"cluster": "east-a"}) == 4


async def test_a_cluster_s_redirect_is_tried_at_the_next_cluster() -> None:
    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "cmpl-1", "choices": [{"index": 0, "text": "ok"}], "usage": {}})

    good = web.Application()
    good.router.add_post("/v1/completions", complete)
    clusters = [("east-a", "east", redirecting_cluster()), ("west-a", "west", good)]
    async with router_over(clusters) as (url, app), aiohttp.ClientSession() as http:
        body = {"model": ROUTED_MODEL, "prompt": "hi", "max_tokens": 3}
        for _ in range(3):
            async with http.post(url + "/v1/completions", json=body, allow_redirects=False) as resp:
                assert resp.status == 200, await resp.read()
                assert "Location" not in resp.headers
        registry = app[ROUTER_KEY].metrics.registry
        assert (
            registry.get_sample_value("igw_global_upstream_redirects_total", {"cluster": "east-a"}) or 0
        ) >= 1


async def not_modified(request: web.Request) -> web.Response:
    """A 304 carrying, beside its validators, every field that points a client elsewhere."""
    await request.read()
    headers = {
        "Location": LOCATION,
        "Refresh": f"0; url={LOCATION}",
        "Content-Location": LOCATION,
        "Link": f"<{LOCATION}>; rel=preload",
        "Set-Cookie": "session=from-the-pod",
        "Content-Type": "text/event-stream",
        "ETag": '"v1"',
        "Cache-Control": "no-cache",
        "Vary": "Accept",
    }
    return web.Response(status=304, headers=headers)


def assert_not_relayed(status: int, headers: Any, body: bytes, says: str) -> None:
    """The 502 ``upstream_error`` a 304 to an inference ``POST`` gets (no answer to it: session s50),
    with none of the fields the 304 pointed elsewhere with, nor its validators."""
    assert_refused(status, headers, body, says)
    for name in ("Refresh", "Content-Location", "Link", "Set-Cookie", "ETag"):
        assert name not in headers, headers


@pytest.mark.parametrize("stream", [False, True])
async def test_a_pod_s_304_to_a_completion_is_a_502_none_of_it_relayed(tmp_path: Path, stream: bool) -> None:
    """Found by probing (session s47): a 304 (let through as no redirect) came with its ``Location``,
    ``Refresh`` and ``Content-Location`` as the pod sent them; it kept only its cache fields since.
    Since session s50 a 304 to an inference ``POST`` is no answer to it: a 502, none of it relayed."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": stream}
    async with (
        scripted_upstream({"POST /v1/completions": not_modified}) as pod,
        in_process_gateway(tmp_path, gateway_doc(routing={"retry": {"attempts": 1}}), [pod]) as gw,
        gw.http.post(gw.url + "/v1/completions", json=body, allow_redirects=False) as resp,
    ):
        assert_not_relayed(
            resp.status, resp.headers, await resp.read(), "the model server answered with status 304"
        )


async def test_a_cluster_s_304_to_a_completion_is_a_502_none_of_it_relayed() -> None:
    cluster = web.Application()
    cluster.router.add_post("/v1/completions", not_modified)
    async with (
        router_over([("east-a", "east", cluster)]) as (url, _),
        aiohttp.ClientSession() as http,
        http.post(
            url + "/v1/completions",
            json={"model": ROUTED_MODEL, "prompt": "hi", "max_tokens": 3},
            allow_redirects=False,
        ) as resp,
    ):
        assert_not_relayed(
            resp.status, resp.headers, await resp.read(), "cluster 'east-a' answered with status 304"
        )


STORED = {"id": "resp_1", "object": "response", "status": "completed", "model": MODEL, "output": []}


async def stored(request: web.Request) -> web.Response:
    """A stored response's creation, answered whole."""
    await request.read()
    return web.json_response(STORED)


def assert_304_relayed_bare(status: int, headers: Any, body: bytes) -> None:
    """A relayed 304: no body, its validators and cache fields kept, none that points elsewhere."""
    assert (status, body) == (304, b""), (status, body)
    assert (headers.get("ETag"), headers.get("Cache-Control")) == ('"v1"', "no-cache"), headers
    for name in ("Location", "Refresh", "Content-Location", "Link", "Set-Cookie"):
        assert name not in headers, headers


async def test_a_pod_s_304_to_a_conditional_get_of_input_items_is_relayed_bare(tmp_path: Path) -> None:
    """A conditional ``GET /v1/responses/{id}/input_items`` (``If-None-Match``; no inference POST, so
    no refusal of a bodiless status) reaches the holder with its validator, and the holder's 304 comes
    back as a 304 with only its cache fields (session s50's probe: this is where ``_not_modified`` is
    still reached, since a 304 to an inference POST is a 502)."""
    seen: list[str | None] = []

    async def items(request: web.Request) -> web.Response:
        seen.append(request.headers.get("If-None-Match"))
        return await not_modified(request)

    routes = {"POST /v1/responses": stored, "GET /v1/responses/{id}/input_items": items}
    async with (
        scripted_upstream(routes) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        body = {"model": MODEL, "input": "hi", "store": True}
        async with gw.http.post(gw.url + "/v1/responses", json=body) as resp:
            assert resp.status == 200, await resp.read()
        async with gw.http.get(
            gw.url + "/v1/responses/resp_1/input_items",
            headers={"If-None-Match": '"v1"'},
            allow_redirects=False,
        ) as resp:
            assert_304_relayed_bare(resp.status, resp.headers, await resp.read())
    assert seen == ['"v1"']


async def test_a_cluster_s_304_to_a_conditional_get_of_input_items_is_relayed_bare() -> None:
    """Tier 2's counterpart: the cluster holding the response gets the ``If-None-Match`` and its 304
    reaches the client bare."""
    seen: list[str | None] = []

    async def items(request: web.Request) -> web.Response:
        seen.append(request.headers.get("If-None-Match"))
        return await not_modified(request)

    cluster = web.Application()
    cluster.router.add_post("/v1/responses", stored)
    cluster.router.add_get("/v1/responses/{id}/input_items", items)
    async with router_over([("east-a", "east", cluster)]) as (url, _), aiohttp.ClientSession() as http:
        body = {"model": ROUTED_MODEL, "input": "hi", "store": True}
        async with http.post(url + "/v1/responses", json=body) as resp:
            assert resp.status == 200, await resp.read()
        async with http.get(
            url + "/v1/responses/resp_1/input_items", headers={"If-None-Match": '"v1"'}, allow_redirects=False
        ) as resp:
            assert_304_relayed_bare(resp.status, resp.headers, await resp.read())
    assert seen == ['"v1"']


STORED_ID = "resp_3fa85f64-5717-4562-b3fc-2c963f66afa6"
"""A stored response's id of no minted shape (relayed unchecked), of segments too short for
:func:`~igw.redaction.redact_url` to take for a credential."""


async def redirecting_to_the_id(request: web.Request) -> web.Response:
    """A pod or cluster redirecting a stored response's retrieval to the same path with a slash
    (a framework's trailing-slash redirect), and naming the id in its query too."""
    await request.read()
    where = f"{request.path}/?again={request.match_info['id']}"
    if request.query.get("absolute"):
        where = f"http://10.0.0.7:8000{where}"
    return web.Response(status=307, headers={"Location": where})


def assert_no_id(caplog: pytest.LogCaptureFixture) -> None:
    """No record of the gateway's (or the router's) holds the stored response's id, and the
    redirect's WARNING was written (the scripted pod's own ``aiohttp.access`` line is not ours)."""
    records = [r for r in caplog.records if r.name.startswith("igw")]
    said = [r.getMessage() for r in records]
    assert any("answered a redirect" in line for line in said), said
    assert not any(STORED_ID in line for line in said), said


@pytest.mark.parametrize("absolute", [False, True])
async def test_a_pod_s_redirect_of_a_stored_response_logs_no_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, absolute: bool
) -> None:
    """Found by probing (session s50): a pod redirecting ``GET /v1/responses/<id>`` to
    ``/v1/responses/<id>/`` had the id written whole into the redirect's WARNING and the access
    line's ``error`` (the ``Location`` went through :func:`~igw.redaction.redact_url` alone), while
    the access line's path named it by its reference; the id reads and deletes the response."""
    caplog.set_level(logging.INFO)
    async with (
        scripted_upstream({"GET /v1/responses/{id}": redirecting_to_the_id}) as pod,
        in_process_gateway(tmp_path, gateway_doc(routing={"retry": {"attempts": 1}}), [pod]) as gw,
    ):
        params = {"absolute": "1"} if absolute else {}
        async with gw.http.get(
            f"{gw.url}/v1/responses/{STORED_ID}", params=params, allow_redirects=False
        ) as resp:
            assert resp.status in (404, 502), await resp.read()
            assert "Location" not in resp.headers
    assert_no_id(caplog)


async def test_a_cluster_s_redirect_of_a_stored_response_logs_no_id(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cluster = web.Application()
    cluster.router.add_get("/v1/responses/{id}", redirecting_to_the_id)
    async with (
        # a cluster of its own name: the WARNING is throttled per upstream
        router_over([("east-ids", "east", cluster)]) as (url, _),
        aiohttp.ClientSession() as http,
        http.get(f"{url}/v1/responses/{STORED_ID}?absolute=1", allow_redirects=False) as resp,
    ):
        assert resp.status in (404, 502), await resp.read()
        assert "Location" not in resp.headers
    assert_no_id(caplog)
