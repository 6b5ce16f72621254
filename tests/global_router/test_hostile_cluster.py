"""A hostile or broken cluster's answer head, as the router relays it to a raw-socket client.

The cluster here is a raw asyncio server, so it can answer with any bytes; the router routes on
configuration alone (``heartbeats.required: false``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry

from igw.gateway.serving import serve_app
from igw.global_router.config import parse_global_config
from igw.global_router.server import ROUTER_KEY, WHOLE_ANSWER_BUFFER_BYTES, create_global_app
from tests.global_router.support import MODEL, global_doc
from tests.log_capture import captured_records

BODY = b'{"choices":[{"text":"ok"}]}'
ORIGIN_FIELDS = (
    b"Set-Cookie: sess=evil; Domain=router.example; Path=/\r\n"
    b"set-cookie: other=1\r\n"
    b"Strict-Transport-Security: max-age=63072000; includeSubDomains; preload\r\n"
    b'Alt-Svc: h3="evil.example:443"; ma=86400\r\n'
)
EVENT = b'data: {"choices":[{"text":"ok"}]}\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


WHOLE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Kept: yes\r\n"
    + ORIGIN_FIELDS
    + b"Content-Length: %d\r\n\r\n" % len(BODY)
    + BODY
)
STREAM = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Kept: yes\r\n"
    + ORIGIN_FIELDS
    + b"Transfer-Encoding: chunked\r\n\r\n"
    + _chunk(EVENT)
    + _chunk(b"data: [DONE]\n\n")
    + b"0\r\n\r\n"
)


def _length(head: bytes) -> int:
    """The ``Content-Length`` of a message head."""
    return next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )


@contextlib.asynccontextmanager
async def _cluster(answer: bytes, *, close: bool = False) -> AsyncIterator[str]:
    """A cluster answering every request with ``answer`` as it is (keep-alive, unless ``close``:
    the connection closed after it); its URL. Its connections' handlers are ended before it stops."""
    handlers: set[asyncio.Task[None]] = set()
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        writers.append(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(_length(head))
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await asyncio.wait_for(asyncio.gather(*handlers, return_exceptions=True), timeout=5)
        await server.wait_closed()


async def _raw_post(url: str, *, stream: bool) -> tuple[bytes, bytes]:
    """POST a completion on a raw connection; the answer's head and body (its declared length, or
    a stream's chunks to the last)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = orjson.dumps({"model": MODEL, "prompt": "hi", "stream": stream})
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    if stream:
        rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), timeout=10)
    else:
        rest = await asyncio.wait_for(reader.readexactly(_length(head)), timeout=10)
    writer.close()
    return head, rest


@pytest.mark.parametrize(("answer", "stream"), [(WHOLE, False), (STREAM, True)], ids=["whole", "stream"])
async def test_a_clusters_origin_scoped_fields_never_reach_the_client(answer: bytes, stream: bool) -> None:
    """``Set-Cookie``, ``Strict-Transport-Security`` and ``Alt-Svc`` from a cluster would set state
    on the router's origin, which fronts every cluster (a cookie then forwarded to other clusters,
    HSTS pinning the router's whole domain, the client's later connections sent to a host the
    cluster names): dropped, in a whole answer and a stream alike; the cluster's other fields kept."""
    async with _cluster(answer) as endpoint:
        doc = global_doc(
            [{"name": "east-a", "region": "east", "endpoint": endpoint, "models": [MODEL]}],
            heartbeats={"required": False},
        )
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=stream)
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"http/1.1 200 ok"
    assert b"x-kept: yes" in lines
    names = {line.split(b":")[0] for line in lines[1:] if line}
    assert not names & {b"set-cookie", b"strict-transport-security", b"alt-svc"}, head
    assert b"evil" not in head
    assert (EVENT in body) if stream else body == BODY


