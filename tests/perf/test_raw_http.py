"""The minimal load generator and backend of ``igw perf workers`` (igw.perf.raw_http) over loopback."""

from __future__ import annotations

import asyncio

import pytest

from igw.perf import raw_http

PAGE = b'vllm:num_requests_running{model_name="m"} 0.0\n'
COMPLETION = b'{"id":"x","choices":[]}'


def request(base: str, path: str = "/v1/completions") -> bytes:
    return raw_http.completion_request(base, b'{"model":"m"}').replace(b"/v1/completions", path.encode(), 1)


async def test_the_closed_loop_gets_every_answer_from_the_backend() -> None:
    server = await raw_http.serve_backend(raw_http.canned_answers(completion=COMPLETION, metrics_page=PAGE))
    async with server:
        base = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        result = await raw_http.closed_loop(
            base, concurrency=3, requests=50, request_for=lambda _i: request(base)
        )
        assert result.requests == 50
        assert len(result.latencies_s) == 50
        assert all(t > 0 for t in result.latencies_s)
        reader, writer = await asyncio.open_connection("127.0.0.1", int(base.rsplit(":", 1)[1]))
        writer.write(
            b"GET /metrics?name[]=x HTTP/1.1\r\nHost: b\r\n\r\nGET /health HTTP/1.1\r\nHost: b\r\n\r\n"
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"Content-Length: %d" % len(PAGE) in head
        assert await reader.readexactly(len(PAGE)) == PAGE
        await reader.readuntil(b"\r\n\r\n")
        assert await reader.readexactly(2) == b"ok"
        writer.close()
        await writer.wait_closed()


async def test_a_non_200_answer_fails_the_run() -> None:
    server = await raw_http.serve_backend(raw_http.canned_answers(completion=COMPLETION, metrics_page=PAGE))
    async with server:
        base = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        with pytest.raises(raw_http.RawHttpError, match="HTTP 404"):
            await raw_http.closed_loop(
                base, concurrency=2, requests=5, request_for=lambda _i: request(base, "/nowhere")
            )


async def test_a_server_closing_the_connection_fails_the_run() -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.close()

    server = await asyncio.start_server(close_at_once, "127.0.0.1", 0)
    async with server:
        base = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        with pytest.raises(raw_http.RawHttpError, match="closed"):
            await raw_http.closed_loop(base, concurrency=1, requests=3, request_for=lambda _i: request(base))
