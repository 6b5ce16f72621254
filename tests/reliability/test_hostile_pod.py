"""A broken or hostile model server's answers: relayed faithfully where they are HTTP and SSE, a
clear OpenAI-shaped error where they are not, never an error in the gateway.

- Stream events of a shape no engine sends are relayed, not trusted: before session s40 an event
  whose ``choices`` was not a list (``{"choices": 5}``, ``{"choices": true}``) raised TypeError inside
  the relay, which cut the client's stream without its terminal event or ``[DONE]``, logged a
  traceback and skipped the request's accounting.
- A head of more header fields than :data:`~igw.gateway.upstream_client.MAX_RESPONSE_FIELDS` is a
  502 ``upstream_error``: before s40 it was relayed, and the client's own HTTP library refused it
  (aiohttp's client with ``400, message='Too many headers received'``, as if the gateway had
  answered 400).
- A Responses API answer is believed to name the stored response the gateway minted an id for, and
  no other (:func:`igw.gateway.response_ids.believed`): before s40 a pod that named another tenant's
  response id in its answer to any request was remembered as that response's pod, and received that
  tenant's continuations and retrievals of it.
- A non-JSON error's reason phrase is not copied into the client's error: before s40 it was, as the
  pod sent it (up to the head's 256 KiB bound, terminal escapes and all).
- Pods are asked for no content coding, and an event stream compressed anyway is a 502: before s40
  the client's ``Accept-Encoding`` was forwarded, and a compressed stream was relayed with the
  keep-alive comments written as plain text inside its compressed body (the client's decoder
  failed on the first one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.response_ids import believed, mint
from igw.gateway.upstream import _carries_token
from igw.gateway.upstream_client import MAX_RESPONSE_FIELD_BYTES, MAX_RESPONSE_FIELDS
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import (
    MODEL,
    InProcessGateway,
    answering_coded,
    gateway_doc,
    in_process_gateway,
    scripted_upstream,
)

ODD_EVENTS = (b'data: {"choices": 5}\n\n', b'data: {"choices": true}\n\n', b'data: {"choices": "x"}\n\n')


async def odd_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for event in ODD_EVENTS:
        await resp.write(event)
    await resp.write(b'data: {"choices": [{"index": 0, "text": "hi"}]}\n\ndata: [DONE]\n\n')
    await resp.write_eof()
    return resp


async def test_events_whose_choices_are_not_a_list_are_relayed_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with (
        scripted_upstream({"POST /v1/completions": odd_stream}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
    ):
        for _ in range(2):
            resp = await gw.complete("hello", stream=True)
            assert resp.status == 200
            streamed = await resp.read()
            assert all(event in streamed for event in ODD_EVENTS)
            assert streamed.endswith(b"data: [DONE]\n\n")
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
    assert "unhandled error" not in caplog.text
    # each stream was counted (its first token observed, its outcome recorded)
    (ttft,) = [m for m in metrics.splitlines() if m.startswith("igw_time_to_first_token_seconds_count")]
    assert float(ttft.split()[-1]) == 2


@pytest.mark.parametrize("event", ODD_EVENTS)
def test_an_event_of_another_shape_counts_as_output(event: bytes) -> None:
    assert _carries_token(event) is True


async def many_fields(request: web.Request) -> web.Response:
    await request.read()
    headers = {f"X-Field-{i}": "v" for i in range(int(request.query.get("fields", "0")))}
    return web.json_response({"choices": [{"index": 0, "text": "hi"}]}, headers=headers)


async def test_an_answer_with_too_many_header_fields_is_a_502(tmp_path: Path) -> None:
    async with (
        scripted_upstream({"POST /v1/completions": many_fields}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
    ):
        url = gw.url + "/v1/completions"
        body = {"model": "llama", "prompt": "hello", "max_tokens": 4}
        # an answer of 100 fields is relayed (aiohttp adds Content-Type, Content-Length, Date, Server)
        async with gw.http.post(url, params={"fields": str(MAX_RESPONSE_FIELDS - 4)}, json=body) as resp:
            assert resp.status == 200
            assert resp.headers["X-Field-0"] == "v"
        async with gw.http.post(url, params={"fields": "5000"}, json=body) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
        assert error["code"] == "upstream_error"
        assert len(resp.headers) < 20


async def big_field(request: web.Request) -> web.Response:
    await request.read()
    size, count = int(request.query["size"]), int(request.query.get("count", "1"))
    headers = {f"X-Big-{i}": "v" * size for i in range(count)}
    return web.json_response({"choices": [{"index": 0, "text": "hi"}]}, headers=headers)


@pytest.mark.parametrize(
    ("size", "count"),
    [(MAX_RESPONSE_FIELD_BYTES, 1), (300_000, 1), (6000, 3)],
    ids=["one-line-past-8190", "one-300k", "three-of-6000"],
)
async def test_an_answer_with_header_fields_clients_refuse_is_a_502(
    tmp_path: Path, size: int, count: int
) -> None:
    """A pod's header field past aiohttp's client limit (8190 bytes a line), or fields past h11's
    (the OpenAI Python SDK's: 16 KiB a head): the client would fail parsing what the gateway relayed,
    an error of its own library read as the gateway's (aiohttp's ``400, message="Got more than 8190
    bytes when reading"`` before session s42). A 502 ``upstream_error`` instead, and a head within
    both limits is still relayed."""
    async with (
        scripted_upstream({"POST /v1/completions": big_field}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
    ):
        url = gw.url + "/v1/completions"
        body = {"model": "llama", "prompt": "hello", "max_tokens": 4}
        async with gw.http.post(url, params={"size": "4000", "count": "2"}, json=body) as resp:
            assert resp.status == 200
            assert resp.headers["X-Big-0"] == "v" * 4000
        async with gw.http.post(url, params={"size": str(size), "count": str(count)}, json=body) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
        assert error["code"] == "upstream_error"


async def test_a_pod_naming_another_response_id_does_not_take_its_continuations(tmp_path: Path) -> None:
    """Pod ``h`` answers every Responses API request naming the id of a response pod ``a`` stored
    (learnt, say, when a search asked it for that id): the id stays ``a``'s, and so do its
    continuations and retrievals."""
    claimed: list[str] = []
    asked: list[str] = []

    async def claims(request: web.Request) -> web.Response:
        asked.append((await request.json())["request_id"])
        usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
        answer = {"id": claimed[0], "object": "response", "status": "completed", "output": []}
        return web.json_response({**answer, "usage": usage, "store": True, "server": "h"})

    async with (
        running(FakeModelServer("a")) as (a,),
        scripted_upstream({"POST /v1/responses": claims}) as h,
        in_process_gateway(tmp_path, gateway_doc(), [a.key, h]) as gw,
    ):
        responses = gw.state.runtime.schedulers[MODEL].scheduler.responses
        url = gw.url + "/v1/responses"
        while not a.stored_responses:  # the pick is load-aware: until one lands on a
            async with gw.http.post(url, json={"model": MODEL, "input": "a secret"}) as resp:
                assert resp.status == 200
        (victim,) = a.stored_responses
        claimed.append(victim)
        assert responses.endpoint_of(victim) == a.key
        for _ in range(40):  # until h has answered a few
            async with gw.http.post(url, json={"model": MODEL, "input": "hello"}) as resp:
                assert resp.status == 200
            if len(asked) >= 3:
                break
        assert len(asked) >= 3
        assert responses.endpoint_of(victim) == a.key  # not h's: h was asked to store another id
        assert not any(responses.endpoint_of(rid) == h for rid in asked)  # nor did h store those
        body = {"model": MODEL, "input": "and then?", "previous_response_id": victim}
        async with gw.http.post(url, json=body) as resp:
            assert resp.status == 200
            assert (await resp.json())["server"] == "a"
        async with gw.http.get(f"{url}/{victim}") as resp:
            assert (resp.status, (await resp.json())["server"]) == (200, "a")


def test_only_the_minted_id_is_believed() -> None:
    minted, other = mint("tenant:a"), mint("tenant:b")
    assert believed(minted, minted) == minted
    assert believed(other, minted) is None  # another request's id, claimed
    assert believed("resp_engine_own", minted) is None  # the engine ignored the id written
    assert believed(None, minted) is None
    # no id minted (an engine that takes none): the engine's own ids, never one of the minted shape
    assert believed("resp_engine_own", None) == "resp_engine_own"
    assert believed(other, None) is None


@contextlib.asynccontextmanager
async def raw_pod(status_line: bytes, body: bytes = b"<html>boom</html>") -> AsyncIterator[str]:
    """A loopback pod written byte by byte: a valid vLLM ``/metrics`` page, and ``status_line`` (what
    follows ``HTTP/1.1``) with an HTML ``body`` to anything else; one answer per connection."""
    page = FakeModelServer("raw").page().encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            head = await reader.readuntil(b"\r\n\r\n")
            length = [
                ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")
            ]
            await reader.readexactly(int(length[0]) if length else 0)
            if head.startswith(b"GET /metrics "):
                answer, kind = b"200 OK", b"text/plain"
                payload = page
            else:
                answer, kind, payload = status_line, b"text/html", body
            writer.write(
                b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (answer, kind, len(payload), payload)
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_non_json_errors_reason_phrase_is_not_relayed(tmp_path: Path) -> None:
    injected = b"503 Bad \x1b[2J\x1b[31mtenant-b said: hunter2 \xe9" + b"B" * 5000
    async with raw_pod(injected) as pod, in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw:
        resp = await gw.complete("hello")
        error = (await resp.json())["error"]
    assert resp.status == 503
    assert error["code"] == "upstream_error"
    assert error["message"] == "the model server answered HTTP 503 Service Unavailable"


EVENTS = (b'data: {"choices":[{"index":0,"text":"hi"}]}\n\n', b"data: [DONE]\n\n")


async def compressing(request: web.Request) -> web.StreamResponse:
    """A pod behind a compressing proxy: its stream gzipped when the request accepts gzip (or always,
    ``?always=1``), its events 300 ms apart (the gateway's keep-alive comments fall between them)."""
    await request.read()
    gzipped = "gzip" in request.headers.get("Accept-Encoding", "") or "always" in request.query
    headers = {"Content-Type": "text/event-stream", **({"Content-Encoding": "gzip"} if gzipped else {})}
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    coder = zlib.compressobj(wbits=31)
    for i, event in enumerate(EVENTS):
        if i:
            await asyncio.sleep(0.3)
        last = i == len(EVENTS) - 1
        await resp.write(
            coder.compress(event) + coder.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
            if gzipped
            else event
        )
    await resp.write_eof()
    return resp


async def test_pods_are_asked_for_no_content_coding_and_a_compressed_stream_is_a_502(tmp_path: Path) -> None:
    doc = gateway_doc(routing={"sseKeepAliveInterval": "100ms"})
    async with (
        scripted_upstream({"POST /v1/completions": compressing}) as pod,
        in_process_gateway(tmp_path, doc, [pod]) as gw,
    ):
        url = gw.url + "/v1/completions"
        body = {"model": MODEL, "prompt": "hello", "stream": True}
        accepting = {"Accept-Encoding": "gzip, deflate"}  # what the OpenAI SDK sends
        async with gw.http.post(url, json=body, headers=accepting) as resp:
            assert resp.status == 200
            streamed = await resp.read()  # whole: the keep-alive comments are plain events between
        assert streamed.startswith(EVENTS[0])
        assert streamed.endswith(EVENTS[1])
        assert b": ping\n\n" in streamed  # the gateway's keep-alive, between the events
        async with gw.http.post(url, params={"always": "1"}, json=body, headers=accepting) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
        assert error["code"] == "upstream_error"
        assert "compressed event stream" in error["message"]
        assert await usage_unread(gw, 1) == {"coded_stream": 1}


USAGE = {"prompt_tokens": 3, "completion_tokens": 5000, "total_tokens": 5003}


def coded_answer(coding: str, text: str) -> bytes:
    """A completion answer of ``text`` with :data:`USAGE`, in ``coding``."""
    plain = orjson.dumps(
        {"object": "text_completion", "choices": [{"index": 0, "text": text}], "usage": USAGE}
    )
    if coding == "gzip":
        return gzip.compress(plain)
    return zlib.compress(plain) if coding == "deflate" else plain


async def usage_unread(gw: InProcessGateway, total: int) -> dict[str, float]:
    """``igw_answer_usage_unread_total`` by reason (for :data:`MODEL`), once ``total`` were counted."""
    async with asyncio.timeout(10):
        while True:
            text = await (await gw.http.get(gw.url + "/metrics")).text()
            counts = {
                s.labels["reason"]: s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
                if s.name == "igw_answer_usage_unread_total" and s.labels["model"] == MODEL
            }
            if sum(counts.values()) >= total:
                return counts
            await asyncio.sleep(0.05)


async def charged_out(gw: InProcessGateway) -> float:
    """The output tokens the gateway has counted (``igw_tokens_total``), once the count moved."""
    async with asyncio.timeout(10):
        while True:
            text = await (await gw.http.get(gw.url + "/metrics")).text()
            for line in text.splitlines():
                if line.startswith('igw_tokens_total{direction="out"'):
                    return float(line.split()[-1])
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _compressed_answer(
    tmp_path: Path, coding: str, body: bytes
) -> AsyncIterator[tuple[InProcessGateway, aiohttp.ClientResponse]]:
    """A gateway in front of a pod answering every completion with ``body`` labelled
    ``Content-Encoding: coding`` (though the gateway asks for ``identity``), and the answer the
    gateway gave to one completion request."""

    answer = answering_coded(body, coding)

    async with (
        scripted_upstream({"POST /v1/completions": answer}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        yield gw, await gw.complete("hello")


@pytest.mark.parametrize(
    ("coding", "text"),
    [("gzip", "hi"), ("deflate", "hi"), ("gzip", os.urandom(1 << 20).hex())],  # the last relayed as it comes
    ids=["gzip", "deflate", "gzip-relayed"],
)
async def test_a_compressed_whole_answers_usage_is_charged(tmp_path: Path, coding: str, text: str) -> None:
    """A pod that compresses a whole answer though asked for ``identity``: the answer is forwarded as
    it came and its usage charged. Before session s41 it went unread: charged no output tokens."""
    async with _compressed_answer(tmp_path, coding, coded_answer(coding, text)) as (gw, resp):
        assert resp.status == 200
        assert orjson.loads(await resp.read())["usage"] == USAGE  # decoded by the client, as sent
        assert await charged_out(gw) == 5000


def _zip_bomb(size: int) -> bytes:
    """A gzip body that decodes to ``size`` spaces, compressed a MiB at a time (built when the test
    runs, not at collection, and without ``size`` bytes in memory)."""
    squeezer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16 +: the gzip wrapper
    mib = b" " * (1 << 20)
    parts = [squeezer.compress(mib) for _ in range(size >> 20)]
    return b"".join(parts) + squeezer.flush()


@pytest.mark.parametrize(
    ("coding", "body", "why"),
    [
        ("br", b"\x0b\x02\x80hi\x03", "content coding 'br'"),
        ("gzip", b"not gzip at all", "not valid for its content coding"),
        ("gzip", None, "decodes to more than"),  # _zip_bomb(): 300 MiB in 300 KiB
    ],
    ids=["unknown-coding", "corrupt", "zip-bomb"],
)
async def test_a_compressed_answer_the_gateway_cannot_read_is_a_502(
    tmp_path: Path, coding: str, body: bytes | None, why: str
) -> None:
    """Refused, and counted by why (``igw_answer_usage_unread_total``; before session s44 the 502's
    access-log ``error`` alone said so)."""
    if body is None:
        body = _zip_bomb(300 << 20)
    async with _compressed_answer(tmp_path, coding, body) as (gw, resp):
        error = (await resp.json())["error"]
        reasons = await usage_unread(gw, 1)
    assert resp.status == 502
    assert error["code"] == "upstream_error"
    assert why in error["message"]
    reason = {"br": "unknown_coding", "gzip": "decode_error"}[coding] if len(body) < 1000 else "bomb_bound"
    assert reasons == {reason: 1}


async def test_an_answer_relayed_decoded_past_its_ratio_is_relayed_whole_and_counted_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that does not accept gzip gets a 40 MiB answer of spaces (40 KB coded: past the
    ratio no JSON reaches) decoded whole, its bytes being the client's; the usage scan stops at the
    ratio, so its usage goes unread, said by a WARNING and ``igw_answer_usage_unread_total
    {reason="bomb_bound"}`` (before session s44 the scan read all of it: half the relay's CPU)."""
    plain = b'{"object":"text_completion","choices":[{"index":0,"text":"' + b" " * (40 << 20)
    plain += b'"}],"usage":' + orjson.dumps(USAGE) + b"}"
    body = gzip.compress(plain, compresslevel=9)

    answer = answering_coded(body)

    async with (
        scripted_upstream({"POST /v1/completions": answer}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        url = gw.url + "/v1/completions"
        request = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
        async with gw.http.post(url, json=request, headers={"Accept-Encoding": "identity"}) as resp:
            assert resp.status == 200
            assert "Content-Encoding" not in resp.headers
            got = await resp.read()
        assert got == plain
        assert await usage_unread(gw, 1) == {"bomb_bound": 1}
    assert "usage could not be read" in caplog.text


async def test_a_pod_relaying_unreadable_compressed_answers_logs_one_warning_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A pod answering every request with a compressed answer past 1 MiB whose usage cannot be read
    (a gzip header, then no valid deflate): relayed as it came to a client accepting gzip, each one
    counted in ``igw_answer_usage_unread_total``, but its WARNING logged once for the 100 answers,
    not per answer (until session s44: 100 lines, a hostile pod's flood of the log)."""
    body = gzip.compress(b"{")[:10] + os.urandom((1 << 20) + 4096)

    answer = answering_coded(body)

    async with (
        scripted_upstream({"POST /v1/completions": answer}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
        aiohttp.ClientSession(auto_decompress=False) as http,
    ):
        caplog.set_level("WARNING", logger="igw.gateway")
        request = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
        for _ in range(100):
            async with http.post(gw.url + "/v1/completions", json=request) as resp:
                assert resp.status == 200
                assert await resp.read() == body
        assert await usage_unread(gw, 100) == {"decode_error": 100}
    lines = [r.getMessage() for r in caplog.records if "usage could not be read" in r.getMessage()]
    assert len(lines) == 1, lines[:3]
    assert f"upstream {pod}" in lines[0]
    assert "(decode_error)" in lines[0]


@pytest.mark.parametrize("accept", ["gzip", "identity"], ids=["relayed-coded", "relayed-decoded"])
async def test_a_client_leaving_a_compressed_answer_before_its_usage_is_counted_unread(
    tmp_path: Path, accept: str
) -> None:
    """A large compressed answer is relayed as it arrives, its usage (at its end) read as it passes.
    A client that leaves before that end leaves the usage unread: before session s45 nothing counted
    it (the relay's record never reached ``igw_answer_usage_unread_total``); now it is
    ``reason="client_gone"``, whether the answer was relayed coded or decoded."""
    text = os.urandom(2 << 20).hex()  # incompressible: the coded body is past the whole-answer buffer
    body = gzip.compress(orjson.dumps({"object": "text_completion", "text": text, "usage": USAGE}))

    async def half_then_stall(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
        )
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        await asyncio.sleep(60)  # the gateway closes this connection when its client leaves
        return response

    async with (
        scripted_upstream({"POST /v1/completions": half_then_stall}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        host, port = gw.url.removeprefix("http://").split(":")
        request = orjson.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 8})
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST /v1/completions HTTP/1.1\r\nHost: g\r\nAccept-Encoding: {accept}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(request)}\r\n\r\n".encode()
            + request
        )
        got = b""
        async with asyncio.timeout(10):
            while len(got) < 256 * 1024:  # well into the body, far from its end
                chunk = await reader.read(65536)
                assert chunk, got[:300]
                got += chunk
        assert got.startswith(b"HTTP/1.1 200 ")
        writer.close()
        assert await usage_unread(gw, 1) == {"client_gone": 1}
