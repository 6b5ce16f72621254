"""Client-facing errors name what failed, never where it runs.

Found by probing (session s45): a 502/504 a client got named the pod's or cluster's internal
endpoint (``upstream 127.0.0.1:45267 failed before responding``, ``the model server at
10.0.3.17:8000 stopped sending its response``, a global router's ``upstream http://gw.internal:8080
sent no response within 30s``): pod IPs, internal host names and ports, to any caller. Each error
path here - a connection cut before the answer, a head that never comes (a stream's
``streamIdleTimeout``, a whole answer's ``responseTimeout`` sweep), a body that stops, a stream
cut into its terminal SSE event, a compressed stream, the Anthropic-shaped variants, the default
backend down, and the global router's clusters failing - is scanned, body and headers, for the
address; the access log keeps it for the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import MODEL as ROUTED_MODEL
from tests.global_router.support import global_doc
from tests.reliability.harness import MODEL, gateway_doc, in_process_gateway, scripted_upstream

EVENT = b'data: {"choices":[{"index":0,"text":"hi"}]}\n\n'


class Misbehaving:
    """A model server (or a cluster's gateway) that fails as its request's ``?mode=`` says; a
    handler left waiting is released when the test ends (:meth:`release`)."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        mode = request.query.get("mode", "")
        if mode == "reset":  # read, then cut with no answer (an engine crash)
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if mode == "silent":  # no head at all
            await self.released.wait()
            return web.Response()
        if mode == "cut_body":  # a whole answer's head and the start of its body, then nothing
            resp = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": "1000"})
            await resp.prepare(request)
            await resp.write(b'{"choices": [')
            await self.released.wait()
            return resp
        headers = {"Content-Type": "text/event-stream"}
        if mode == "gzip":
            headers["Content-Encoding"] = "gzip"
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        if mode == "gzip":
            await resp.write(zlib.compressobj(wbits=31).compress(EVENT))
        else:  # "stall": one event, then nothing
            await resp.write(EVENT)
        await self.released.wait()
        return resp


@contextlib.asynccontextmanager
async def misbehaving_pod() -> AsyncIterator[tuple[str, Misbehaving]]:
    pod = Misbehaving()
    routes = {"POST /v1/completions": pod.handle, "POST /v1/messages": pod.handle}
    async with scripted_upstream(routes) as key:
        try:
            yield key, pod
        finally:
            pod.released.set()  # before the server's cleanup, which waits for its handlers


def assert_names_no_address(status: int, headers: Any, body: bytes, address: str) -> None:
    """Neither the host nor the port of ``address`` (``host:port``, or a URL) in the answer."""
    host, port = address.rsplit("/", 1)[-1].rsplit(":", 1)
    shown = body.decode() + "\n" + "\n".join(f"{k}: {v}" for k, v in headers.items())
    assert host not in shown, (status, shown)
    assert port not in shown, (status, shown)


COMPLETION = {"model": MODEL, "prompt": "hello", "max_tokens": 3}
MESSAGES = {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("path", "body", "mode", "status", "says"),
    [
        ("/v1/completions", COMPLETION, "reset", 502, "the model server failed before responding"),
        ("/v1/messages", MESSAGES, "reset", 502, "the model server failed before responding"),
        ("/v1/completions", {**COMPLETION, "stream": True}, "silent", 504, "sent no response within 0.4s"),
        ("/v1/messages", {**MESSAGES, "stream": True}, "silent", 504, "sent no response within 0.4s"),
        ("/v1/completions", COMPLETION, "silent", 504, "the model server sent no response within 0.3s"),
        ("/v1/completions", COMPLETION, "cut_body", 504, "the model server stopped sending its response"),
        ("/v1/completions", {**COMPLETION, "stream": True}, "stall", 200, "before the response was complete"),
        ("/v1/messages", {**MESSAGES, "stream": True}, "stall", 200, "before the response was complete"),
        ("/v1/completions", {**COMPLETION, "stream": True}, "gzip", 502, "sent a compressed event stream"),
    ],
)
async def test_a_failing_pod_is_not_named_by_address(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    mode: str,
    status: int,
    says: str,
) -> None:
    routing = {"streamIdleTimeout": "400ms", "responseTimeout": "300ms", "retry": {"attempts": 1}}
    caplog.set_level(logging.INFO, logger="igw.access")
    async with (
        misbehaving_pod() as (pod, _),
        in_process_gateway(tmp_path, gateway_doc(routing=routing), [pod]) as gw,
    ):
        async with gw.http.post(gw.url + path, params={"mode": mode}, json=body) as resp:
            answer = await asyncio.wait_for(resp.read(), timeout=20)
            assert resp.status == status, answer
            assert says in answer.decode(), answer
            assert resp.headers["X-Request-Id"]
            assert_names_no_address(resp.status, resp.headers, answer, pod)
        # the operator's record keeps it
        await asyncio.sleep(0.05)
        assert any(pod in record.getMessage() for record in caplog.records if record.name == "igw.access")


async def test_the_default_backend_down_is_named_not_addressed(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{sock.getsockname()[1]}"
    # a host name, as in-cluster (name.<namespace>.svc): here the loopback, on a port none listens on
    default = {"name": "localhost", "port": int(closed.rsplit(":", 1)[1])}
    doc = config_doc([scheduler(MODEL, MODEL)], bbr={"defaultBackend": default})
    async with (
        running(FakeModelServer("a")) as (a,),
        in_process_gateway(tmp_path, doc, [a.key]) as gw,
        gw.http.post(gw.url + "/v1/completions", json={"model": "other", "prompt": "x"}) as resp,
    ):
        answer = await resp.read()
        assert resp.status == 502, answer
        assert b"could not connect to the default backend" in answer
        assert_names_no_address(resp.status, resp.headers, answer, closed)
        assert b"localhost" not in answer


@contextlib.asynccontextmanager
async def router_over(cluster_url: str, **upstream: Any) -> AsyncIterator[str]:
    clusters = [{"name": "east-a", "region": "east", "endpoint": cluster_url, "models": [ROUTED_MODEL]}]
    doc = global_doc(clusters, heartbeats={"required": False}, upstream=upstream)
    app = create_global_app(parse_global_config(doc), read_heartbeats=False)
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        yield url


@pytest.mark.parametrize(
    ("mode", "stream", "status", "says"),
    [
        ("reset", False, 502, "cluster 'east-a' failed before responding"),
        ("silent", False, 504, "cluster 'east-a' sent no response within 0.4s"),
        ("silent", True, 504, "cluster 'east-a' sent no response within 0.4s"),
        ("cut_body", False, 504, "cluster 'east-a' did not finish its response within 0.4s"),
        ("gzip", True, 502, "cluster 'east-a' sent a compressed event stream"),
    ],
)
async def test_a_failing_cluster_is_named_not_addressed(
    mode: str, stream: bool, status: int, says: str
) -> None:
    cluster = Misbehaving()
    app = web.Application()
    app.router.add_post("/v1/completions", cluster.handle)
    async with serve_app(app, host="127.0.0.1", port=0) as cluster_url:
        try:
            async with (
                router_over(cluster_url, requestTimeoutSeconds=0.4) as url,
                aiohttp.ClientSession() as http,
            ):
                body = {"model": ROUTED_MODEL, "prompt": "hi", "max_tokens": 3, "stream": stream}
                async with http.post(url + "/v1/completions", params={"mode": mode}, json=body) as resp:
                    answer = await asyncio.wait_for(resp.read(), timeout=20)
                    assert resp.status == status, answer
                    assert says in answer.decode(), answer
                    assert_names_no_address(resp.status, resp.headers, answer, cluster_url)
        finally:
            cluster.released.set()  # before the cluster's cleanup, which waits for its handlers
