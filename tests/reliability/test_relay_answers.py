"""What the answer relay hands a client for a pod's unusual answers, over real loopback HTTP on both
sides of the ``IGW_HTTP_SERVER`` switch: a whole answer the pod compressed though asked for none is
decoded for a client that does not accept its coding (RFC 9110 12.5.3) and kept as sent for one
that does; an error answered as an event stream is a refusal retried as any other (status, not
content type, decides)."""

from __future__ import annotations

import asyncio
import gzip
import struct
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from igw.gateway.lean_server import SWITCH_ENV
from tests.reliability.harness import (
    MODEL,
    answering_coded,
    gateway_doc,
    in_process_gateway,
    scripted_upstream,
)

USAGE = {"prompt_tokens": 3, "completion_tokens": 5000, "total_tokens": 5003}
SWITCHES = ["lean", "aiohttp"]


def _answer(text: str) -> bytes:
    return orjson.dumps(
        {"object": "text_completion", "choices": [{"index": 0, "text": text}], "usage": USAGE}
    )


async def _post_raw(
    url: str, accept_encoding: str | None, path: str = "/v1/completions"
) -> tuple[int, str | None, bytes]:
    """POST a completion as a plain client: no ``Accept-Encoding`` unless given, nothing decoded
    (``path``: another route, ``GET`` for one under ``/v1/responses/``)."""
    headers = {} if accept_encoding is None else {"Accept-Encoding": accept_encoding}
    method = "GET" if path.startswith("/v1/responses/") else "POST"
    body = {"model": MODEL, "prompt": "x"} if method == "POST" else None
    async with (
        aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=["Accept-Encoding"]) as http,
        http.request(method, url + path, json=body, headers=headers) as resp,
    ):
        return resp.status, resp.headers.get("Content-Encoding"), await resp.read()


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize(
    ("coding", "text"),
    [("gzip", "hi"), ("deflate", "hi"), ("gzip", "t" * (3 << 20))],  # the last past the 1 MiB buffer
    ids=["gzip", "deflate", "gzip-large"],
)
async def test_a_compressed_answer_is_decoded_for_a_client_that_does_not_accept_its_coding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str, coding: str, text: str
) -> None:
    """Before session s42 the coded bytes went to every client: curl (no ``Accept-Encoding``) and a
    client asking for ``identity`` or ``br`` read gzip as their JSON answer. A client accepting
    the coding still gets it as the pod sent it."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    plain = _answer(text)
    coded = gzip.compress(plain) if coding == "gzip" else zlib.compress(plain)

    answer = answering_coded(coded, coding)

    async with (
        scripted_upstream({"POST /v1/completions": answer}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        for refusing in (None, "identity", "br", f"{coding};q=0, *"):
            status, sent_coding, body = await _post_raw(gw.url, refusing)
            assert (status, sent_coding) == (200, None), refusing
            assert body == plain, refusing
        for accepting in (f"{coding}, br", "*"):
            status, sent_coding, body = await _post_raw(gw.url, accepting)
            assert (status, sent_coding, body) == (200, coding, coded), accepting


RECORD = orjson.dumps({"object": "text_completion", "text": "hello world"}) + b"\n"
LIKE_ZLIB = {
    "answer": _answer("hi " * 100),
    "2 MiB of one record": RECORD * ((2 << 20) // len(RECORD)),
}


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("content", list(LIKE_ZLIB))
async def test_a_raw_deflate_answer_that_starts_like_zlib_is_relayed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str, content: str
) -> None:
    """A raw ``deflate`` body opening with a stored block whose length's low byte is a zlib ``FLG``
    (``78 9c``), its content repeating that length: zlib reads a 64 KiB stored block of it. Before
    session s45 such an answer was a 502 (``truncated``) for a client accepting ``deflate`` and
    garbage, then a cut connection, for one that does not; before session s46 still so when it
    decoded past 64 bytes per coded byte plus 1 MiB (2 MiB of one repeated record).

    Its decoded body must start with that length (``9c 00``: zlib's reading takes it as the stored
    block's ``NLEN``), so it is no JSON: since session s50 an inference POST's compressed answer that
    is no JSON object is refused (a 502 ``not_json_object``, both to a client decoded for and to one
    taking it coded). It is relayed where the gateway relays any body a pod sends: a stored
    response's input items (``GET /v1/responses/{id}/input_items``)."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    plain = struct.pack("<H", 0x9C) + LIKE_ZLIB[content]
    squeezer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = b"\x78" + struct.pack("<HH", 0x9C, 0x9C ^ 0xFFFF) + plain[:0x9C]
    body += squeezer.compress(plain[0x9C:]) + squeezer.flush()
    assert zlib.decompress(body, -zlib.MAX_WBITS) == plain

    async def stored(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "resp_1", "object": "response", "status": "completed", "output": []})

    routes = {
        "POST /v1/completions": answering_coded(body, "deflate"),
        "POST /v1/responses": stored,
        "GET /v1/responses/{id}/input_items": answering_coded(body, "deflate"),
    }
    async with (
        scripted_upstream(routes) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        async with gw.http.post(gw.url + "/v1/responses", json={"model": MODEL, "input": "hi"}) as resp:
            assert resp.status == 200, await resp.read()  # the gateway knows the pod that holds it
        items = "/v1/responses/resp_1/input_items"
        assert (await _post_raw(gw.url, None, items)) == (200, None, plain)  # relayed decoded
        assert (await _post_raw(gw.url, "gzip, deflate", items)) == (200, "deflate", body)  # relayed coded
        refusals = {  # read as raw deflate (zlib's garbage thrown away), then found no JSON object
            None: "a compressed body that does not start as a JSON object",  # at its first byte
            "gzip, deflate": "a compressed body that is not a JSON object",  # held whole
        }
        for accepting, what in refusals.items():
            status, coding, refused = await _post_raw(gw.url, accepting)
            assert (status, coding) == (502, None), (accepting, refused)
            assert orjson.loads(refused)["error"]["type"] == "upstream_error"
            assert what in orjson.loads(refused)["error"]["message"], refused


def _two_members(plain: bytes) -> bytes:
    """``plain`` as a gzip body of two members (RFC 1952 2.2), cut inside the answer's text."""
    cut = len(plain) // 2
    return gzip.compress(plain[:cut]) + gzip.compress(plain[cut:])


def _nested_past_the_parsers_bound(plain: bytes) -> bytes:
    """``plain`` with a key read by the relay whose value nests past the JSON parser's recursion
    bound before it (a ``RecursionError`` for :mod:`json`), gzip-coded."""
    deep = b'{"usage": ' + b"[" * 5000 + b"]" * 5000 + b", " + plain[1:]
    return gzip.compress(deep)


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("coded", [_two_members, _nested_past_the_parsers_bound], ids=["two-members", "deep"])
async def test_an_unusual_gzip_answer_is_relayed_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str, coded: Callable[[bytes], bytes]
) -> None:
    """Before session s43 a gzip body of two members reached a client that does not accept gzip cut
    at its first member's end, with a 200 (its usage, in the second, uncharged); and a value nested
    past the JSON parser's bound ahead of the usage raised ``RecursionError`` in the relay: a 500
    ``internal_error`` with a traceback, for clients accepting gzip or not."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    plain = _answer("hello world")
    body = coded(plain)

    answer = answering_coded(body)

    async with (
        scripted_upstream({"POST /v1/completions": answer}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        status, sent_coding, got = await _post_raw(gw.url, None)
        assert (status, sent_coding) == (200, None)
        assert gzip.decompress(body) == got
        assert (await _post_raw(gw.url, "gzip")) == (200, "gzip", body)


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("status", [503, 429])
async def test_an_error_answered_as_an_event_stream_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str, status: int
) -> None:
    """A pod's 503 (or 429) sent as ``text/event-stream`` is a refusal as a JSON one is (the retry
    policy names statuses): the next pod answers. Before session s42 it was relayed as a stream and
    the client got the 503 with one pod never asked."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    asked = {"refusing": 0, "serving": 0}

    async def refusing(request: web.Request) -> web.Response:
        await request.read()
        asked["refusing"] += 1
        return web.Response(
            status=status,
            body=b'data: {"error":"overloaded"}\n\n',
            headers={"Content-Type": "text/event-stream"},
        )

    async def serving(request: web.Request) -> web.Response:
        await request.read()
        asked["serving"] += 1
        return web.Response(body=_answer("ok"), content_type="application/json")

    async with (
        scripted_upstream({"POST /v1/completions": refusing}) as bad,
        scripted_upstream({"POST /v1/completions": serving}) as good,
        in_process_gateway(tmp_path, gateway_doc(), [bad, good]) as gw,
    ):
        for _ in range(4):
            resp = await gw.complete("x", stream=True)
            assert resp.status == 200
            assert (await resp.json())["choices"][0]["text"] == "ok"
    assert asked["serving"] == 4
    assert asked["refusing"] >= 1


