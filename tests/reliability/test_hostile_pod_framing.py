"""A hostile model server's framing at tier 1, from a raw-socket pod on loopback: answers that run past
their own end never desynchronise a pooled connection, and an answer that cannot be one to an
inference API (a bodiless status, an empty or non-JSON success) is a 502 ``upstream_error``, retried
elsewhere with ``retryOn: [5xx]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.upstream import WHOLE_ANSWER_BUFFER_BYTES
from tests.gateway.fake_model_server import FakeModelServer
from tests.log_capture import captured_records
from tests.reliability.harness import MODEL, gateway_doc, in_process_gateway

GOOD = b'{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"hi"}]}'
FORGED = b'{"id":"cmpl-forged","object":"text_completion","choices":[{"index":0,"text":"FORGED"}]}'
SSE = b'data: {"id":"c","choices":[{"index":0,"text":"hi"}]}\n\ndata: [DONE]\n\n'


def ok(body: bytes, ctype: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (ctype, len(body), body)


def coded_ok(body: bytes, coding: bytes = b"gzip") -> bytes:
    """A 200 ``application/json`` answer of ``body`` compressed with ``coding`` (though the gateway
    asks for none)."""
    data = gzip.compress(body) if coding == b"gzip" else zlib.compress(body)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: %s\r\n" % coding
    return head + b"Content-Length: %d\r\n\r\n%s" % (len(data), data)


def chunked_sse(tail: bytes = b"") -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE) + tail


class RawPod:
    """A model server written byte by byte: ``GET`` requests get a valid vLLM metrics page (the
    scrape) and a model list; each ``POST`` the next of ``answers`` (the last one repeated)."""

    def __init__(self, *answers: bytes) -> None:
        self.answers = list(answers)
        self.connections = 0
        self.posts: list[int] = []
        """The connection (its number, from 1) each POST came on."""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                if head.startswith(b"GET "):
                    page = (
                        FakeModelServer("raw").page().encode()
                        if b" /metrics " in head
                        else b'{"object":"list","data":[{"id":"llama","object":"model"}]}'
                    )
                    writer.write(ok(page, b"text/plain"))
                else:
                    self.posts.append(number)
                    writer.write(self.answers[min(len(self.posts), len(self.answers)) - 1])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def raw_pod(pod: RawPod) -> AsyncIterator[str]:
    server = await asyncio.start_server(pod.serve, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.parametrize(
    ("first", "stream"),
    [(ok(GOOD) + ok(FORGED), False), (chunked_sse(ok(FORGED)), True)],
    ids=["whole-past-content-length", "stream-past-its-last-chunk"],
)
async def test_a_full_answer_past_an_answers_end_is_never_read_as_the_next_requests(
    tmp_path: Path, first: bytes, stream: bool
) -> None:
    """Bytes after an answer's end (here a whole forged ``HTTP/1.1 200`` answer) close the pooled
    connection: the next request goes on a fresh one and gets the pod's own answer, never the forged
    one (session s50's probe found this holding; pinned)."""
    pod = RawPod(first, ok(GOOD))
    async with raw_pod(pod) as key, in_process_gateway(tmp_path, gateway_doc(), [key]) as gw:
        resp = await gw.complete("a", stream=stream)
        assert resp.status == 200
        assert await resp.read() == (SSE if stream else GOOD)
        resp = await gw.complete("b")
        assert (resp.status, await resp.read()) == (200, GOOD)
    assert len(pod.posts) == 2
    assert pod.posts[1] != pod.posts[0]  # the first answer's connection was not reused


NOT_ANSWERS = {
    "204": b"HTTP/1.1 204 No Content\r\n\r\n",
    "204-with-a-body": b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(GOOD) + GOOD,
    "205": b"HTTP/1.1 205 Reset Content\r\nContent-Length: 0\r\n\r\n",
    "304": b"HTTP/1.1 304 Not Modified\r\nContent-Type: application/json\r\n\r\n",
    "empty-200": ok(b""),
    "text-200": ok(b"hello, not json", b"text/plain"),
    "json-typed-text-200": ok(b"hello, not json"),
    "json-array-200": ok(b"[1,2,3]"),
    # past the 1 MiB a whole answer is held to: relayed as it arrives, so only its start is read
    "large-array-200": ok(b"\n[" + b"1," * WHOLE_ANSWER_BUFFER_BYTES + b"1]"),
    # compressed though the gateway asks for none: its decoded body's shape is checked (since s50)
    "gzip-empty-200": coded_ok(b""),
    "gzip-array-200": coded_ok(b' [{"text":"hi"}]\n'),
    "gzip-text-200": coded_ok(b"<html>upstream error</html>"),
    "deflate-cut-object-200": coded_ok(b'{"id":"cmpl-1","choices":[', b"deflate"),
}


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
@pytest.mark.parametrize("answer", list(NOT_ANSWERS))
async def test_an_answer_that_cannot_be_a_completion_is_a_502_retried_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, switch: str
) -> None:
    """Until session s50 a pod's 204, 205 or 304 to ``POST /v1/completions`` reached the client as it
    came, and an empty or non-JSON 200 as a success: the OpenAI SDK failed parsing it, and nothing
    was retried. Now a 502 ``upstream_error``, not ``ok`` (the pod's fault), retried at another pod
    with ``retryOn: [5xx]``."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    hostile = RawPod(NOT_ANSWERS[answer])
    async with raw_pod(hostile) as key, in_process_gateway(tmp_path / "one", gateway_doc(), [key]) as gw:
        resp = await gw.complete("a")
        error = orjson.loads(await resp.read())["error"]
        assert (resp.status, error["code"], error["type"]) == (502, "upstream_error", "upstream_error")
    retry_5xx = {"retry": {"attempts": 2, "retryOn": ["5xx"]}}
    hostile, good = RawPod(NOT_ANSWERS[answer]), RawPod(ok(GOOD))
    async with (
        raw_pod(hostile) as bad_key,
        raw_pod(good) as good_key,
        in_process_gateway(tmp_path / "two", gateway_doc(routing=retry_5xx), [bad_key, good_key]) as gw,
    ):
        for _ in range(20):  # until the hostile pod was picked first a few times
            resp = await gw.complete("a")
            assert (resp.status, await resp.read()) == (200, GOOD)
            if len(hostile.posts) >= 2:
                break
    assert len(hostile.posts) >= 2


# SGLang's ``/v1/rerank`` (and Text Embeddings Inference's ``/rerank``, a generic engine) answers a
# JSON array of ``{"index", "score", ...}``, not an object: the rerank API's valid answer there
RERANKED = b'[{"score":0.98,"document":"b","index":1},{"score":0.01,"document":"a","index":0}]'
LARGE_RERANKED = b"[" + b",".join([b'{"score":0.5,"index":0}'] * (WHOLE_ANSWER_BUFFER_BYTES // 20)) + b"]"


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
@pytest.mark.parametrize(
    "answer", [RERANKED, LARGE_RERANKED, "gzip"], ids=["whole", "past-the-held-bytes", "compressed"]
)
async def test_a_rerank_answer_that_is_a_json_array_is_relayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: bytes | str, path: str, switch: str
) -> None:
    """A rerank answer that is a JSON array (SGLang's, TEI's) is the engine's answer, relayed as it
    came: session s50's non-answer refusal made it a 502 ``not_json_object`` (for one past the held
    bytes, its ``[`` start), so every SGLang reranker behind the gateway failed. An array to any other
    API stays refused (``json-array-200`` above)."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    pod = RawPod(ok(answer) if isinstance(answer, bytes) else coded_ok(RERANKED))
    async with raw_pod(pod) as key, in_process_gateway(tmp_path, gateway_doc(), [key]) as gw:
        body = {"model": MODEL, "query": "which?", "documents": ["a", "b"]}
        resp = await gw.http.post(gw.url + path, json=body)  # a gzip answer decoded by the client
        assert (resp.status, await resp.read()) == (200, answer if isinstance(answer, bytes) else RERANKED)


