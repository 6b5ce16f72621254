"""Every answer the gateway writes names it ``Server: igw``: no interpreter or library version, and never
the model server's own ``Server`` (:mod:`igw.gateway.server_identity`). Real loopback HTTP on both sides
of the ``IGW_HTTP_SERVER`` switch, in front of an aiohttp model server (whose default ``Server`` is
``Python/x.y aiohttp/x.y.z``)."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.server_identity import SERVER_NAME, name_every_answer
from igw.gateway.serving import serve_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, connection, scheduler

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DOC = config_doc([scheduler("llama", MODEL)])
_VERSIONED = re.compile(r"python|aiohttp|\d+\.\d+", re.IGNORECASE)


def _named_by_the_gateway(what: str, headers: Any) -> None:
    assert headers.getall("Server", []) == [SERVER_NAME], f"{what}: {headers.getall('Server', [])}"
    leaks = [f"{k}: {v}" for k, v in headers.items() if k.lower() == "server" and _VERSIONED.search(v)]
    assert not leaks, f"{what}: {leaks}"


async def _raw_answer_head(port: int, request: bytes) -> bytes:
    async with connection(port) as (reader, writer):
        writer.write(request)
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_every_answer_names_the_gateway_and_no_version(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with running(FakeModelServer("a", tokens=3)) as (a,), gateway(DOC, {"llama": [a.key]}) as gw:
        direct = await gw.http.post(f"http://{a.key}/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert "aiohttp" in direct.headers["Server"]  # what would leak if it were relayed
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 3}
        answers: dict[str, aiohttp.ClientResponse] = {
            "forwarded answer": await gw.post("/v1/completions", body),
            "relayed stream": await gw.post("/v1/completions", {**body, "stream": True}),
            "unknown model (404)": await gw.post("/v1/completions", {**body, "model": "nope"}),
            "bad JSON (400)": await gw.post("/v1/completions", b"{"),
            "models": await gw.http.get(gw.url + "/v1/models"),
            "healthz": await gw.http.get(gw.url + "/healthz"),
            "metrics": await gw.http.get(gw.url + "/metrics"),
            "no such route (404)": await gw.http.get(gw.url + "/nope"),
        }
        for what, response in answers.items():
            await response.read()
            _named_by_the_gateway(what, response.headers)
        assert answers["relayed stream"].status == 200
        assert answers["unknown model (404)"].status == 404
        port = urlsplit(gw.url).port
        assert port is not None
        head = await _raw_answer_head(port, b"GET / HTTP/1.1\r\nHost: gw\r\nBad Header: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400")
        fields = [line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line]
        assert [value.strip() for name, value in fields if name.lower() == b"server"] == [b"igw"]


async def test_an_application_named_by_the_signal_overrides_aiohttps_default() -> None:
    async def hello(_: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.headers["Server"] = "handler-set/1.0"
        return response

    app = name_every_answer(web.Application())
    app.router.add_get("/", hello)
    async with (
        serve_app(app, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as http,
        http.get(url + "/") as response,
    ):
        _named_by_the_gateway("handler's own Server", response.headers)