async def test_dropped_fields_still_count_against_the_field_bound() -> None:
    """A cluster's 10,000 ``Set-Cookie`` fields are refused by the field-count bound (a 502, the
    cluster named) as any 10,000 fields are: dropping a name does not take it out of the count."""
    fields = b"".join(b"Set-Cookie: c%d=1\r\n" % i for i in range(10_000))
    answer = b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    async with _cluster(answer) as endpoint:
        doc = global_doc(
            [{"name": "east-a", "region": "east", "endpoint": endpoint, "models": [MODEL]}],
            heartbeats={"required": False},
        )
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=False)
    assert head.startswith(b"HTTP/1.1 502 "), head
    error = orjson.loads(body)["error"]
    assert error["code"] == "upstream_error"
    assert "cluster 'east-a'" in error["message"]


async def test_a_body_shorter_than_its_length_is_a_502_naming_the_cluster_and_retried() -> None:
    """A cluster that declares ``Content-Length: 500`` and closes after 27 bytes: a 502 naming the
    cluster as configured (until session s49 ``upstream failed while sending its response``, which
    named no cluster), nothing sent to the client yet, so the next cluster answers."""
    broken = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n" + BODY
    async with _cluster(broken, close=True) as first, _cluster(WHOLE) as second:
        clusters = [
            {"name": "east-a", "region": "east", "endpoint": first, "models": [MODEL]},
            {"name": "west-a", "region": "west", "endpoint": second, "models": [MODEL]},
        ]
        alone = global_doc(clusters[:1], heartbeats={"required": False})
        app = create_global_app(parse_global_config(alone), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=False)
        assert head.startswith(b"HTTP/1.1 502 "), head
        assert orjson.loads(body)["error"]["message"] == (
            "cluster 'east-a' failed while sending its response: UpstreamBroken"
        )
        both = global_doc(clusters, heartbeats={"required": False})
        app = create_global_app(parse_global_config(both), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=False)
        assert head.startswith(b"HTTP/1.1 200 "), head
        assert b"x-igw-cluster: west-a" in head.lower()
        assert body == BODY


def _coded(body: bytes) -> bytes:
    """A 200 ``application/json`` answer of ``body`` gzipped."""
    data = gzip.compress(body)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
    return head + b"Content-Length: %d\r\n\r\n%s" % (len(data), data)


NOT_ANSWERS = {  # the answer, the reason it is counted by
    "204": (b"HTTP/1.1 204 No Content\r\n\r\n", "bodiless_status"),
    "304": (b"HTTP/1.1 304 Not Modified\r\nContent-Type: application/json\r\n\r\n", "bodiless_status"),
    "empty-200": (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n",
        "empty_body",
    ),
    "text-200": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
        "not_json_object",
    ),
    # compressed though the router asks for none: its decoded body's shape is checked (since s50)
    "gzip-array-200": (_coded(b'[{"text":"ok"}]'), "not_json_object"),
    "gzip-empty-200": (_coded(b"\n"), "empty_body"),
    # past the 1 MiB the router holds: relayed as it arrives, so only its start is read
    "large-text-200": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
        % (2 * WHOLE_ANSWER_BUFFER_BYTES, b" [" * WHOLE_ANSWER_BUFFER_BYTES),
        "not_json_object",
    ),
}


@pytest.mark.parametrize("answer", list(NOT_ANSWERS))
async def test_a_clusters_answer_that_cannot_be_a_completion_is_tried_at_the_next_cluster(
    caplog: pytest.LogCaptureFixture, answer: str
) -> None:
    """A cluster's 204 or 304, or a whole 200 that is no JSON object (empty included), to a
    completion: the cluster's fault, a 502 ``upstream_error`` naming it, tried at the next cluster
    and named in the access log's ``tried`` with its cause, counted by reason and warned of by the
    cluster's name (not its endpoint URL). Until session s50 the router relayed it as it came (tier
    1 refused it since s50): an empty success the OpenAI SDK fails to parse, no other cluster asked."""
    caplog.set_level(logging.INFO, logger="igw.global_router.access")
    hostile, reason = NOT_ANSWERS[answer]
    name = f"east-{answer}"  # its own: the WARNING's throttle outlives a test
    with captured_records("igw.gateway.upstream_non_answers") as (_, warnings):
        registry = await _ask_twice(hostile, name)
    counted = {"cluster": name, "reason": reason}
    assert registry.get_sample_value("igw_global_upstream_non_answers_total", counted) == 1
    [warned] = [r.getMessage() for r in warnings]  # the second router's held by the throttle
    assert warned.startswith(f"upstream cluster '{name}' answered an inference request with {reason} ")
    assert "127.0.0.1" not in warned
    lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.global_router.access"]
    tried = lines[-1]["tried"]
    assert [(t["cluster"], t["outcome"]) for t in tried] == [(name, "502"), ("west-a", "200")]
    assert tried[0]["error"].startswith("not an answer: ")


