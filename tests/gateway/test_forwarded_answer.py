"""A model server's complete answer forwarded from its raw head (igw.gateway.forwarded_answer): the
fields dropped and added, the head byte for byte as aiohttp's serialiser writes the same response, and
over real loopback connections, through the lean side and through aiohttp, the same answer."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from igw.gateway.forwarded_answer import ForwardedAnswer, as_response, forwarded_answer
from igw.gateway.lean_server import SWITCH_ENV, response_head
from igw.gateway.serving import GatewayServer
from igw.perf.gateway_backend import realistic_vllm_page
from igw.perf.raw_http import serve_backend
from tests.gateway.support import (
    config_doc,
    connection,
    parsing_connection,
    runner_gateway,
    scheduler,
)

DOC = config_doc([scheduler("llama", "m")])
COMPLETION = orjson.dumps(
    {
        "id": "c1",
        "object": "text_completion",
        "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
    }
    | {"usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
)
UPSTREAM_FIELDS = [
    (b"Content-Type", b"application/json"),
    (b"Content-Length", b"%d" % len(COMPLETION)),
    (b"Connection", b"keep-alive, X-Hop"),
    (b"connection", b"X-Other-Hop "),
    (b"X-Hop", b"1"),
    (b"x-other-hop", b"2"),
    (b"Keep-Alive", b"timeout=5"),
    (b"X-Request-Id", b"upstream-id"),
    (b"X-Kept", b"a"),
    (b"x-kept", b"b"),
    (b"X-Trailing", b"spaced  "),
    (b"X-Latin", b"caf\xe9"),
    (b"Server", b"model-server/1"),
]
_DATE = re.compile(rb"\r\nDate: [^\r]*\r\n")


def _noted(fields: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """What the upstream client notes of ``fields`` (its parser is fed the same head)."""
    conn = parsing_connection()
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"%b: %b\r\n" % f for f in fields) + b"\r\n"
    assert conn._parser is not None  # dropped only when the connection is lost
    conn._parser.feed_data(head)
    assert conn.fields == fields
    return conn.noted


def _without_date(head: bytes) -> bytes:
    return _DATE.sub(b"\r\nDate: -\r\n", head)


def test_hop_by_hop_connection_named_and_overridden_fields_are_dropped_in_order() -> None:
    answer = forwarded_answer(
        200,
        UPSTREAM_FIELDS,
        COMPLETION,
        noted=_noted(UPSTREAM_FIELDS),
        add={"X-Request-Id": "gw-1"},
    )
    assert [name for name, _ in answer.fields] == [
        b"Content-Type",
        b"X-Kept",
        b"x-kept",
        b"X-Trailing",
        b"X-Latin",
        b"X-Request-Id",
    ]
    assert dict(answer.fields)[b"X-Request-Id"] == b"gw-1"
    assert dict(answer.fields)[b"X-Latin"] == b"caf\xe9"  # the bytes as the model server sent them
    assert (answer.has_type, answer.has_date) == (True, False)
    assert b"Server: igw\r\n" in answer.head(keep_alive=True)  # the model server's own is dropped


@pytest.mark.parametrize("keep_alive", [True, False])
@pytest.mark.parametrize(
    ("status", "fields", "body"),
    [
        (200, [(f[0], f[1]) for f in UPSTREAM_FIELDS if f[1] != b"caf\xe9"], COMPLETION),
        (200, [], b"raw bytes"),  # no Content-Type: aiohttp's default is added
        (200, [(b"Transfer-Encoding", b"chunked"), (b"X-A", b"1"), (b"Server", b"s")], b"{}"),
        (404, [(b"Content-Type", b"application/json"), (b"Date", b"Mon, 01 Jan 2024 00:00:00 GMT")], b"{}"),
        (200, [(b"Content-Type", b"application/json")], b""),
        (599, [(b"Content-Type", b"application/json")], b"{}"),  # no standard reason phrase
    ],
)
def test_the_head_is_what_aiohttps_serialiser_writes_for_the_same_response(
    status: int, fields: list[tuple[bytes, bytes]], body: bytes, keep_alive: bool
) -> None:
    answer = forwarded_answer(status, fields, body, noted=_noted(fields), add={"X-Request-Id": "gw-1"})
    as_aiohttp = response_head(answer.to_response(), len(body), keep_alive=keep_alive)
    assert _without_date(answer.head(keep_alive=keep_alive)) == _without_date(as_aiohttp)


def test_the_gateways_fields_refuse_cr_and_lf_as_aiohttps_serialiser_does() -> None:
    with pytest.raises(ValueError, match="X-Bad"):
        forwarded_answer(200, [], b"", noted={}, add={"X-Bad": "a\r\nSet-Cookie: x=1"})
    with pytest.raises(ValueError, match="CR or LF"):
        forwarded_answer(200, [], b"", noted={}, add={"X-Bad\n": "a"})


def test_an_aiohttp_response_passes_through_as_response_unchanged() -> None:
    response = web.Response(status=204)
    assert as_response(response) is response
    converted = as_response(ForwardedAnswer(201, [(b"X-A", b"1")], b"x", has_type=False, has_date=False))
    assert isinstance(converted, web.Response)
    assert (converted.status, converted.headers["X-A"], converted.body) == (201, "1", b"x")


@contextlib.asynccontextmanager
async def _gateway_before(tmp_path: Path, answer: bytes) -> AsyncIterator[int]:
    """A raw model server giving ``answer`` to every completion, and the gateway in front of it."""
    answers = {
        (b"POST", b"/v1/completions"): answer,
        (b"GET", b"/metrics"): b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%b"
        % (len(page := realistic_vllm_page().encode()), page),
    }
    backend = await serve_backend(answers)
    key = f"127.0.0.1:{backend.sockets[0].getsockname()[1]}"
    try:
        async with runner_gateway(tmp_path, key, doc=DOC) as (port, _, runner):
            server = runner.server
            assert isinstance(server, GatewayServer)
            yield port
            assert server.lean_requests >= 0
    finally:
        backend.close()
        await backend.wait_closed()


async def _exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` and read the answer's head and ``Content-Length`` body."""
    async with connection(port) as (reader, writer):
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"\r\nContent-Length: (\d+)\r\n", head).group(1))  # type: ignore[union-attr]
        return head + await reader.readexactly(length)


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_either_side_forwards_the_model_servers_answer_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    upstream_head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"%b: %b\r\n" % f for f in UPSTREAM_FIELDS)
    body = orjson.dumps({"model": "m", "prompt": "hi", "max_tokens": 3})
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"X-Request-Id: req-7\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    async with _gateway_before(tmp_path, upstream_head + b"\r\n" + COMPLETION) as port:
        answer = await _exchange(port, request)
    head, _, got = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 OK"
    names = [line.split(b":", 1)[0].lower() for line in lines[1:]]
    assert got == COMPLETION
    assert b"x-request-id: req-7" in [line.lower() for line in lines]
    for dropped in (b"connection", b"x-hop", b"x-other-hop", b"keep-alive"):
        assert dropped not in names
    assert names.count(b"x-request-id") == 1
    assert names.count(b"x-kept") == 2
    assert b"X-Trailing: spaced  " in lines
    # A value that is not UTF-8: the lean side passes the model server's bytes through; aiohttp's
    # serialiser (the request path decodes with surrogateescape) drops the undecodable byte.
    assert (b"X-Latin: caf\xe9" if switch == "lean" else b"X-Latin: caf") in lines
    assert b"Server: igw" in lines  # the gateway's name, neither the model server's nor aiohttp's
    assert names.count(b"server") == 1
    assert names.count(b"date") == 1
    assert names.count(b"content-length") == 1
