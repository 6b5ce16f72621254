"""HTTP edge cases at the listener: ``Expect: 100-continue`` with an oversized body is refused before
the body is sent, and a request line without an HTTP version (HTTP/0.9) is never served."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import orjson
import pytest
import yaml

from igw.config.loader import load_gateway_config
from igw.gateway.serving import MAX_REQUEST_LINE_BYTES, ServerLimits, request_target
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import gateway_doc, in_process_gateway

BODY_LIMIT = 64 * 1024
DOC = gateway_doc(bbr={"maxRequestBodyBytes": BODY_LIMIT})


async def _until_quiet(reader: asyncio.StreamReader) -> bytes:
    """What arrives until the server closes the connection or goes quiet for a second."""
    received = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=1.0)
        except TimeoutError:
            break
        if not chunk:
            break
        received += chunk
    return received


async def first_answer(url: str, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection and return what arrives until the server closes it or
    goes quiet for a second (the client never sends a body it was not asked for)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        received = await _until_quiet(reader)
    finally:
        writer.close()
        await writer.wait_closed()
    return received


def expect_head(length: int) -> bytes:
    return (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()


async def test_expect_continue_with_a_body_over_the_limit_gets_413_without_100_continue(
    tmp_path: Path,
) -> None:
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        answer = await first_answer(gw.url, expect_head(BODY_LIMIT + 1))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413 "), answer[:200]
        assert b"100 Continue" not in answer
        assert b"content-type: application/json" in head.lower()
        assert b"x-request-id:" in head.lower()
        assert orjson.loads(body)["error"]["code"] == "request_too_large"
        assert not pod.received  # nothing reached the model server


async def test_expect_continue_within_the_limit_is_answered_100_then_served(tmp_path: Path) -> None:
    document = orjson.dumps({"model": "llama", "prompt": "hello", "max_tokens": 3})
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(expect_head(len(document)))
            await writer.drain()
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
            assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
            writer.write(document)
            await writer.drain()
            final = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
            assert final.startswith(b"HTTP/1.1 200 "), final
        finally:
            writer.close()
            await writer.wait_closed()


async def test_expect_continue_follows_a_body_limit_changed_by_a_hot_reload(tmp_path: Path) -> None:
    """The listener refuses an ``Expect: 100-continue`` head over the application's bound, which
    stayed at the start-up ``bbr.maxRequestBodyBytes``: after a reload that raised the limit such a
    request (curl sends the header for large bodies) was refused citing the old limit."""
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        reloaded = tmp_path / "reloaded.yaml"
        for limit in (4 * BODY_LIMIT, BODY_LIMIT // 4):
            reloaded.write_text(yaml.safe_dump(gateway_doc(bbr={"maxRequestBodyBytes": limit})))
            gw.state.apply_config(load_gateway_config(reloaded))  # what a hot reload applies
            within = await first_answer(gw.url, expect_head(limit))
            assert within.startswith(b"HTTP/1.1 100 Continue"), (limit, within[:200])
            over = await first_answer(gw.url, expect_head(limit + 1))
            head, _, body = over.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 413 "), (limit, over[:200])
            assert f"({limit} bytes)" in orjson.loads(body)["error"]["message"]
        assert not pod.received


async def test_a_request_line_without_an_http_version_is_refused_not_served(tmp_path: Path) -> None:
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        for line in (b"GET /healthz\r\n\r\n", b"GET /v1/models\r\n\r\n", b"GET /healthz\n\n"):
            answer = await first_answer(gw.url, line)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 "), (line, answer[:200])
            assert b"x-request-id:" in head.lower()
            assert orjson.loads(body)["error"]["code"] == "bad_http_request"


def chunked(version: str, codings: str) -> bytes:
    """A completion request whose body is sent chunked under ``Transfer-Encoding: codings``."""
    document = orjson.dumps({"model": "llama", "prompt": "hello", "max_tokens": 3})
    return (
        (
            f"POST /v1/completions HTTP/{version}\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: {codings}\r\n\r\n{len(document):x}\r\n"
        ).encode()
        + document
        + b"\r\n0\r\n\r\n"
    )


async def test_a_transfer_coding_other_than_chunked_is_refused_before_the_body_is_read(
    tmp_path: Path,
) -> None:
    """aiohttp's parser read ``identity, chunked`` and ``gzip, chunked`` as chunked and took
    ``Transfer-Encoding`` on an HTTP/1.0 request (RFC 9112 6.1: its framing is faulty): where a proxy
    in front reads such a head another way, the two disagree on where the request ends."""
    cases = [
        ("1.1", "identity, chunked", 501, "unsupported_transfer_coding"),
        ("1.1", "gzip, chunked", 501, "unsupported_transfer_coding"),
        ("1.0", "chunked", 400, "bad_http_request"),
    ]
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        for version, codings, status, code in cases:
            answer = await first_answer(gw.url, chunked(version, codings))
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(f"HTTP/1.1 {status} ".encode()), (codings, answer[:200])
            assert b"connection: close" in head.lower()
            assert orjson.loads(body)["error"]["code"] == code
        assert not pod.received
        answer = await first_answer(gw.url, chunked("1.1", "chunked"))  # chunked alone is served
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert len(pod.received) == 1


async def test_refusals_of_a_messages_api_request_are_anthropic_shaped(tmp_path: Path) -> None:
    """The Anthropic SDK reads ``error.type``; these refusals of a ``/v1/messages`` request were
    OpenAI-shaped before session s37 (a head aiohttp cannot parse has no path: still OpenAI's)."""
    corrupt_gzip = (
        b"POST /v1/messages HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Encoding: gzip\r\nContent-Length: 10\r\n\r\n0123456789"
    )
    cases = [
        (chunked("1.1", "identity, chunked").replace(b"/v1/completions", b"/v1/messages"), 501, "api_error"),
        (b"POST /v1/messages\r\n\r\n", 400, "invalid_request_error"),
        (corrupt_gzip, 400, "invalid_request_error"),
    ]
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        for request, status, error_type in cases:
            answer = await first_answer(gw.url, request)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(f"HTTP/1.1 {status} ".encode()), (request[:60], answer[:200])
            error = orjson.loads(body)
            assert error["type"] == "error", error
            assert error["error"]["type"] == error_type
            assert error["request_id"]
        assert not pod.received


async def answers_to(url: str, parts: list[bytes]) -> list[bytes]:
    """Send ``parts`` on one connection, a quarter second apart (each its own read at the server),
    and return each answer (head and body) that arrives until the server closes or goes quiet."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for part in parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.25)
        received = await _until_quiet(reader)
    finally:
        writer.close()
        await writer.wait_closed()
    answers = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
        answers.append(head + b"\r\n\r\n" + rest[:length])
        received = rest[length:]
    return answers


async def test_a_head_the_parser_refuses_on_the_messages_api_gets_an_anthropic_shaped_answer(
    tmp_path: Path,
) -> None:
    """aiohttp answers a head it cannot parse (a header field over the limit: 431) with a stand-in
    request whose path is ``/``: the answer to a ``/v1/messages`` request was OpenAI-shaped before
    session s39, and the Anthropic SDK read no ``error.type``. The path comes from the request line:
    whether the lean side handed the head over in its first read or a later one, or aiohttp's side
    serves the connection already - and only for the head it began (a later ``/v1/completions`` head
    on that connection is OpenAI-shaped)."""
    big = b"X-Filler: " + b"f" * 20_000 + b"\r\n"
    start = b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    rest = big + b"Content-Length: 2\r\n\r\n{}"
    served_by_aiohttp = b"GET /v1/messages HTTP/1.1\r\nHost: gw\r\n\r\n"  # a 405, the connection kept
    cases = {
        "one read": ([start + rest], 1, True),
        "the head over two reads": ([start, rest], 1, True),
        "after a request aiohttp served": ([served_by_aiohttp, start + rest], 2, True),
        "a completions head after a messages request": (
            [served_by_aiohttp, start.replace(b"/v1/messages?beta=true", b"/v1/completions") + rest],
            2,
            False,
        ),
    }
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        for name, (parts, count, anthropic) in cases.items():
            answers = await answers_to(gw.url, parts)
            assert len(answers) == count, (name, answers)
            head, _, body = answers[-1].partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 431 "), (name, answers[-1][:200])
            error = orjson.loads(body)
            if anthropic:
                assert error.get("type") == "error", (name, error)
                assert error["error"]["type"] == "invalid_request_error"
                assert error["request_id"]
            else:
                assert error["error"]["code"] == "request_header_too_large", (name, error)
        assert not pod.received


def test_the_request_target_is_read_from_where_a_head_begins() -> None:
    """What :meth:`GatewayRequestHandler.api_path` reads for a head aiohttp could not parse: the target
    without its query, after any empty lines (RFC 9112 2.2), within the request-line limit."""
    assert request_target(b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: gw\r\n") == b"/v1/messages"
    assert request_target(b"\r\n\r\nPOST /v1/messages HTTP/1.1\r\n") == b"/v1/messages"
    assert request_target(b"POST http://gw/v1/messages HTTP/1.1\r\n") == b"http://gw/v1/messages"
    long_query = b"POST /v1/messages?" + b"q" * 2 * MAX_REQUEST_LINE_BYTES  # a 414: no CRLF in the window
    assert request_target(long_query) == b"/v1/messages"
    for no_target in (b"", b"POS", b"POST\r\n", b"\r\n" * MAX_REQUEST_LINE_BYTES + b"POST /v1/messages "):
        assert request_target(no_target) == b"", no_target


async def test_an_expectation_other_than_100_continue_gets_an_openai_shaped_417(tmp_path: Path) -> None:
    """aiohttp's own answer was a plain-text 417 that quoted the field back (``Unknown Expect:
    ...``), without a request id: a header's bytes echoed, the one answer not in the API's shape."""
    document = orjson.dumps({"model": "llama", "prompt": "hello", "max_tokens": 3})
    async with running(FakeModelServer("a")) as (pod,), in_process_gateway(tmp_path, DOC, [pod.key]) as gw:
        for path in ("/v1/completions", "/v1/models"):
            request = (
                f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(document)}\r\nExpect: 200-secret-ok\r\n\r\n"
            ).encode() + document
            answer = await first_answer(gw.url, request)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 417 "), answer[:200]
            assert b"content-type: application/json" in head.lower()
            assert b"x-request-id:" in head.lower()
            assert b"secret" not in answer
            assert orjson.loads(body)["error"]["code"] == "expectation_failed"
        assert not pod.received


@pytest.mark.parametrize(
    "rest",
    [
        pytest.param(b"zz\r\n", id="a malformed chunk-size line"),
        pytest.param(b"".join(b"X-T%d: v\r\n" % i for i in range(101)) + b"\r\n", id="101 trailer fields"),
        pytest.param(b"X-T: " + b"v" * 20_000 + b"\r\n\r\n", id="a trailer field over the limit"),
        pytest.param(b"X-T: a\x01b\r\n\r\n", id="a control byte in a trailer"),
    ],
)
async def test_a_chunked_body_malformed_in_a_later_read_is_refused_at_once(
    tmp_path: Path, rest: bytes
) -> None:
    """A chunked body whose framing breaks in a read after its head's (a chunk-size line, a trailer
    section over the header limits or malformed): aiohttp's parser raised without ending the body,
    so the handler waited for the rest until ``bodyTimeout`` and answered 408 "request body not
    received" (then lingered 10 s) before session s40. It gets its 400 at once now."""
    document = orjson.dumps({"model": "llama", "prompt": "hello", "max_tokens": 3})
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(document), document)
    )
    if not rest.startswith(b"zz"):
        head += b"0\r\n"  # the last chunk: the trailer section follows
    limits = ServerLimits(body_timeout_s=30, stream_grace_s=1)
    async with (
        running(FakeModelServer("a")) as (pod,),
        in_process_gateway(tmp_path, DOC, [pod.key], limits=limits) as gw,
    ):
        started = time.monotonic()
        answers = await answers_to(gw.url, [head, rest])
        assert len(answers) == 1, "no answer: the handler still waits for the body"
        assert time.monotonic() - started < 10  # 30 s (bodyTimeout) before session s40
        answer = answers[0]
        head_bytes, _, body = answer.partition(b"\r\n\r\n")
        assert head_bytes.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert orjson.loads(body)["error"]["code"] == "bad_http_request"
        assert not pod.received