async def _ask_twice(hostile: bytes, name: str) -> CollectorRegistry:
    """A completion asked of a router whose one cluster, ``name``, answers ``hostile`` (a 502 naming
    it), then of one that has a good cluster after it (its answer): the second router's registry."""
    async with _cluster(hostile) as first, _cluster(WHOLE) as second:
        clusters = [
            {"name": name, "region": "east", "endpoint": first, "models": [MODEL]},
            {"name": "west-a", "region": "west", "endpoint": second, "models": [MODEL]},
        ]
        alone = create_global_app(
            parse_global_config(global_doc(clusters[:1], heartbeats={"required": False})),
            read_heartbeats=False,
        )
        async with serve_app(alone, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=False)
        assert head.startswith(b"HTTP/1.1 502 "), head
        error = orjson.loads(body)["error"]
        assert error["code"] == "upstream_error"
        assert error["message"].startswith(f"cluster '{name}' answered with ")
        both = create_global_app(
            parse_global_config(global_doc(clusters, heartbeats={"required": False})),
            read_heartbeats=False,
        )
        async with serve_app(both, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=False)
        assert head.startswith(b"HTTP/1.1 200 "), head
        assert b"x-igw-cluster: west-a" in head.lower()
        assert body == BODY
    return both[ROUTER_KEY].metrics.registry


async def test_a_large_json_object_past_leading_whitespace_is_relayed() -> None:
    """The start check of an answer past the 1 MiB hold reads past JSON's whitespace: a 2 MiB JSON
    object after blank lines is relayed whole, not refused."""
    large = b"\r\n \t\n" + b'{"choices":[{"text":"' + b"a" * (2 * WHOLE_ANSWER_BUFFER_BYTES) + b'"}]}'
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(large)
    async with _cluster(answer + large) as endpoint:
        doc = global_doc(
            [{"name": "east-a", "region": "east", "endpoint": endpoint, "models": [MODEL]}],
            heartbeats={"required": False},
        )
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            head, body = await _raw_post(url, stream=False)
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert body == large


@pytest.mark.parametrize("large", [False, True], ids=["whole", "past-the-held-bytes"])
async def test_a_clusters_rerank_answer_that_is_a_json_array_is_relayed(large: bool) -> None:
    """SGLang's ``/v1/rerank`` answers a JSON array (a tier-1 gateway relays it as it came): the
    router relays it too. Session s50's non-answer refusal made it a 502 ``not_json_object`` at the
    router, every reranker request of an SGLang cluster failing (for one past the router's held
    bytes, from its ``[`` start)."""
    item = b'{"score":0.5,"document":"a","index":0}'
    ranked = b"[" + b",".join([item] * ((2 * WHOLE_ANSWER_BUFFER_BYTES // len(item)) if large else 2)) + b"]"
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ranked)
    async with _cluster(answer + ranked) as endpoint, aiohttp.ClientSession() as http:
        doc = global_doc(
            [{"name": "east-a", "region": "east", "endpoint": endpoint, "models": [MODEL]}],
            heartbeats={"required": False},
        )
        app = create_global_app(parse_global_config(doc), read_heartbeats=False)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            body = {"model": MODEL, "query": "which?", "documents": ["a", "b"]}
            async with http.post(url + "/v1/rerank", json=body) as resp:
                assert (resp.status, await resp.read()) == (200, ranked)