async def test_large_error_answers_log_one_warning_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSON error answer past ``ERROR_ANSWER_BUFFER_BYTES`` (1 MiB) is relayed with a WARNING: a pod
    answering every request so wrote one line per request until session s42 (five here), a flood
    that buried the rest of the log, and no metric counted them. Now the first passes, the rest are
    held for the minute, and each is counted in ``igw_upstream_large_error_answers_total``."""
    huge = b'{"error":{"code":400,"message":"' + b"x" * (1 << 21) + b'"}}'

    async def failing(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=400, body=huge, content_type="application/json")

    async with (
        scripted_upstream({"POST /v1/completions": failing}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        caplog.set_level("WARNING", logger="igw.gateway")
        for _ in range(5):
            resp = await gw.complete("x")
            assert resp.status == 400
            assert await resp.read() == huge
        counted = 'igw_upstream_large_error_answers_total{model="llama"} 5.0'
        for _ in range(200):  # counted once each handler has finished its accounting
            if counted in await (await gw.http.get(gw.url + "/metrics")).text():
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the large error answers were not counted")
    lines = [r for r in caplog.records if "error body over" in r.getMessage()]
    assert len(lines) == 1


@pytest.mark.parametrize("switch", SWITCHES)
async def test_a_large_error_answer_whose_client_leaves_mid_relay_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """``igw_upstream_large_error_answers_total`` counts the large error answers relayed, however
    their relay ended: until session s42 one whose client closed its connection after the first
    megabytes (the rest of the pod's answer still coming) was not counted, nor logged as counted."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    release = asyncio.Event()

    async def failing(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=400, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"error":{"code":400,"message":"' + b"x" * (3 << 19))
        await release.wait()  # the rest never comes while the client is there
        return response

    async with (
        scripted_upstream({"POST /v1/completions": failing}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        resp = await gw.complete("x")
        assert resp.status == 400
        assert await resp.content.readexactly(1 << 20)  # the first MiB relayed
        resp.close()  # the client leaves mid-relay
        counted = 'igw_upstream_large_error_answers_total{model="llama"} 1.0'
        for _ in range(200):
            if counted in await (await gw.http.get(gw.url + "/metrics")).text():
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the large error answer cut short was not counted")
        release.set()


def _eventless(*, comment: bytes = b"") -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A pod that answers a stream 200 ``text/event-stream`` and ends it cleanly (its chunked
    body's last chunk) without a single event: at once, or after ``comment`` and 0.3 s of silence."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if comment:
            await response.write(comment)
            await asyncio.sleep(0.3)
        await response.write_eof()
        return response

    return answer


@pytest.mark.parametrize("switch", SWITCHES)
async def test_a_stream_ended_without_any_event_is_a_broken_stream_not_an_empty_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """A pod's stream that ends with no event at all (no output, no ``[DONE]``) is answered 502
    ``upstream_error`` while nothing was sent (retried at another pod with ``retryOn: [5xx]``, as
    a connection closed before the answer's head is), or ends with the terminal error event once
    comments were (the pod's, the gateway's keep-alives). Until session s42 it was relayed as an
    empty 200 stream: the OpenAI SDK's iterator ended without a chunk or an error, and the caller
    read an empty completion."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    served = {"n": 0}
    for name in ("one", "ka", "two"):
        (tmp_path / name).mkdir()
    retry_5xx = {"retry": {"attempts": 2, "retryOn": ["5xx"]}}
    pings = {"sseKeepAliveInterval": "50ms"}

    async def serving(request: web.Request) -> web.Response:
        await request.read()
        served["n"] += 1
        body = b'data: {"choices":[{"index":0,"text":"ok"}]}\n\ndata: [DONE]\n\n'
        return web.Response(body=body, headers={"Content-Type": "text/event-stream"})

    async with (
        scripted_upstream({"POST /v1/completions": _eventless()}) as empty,
        in_process_gateway(tmp_path / "one", gateway_doc(), [empty]) as gw,
    ):
        resp = await gw.complete("x", stream=True)
        assert resp.status == 502
        assert (await resp.json())["error"]["code"] == "upstream_error"
    async with (
        scripted_upstream({"POST /v1/completions": _eventless(comment=b": opening\n\n")}) as slow,
        in_process_gateway(tmp_path / "ka", gateway_doc(routing=pings), [slow]) as gw,
    ):
        resp = await gw.complete("x", stream=True)
        assert resp.status == 200  # the pod's comment started the response, keep-alives followed
        body = await resp.read()
        assert body.startswith(b": opening\n\n: ping\n\n")
        assert b'"code":"upstream_error"' in body
        assert body.endswith(b"data: [DONE]\n\n")
    async with (
        scripted_upstream({"POST /v1/completions": _eventless()}) as empty,
        scripted_upstream({"POST /v1/completions": serving}) as good,
        in_process_gateway(tmp_path / "two", gateway_doc(routing=retry_5xx), [empty, good]) as gw,
    ):
        for _ in range(4):
            resp = await gw.complete("x", stream=True)
            assert resp.status == 200
            assert b'"text":"ok"' in await resp.read()
    assert served["n"] == 4