async def test_an_answer_refused_as_no_answer_is_counted_by_reason_and_warned_once_per_pod(
    tmp_path: Path,
) -> None:
    """Each refusal is counted in ``igw_upstream_non_answers_total{model,reason}`` and logged as a
    WARNING naming the pod's address, throttled per pod and reason, never quoting the body (until
    session s50 only the access log's ``error`` said so: no series, no line an operator alerts on)."""
    echo = b"PROMPT-ECHO-never-logged"
    pod = RawPod(NOT_ANSWERS["204"], ok(echo, b"text/plain"))
    with captured_records("igw.gateway.upstream_non_answers") as (_, records):
        async with raw_pod(pod) as key, in_process_gateway(tmp_path, gateway_doc(), [key]) as gw:
            for prompt in ("a", "b", "c"):
                resp = await gw.complete(prompt)
                assert resp.status == 502, await resp.read()
            expected = [
                f'igw_upstream_non_answers_total{{model="{MODEL}",reason="bodiless_status"}} 1.0',
                f'igw_upstream_non_answers_total{{model="{MODEL}",reason="not_json_object"}} 2.0',
            ]
            for _ in range(200):  # counted once the handler has finished its accounting
                page = await (await gw.http.get(gw.url + "/metrics")).text()
                if all(line in page for line in expected):
                    break
                await asyncio.sleep(0.02)
            else:
                pytest.fail(f"{expected} not in /metrics")
    lines = [r.getMessage() for r in records]
    assert len(lines) == 2, lines  # one per reason; the third answer's line held by the throttle
    assert all(key in line for line in lines), lines
    assert "bodiless_status (status 204)" in lines[0]
    assert "not_json_object (a body that is not a JSON object)" in lines[1]
    assert not any("PROMPT-ECHO" in line for line in lines)


CONFLICTING = {
    "length-and-chunked": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(GOOD), len(GOOD), GOOD),
    "two-lengths": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(GOOD), len(GOOD) - 10, GOOD),
}


@pytest.mark.parametrize("answer", list(CONFLICTING))
async def test_an_answer_with_conflicting_framing_is_a_502_and_its_connection_not_reused(
    tmp_path: Path, answer: str
) -> None:
    """``Content-Length`` beside ``Transfer-Encoding``, or two different lengths: which bytes end the
    answer is ambiguous (a request-smuggling shape), so it is refused - a 502 ``upstream_error``,
    nothing relayed - and its connection closed: the next request goes on a fresh one and gets the
    pod's own answer, never the bytes left of the ambiguous one (session s50's probe saw this; pinned)."""
    pod = RawPod(CONFLICTING[answer], ok(GOOD))
    async with raw_pod(pod) as key, in_process_gateway(tmp_path, gateway_doc(), [key]) as gw:
        resp = await gw.complete("a")
        body = await resp.read()
        assert resp.status == 502, body
        assert orjson.loads(body)["error"]["code"] == "upstream_error"
        assert b"hi" not in body
        resp = await gw.complete("b")
        assert (resp.status, await resp.read()) == (200, GOOD)
    assert len(pod.posts) == 2
    assert pod.posts[1] != pod.posts[0]
