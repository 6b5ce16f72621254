"""The benchmark backends' ``/metrics`` pages move with the requests served, as a live engine's do.

With a fixed page the gateway judged every benchmark pod frozen after ``staleThreshold`` of load, so
``igw perf gateway`` / ``igw perf workers`` measured the all-stale fallback, not full scoring.
"""

from __future__ import annotations

import asyncio
import re

from aiohttp.test_utils import TestClient, TestServer

from igw.perf import raw_http
from igw.perf.activity_page import ActivityPage
from igw.perf.gateway_backend import RESPONSE, build_app, realistic_vllm_page

COUNTER = re.compile(rb"^vllm:(prompt|generation)_tokens_total\{[^}]*\} (\S+)$", re.M)


def counters(page: bytes) -> list[bytes]:
    return [m.group(2) for m in COUNTER.finditer(page)]


def test_only_the_activity_counters_change() -> None:
    page = realistic_vllm_page().encode()
    moving = ActivityPage(page, tokens_per_request=4)
    assert moving.counters == 2
    assert moving.render() == page  # nothing served yet: the page as rendered
    moving.served = 3
    moved = moving.render()
    assert counters(moved) == [b"12.0", b"12.0"]
    assert COUNTER.sub(b"", moved) == COUNTER.sub(b"", page)


def test_a_page_without_counters_stays_as_it_is() -> None:
    page = b'vllm:num_requests_running{model_name="m"} 0.0\n'
    moving = ActivityPage(page)
    moving.served = 5
    assert (moving.counters, moving.render()) == (0, page)


async def _get_metrics(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    body = await reader.readexactly(length)
    writer.close()
    await writer.wait_closed()
    return body


async def test_the_raw_backend_s_page_moves_with_each_completion() -> None:
    page = realistic_vllm_page().encode()
    answers = raw_http.canned_answers(completion=RESPONSE, metrics_page=page)
    server = await raw_http.serve_backend(answers, metrics=ActivityPage(page))
    async with server:
        port = server.sockets[0].getsockname()[1]
        before = await _get_metrics(port)
        base = f"127.0.0.1:{port}"
        await raw_http.closed_loop(
            base, concurrency=2, requests=5, request_for=lambda _i: raw_http.completion_request(base, b"{}")
        )
        after = await _get_metrics(port)
    assert counters(before) == [b"0.0", b"0.0"]
    assert counters(after) == [b"20.0", b"20.0"]


async def test_the_aiohttp_backend_s_page_moves_with_each_completion() -> None:
    async with TestClient(TestServer(build_app(chunks=2, interval=0.0))) as client:
        before = await (await client.get("/metrics")).read()
        assert (await client.post("/v1/completions", data=b'{"model":"m"}')).status == 200
        after = await (await client.get("/metrics")).read()
    assert counters(before) != counters(after)
