"""Ambiguous HTTP/1.1 framing is refused the same way by both server sides.

A gateway behind a load balancer must not accept a request whose length or target another HTTP
implementation could read differently (request smuggling / desync, RFC 9112 6.3 and 3.2): every such
head gets 400 ``bad_http_request`` with the OpenAI error shape and never reaches a model server. The
lean side (``igw.gateway.lean_server``) hands every head it does not serve to aiohttp; these cases pin
that it neither serves one of them itself nor fails on one (an ``Upgrade`` head once made llhttp raise
out of ``data_received``: no answer, an asyncio "Fatal error" logged per request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from igw.gateway.lean_server import SWITCH_ENV
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.reliability.test_http_errors import raw_exchange

DOC = config_doc([scheduler("llama", "m")])
BODY = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3})
N = len(BODY)
HEAD = "POST /v1/completions HTTP/1.1\r\n"
H = f"{HEAD}Host: g\r\n"
CL = f"Content-Length: {N}\r\n"
TE = "Transfer-Encoding: chunked\r\n"

REFUSED: dict[str, str] = {
    "Content-Length then Transfer-Encoding": f"{H}{CL}{TE}\r\n",
    "Transfer-Encoding then Content-Length": f"{H}{TE}{CL}\r\n",
    "two different Content-Lengths": f"{H}{CL}Content-Length: {N + 5}\r\n\r\n",
    "two equal Content-Lengths": f"{H}{CL}{CL}\r\n",
    "signed Content-Length": f"{H}Content-Length: +{N}\r\n\r\n",
    "Content-Length list": f"{H}Content-Length: {N}, {N}\r\n\r\n",
    "negative Content-Length": f"{H}Content-Length: -1\r\n\r\n",
    "Content-Length past 64 bits": f"{H}Content-Length: 99999999999999999999999\r\n\r\n",
    "space before the colon": f"{H}Content-Length : {N}\r\n\r\n",
    "obsolete line folding": f"{H}X-A: b\r\n c\r\nContent-Length: {N}\r\n\r\n",
    "bare LF line ends": f"POST /v1/completions HTTP/1.1\nHost: g\nContent-Length: {N}\n\n",
    "NUL in a header value": f"{H}X-A: b\x00c\r\nContent-Length: {N}\r\n\r\n",
    "unknown transfer coding": f"{H}Transfer-Encoding: xchunked\r\nContent-Length: {N}\r\n\r\n",
    "chunked not last": f"{H}Transfer-Encoding: chunked, identity\r\n\r\n",
    "no Host": f"{HEAD}Content-Length: {N}\r\n\r\n",
    "two Hosts": f"{HEAD}Host: a\r\nHost: b\r\nContent-Length: {N}\r\n\r\n",
}

NOT_FRAMING: dict[str, str] = {
    "space before the colon": "malformed HTTP request header",
    "obsolete line folding": "malformed HTTP request header",
    "bare LF line ends": "malformed HTTP request line",
    "NUL in a header value": "malformed HTTP request header",
    "no Host": "malformed HTTP request header",
    "two Hosts": "malformed HTTP request header",
}
"""What the refusal says where it is not about the body's length (the others: framing). Before
session s37 a bare-LF head and a space before a colon were answered as framing errors: the parser's
message was matched with the request bytes it quotes, which held ``Content-Length``."""
FRAMING = "malformed HTTP request framing"


@pytest.fixture(params=["lean", "aiohttp"])
def server_side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    side = str(request.param)
    monkeypatch.setenv(SWITCH_ENV, side)
    return side


async def test_ambiguous_framing_is_refused_and_never_forwarded(
    gateway: Callable[..., Any], server_side: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        for name, head in REFUSED.items():
            status, headers, body = await raw_exchange(gw.url, head.encode() + BODY)
            assert status == 400, (server_side, name, body)
            error = orjson.loads(body)["error"]
            assert error["code"] == "bad_http_request", (server_side, name)
            assert error["message"].startswith(NOT_FRAMING.get(name, FRAMING)), (server_side, name, error)
            assert headers.get("x-request-id"), (server_side, name)
        assert pod.received == [], f"{server_side}: an ambiguous request reached the model server"
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]


async def test_an_upgrade_request_is_served_as_plain_http_by_either_side(
    gateway: Callable[..., Any], server_side: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``Upgrade: h2c`` is ignored (RFC 9110 7.8 lets a server do so): one answer, one forward."""
    head = (
        f"{H}Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings, close\r\n"
        f"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nContent-Length: {N}\r\n\r\n"
    )
    async with running(FakeModelServer("a")) as (pod,), gateway(DOC, {"llama": [pod.key]}) as gw:
        status, _headers, body = await raw_exchange(gw.url, head.encode() + BODY)
        assert status == 200, (server_side, body)
        assert len(pod.received) == 1
    assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]
