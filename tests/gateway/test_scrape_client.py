"""The scraper's lean HTTP client against real loopback servers: keep-alive, framing, failures."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from igw.gateway.scrape_client import ScrapeClient, ScrapeRequestError, split_host_port
from tests.gateway.support import wait_for


class RawPod:
    """A loopback server answering each request head with ``answer(n)`` (n: requests so far)."""

    def __init__(self, answer: Callable[[int], bytes | None]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def key(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                reply = self.answer(len(self.requests))
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
        writer.close()

    async def __aenter__(self) -> RawPod:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()


def ok(body: bytes, *, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[ScrapeClient]:
    c = ScrapeClient()
    try:
        yield c
    finally:
        await c.close()


async def test_one_kept_alive_connection_serves_every_scrape_of_a_pod() -> None:
    async with RawPod(lambda n: ok(b"page %d" % n)) as pod, client() as http:
        key = pod.key
        bodies = [(await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=1000)).body for _ in range(5)]
    assert bodies == [b"page 1", b"page 2", b"page 3", b"page 4", b"page 5"]
    assert pod.connections == 1
    assert pod.requests[0].startswith(b"GET /metrics HTTP/1.1\r\nHost: " + key.encode())


async def test_chunked_body_and_status_are_read_through_llhttp() -> None:
    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for part in (b"vllm:num_requests_waiting 3\n", b"vllm:num_requests_running 1\n"):
            await resp.write(part)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/metrics", chunked)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with client() as http:
            page = await http.get(f"127.0.0.1:{port}", "/metrics", timeout_s=2, max_bytes=1000)
            missing = await http.get(f"127.0.0.1:{port}", "/v1/models", timeout_s=2, max_bytes=1000)
    finally:
        await runner.cleanup()
    assert page.status == 200
    assert page.body == b"vllm:num_requests_waiting 3\nvllm:num_requests_running 1\n"
    assert missing.status == 404


async def test_connection_close_is_honoured_and_the_next_scrape_reconnects() -> None:
    async with RawPod(lambda n: ok(b"x", extra=b"Connection: close\r\n")) as pod, client() as http:
        for _ in range(3):
            assert (await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=10)).body == b"x"
    assert pod.connections == 3


async def test_a_silent_pod_times_out_and_a_fresh_connection_follows() -> None:
    async with RawPod(lambda n: None if n == 1 else ok(b"late")) as pod, client() as http:
        with pytest.raises(TimeoutError, match=r"within 0.2s"):
            await http.get(pod.key, "/metrics", timeout_s=0.2, max_bytes=10)
        assert (await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=10)).body == b"late"
    assert pod.connections == 2


async def test_the_connect_counts_against_the_scrape_timeout() -> None:
    """A pod whose accept queue is full drops the SYN; the kernel tries again later, and the connect
    completes at the first try after the queue is freed (2.5 s here: about 3 s). The pod never
    answers: the scrape fails at its 4.5 s timeout, counted from the start, not 4.5 s after the late
    connect (about 7.5 s); the 6 s bound leaves a loaded box 1.5 s either side."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # one connection waiting to be accepted fills the queue
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))
    loop = asyncio.get_running_loop()
    freed: asyncio.TimerHandle | None = None
    try:
        async with client() as http:
            started = loop.time()
            # half a second from the tries at whole seconds (this kernel's) and before the 3 s one
            freed = loop.call_later(2.5, lambda: listener.accept()[0].close())
            with pytest.raises(TimeoutError, match=r"no complete response within 4.5s"):  # connected
                await http.get(f"127.0.0.1:{port}", "/metrics", timeout_s=4.5, max_bytes=10)
            elapsed = loop.time() - started
    finally:
        if freed is not None:
            freed.cancel()
        filler.close()
        listener.close()
    assert 4.4 < elapsed < 6.0, elapsed


async def test_a_finished_requests_deadline_does_not_fail_the_next_request_on_its_connection() -> None:
    async with RawPod(lambda n: ok(b"first") if n == 1 else None) as pod, client() as http:
        assert (await http.get(pod.key, "/metrics", timeout_s=0.2, max_bytes=10)).body == b"first"
        with pytest.raises(TimeoutError, match=r"within 1s"):  # its own deadline, not the first's 0.2 s
            await http.get(pod.key, "/metrics", timeout_s=1, max_bytes=10)
    assert pod.connections == 1


async def test_requests_sent_together_share_one_deadline_timer() -> None:
    async with contextlib.AsyncExitStack() as stack:
        pods = [await stack.enter_async_context(RawPod(lambda n: None)) for _ in range(8)]
        http = await stack.enter_async_context(client())
        loop = asyncio.get_running_loop()

        def live_timers() -> int:  # asyncio's timer heap keeps cancelled handles (the connects' own)
            return sum(not h.cancelled() for h in loop._scheduled)  # type: ignore[attr-defined]

        before = live_timers()
        tasks = [asyncio.create_task(http.get(p.key, "/metrics", timeout_s=0.3, max_bytes=10)) for p in pods]
        await wait_for(lambda: all(p.requests for p in pods), what="every request sent")
        assert live_timers() - before <= 2  # one (two across a slot edge)
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            assert isinstance(outcome, TimeoutError)


async def test_an_oversized_page_is_a_failure_not_a_truncated_page() -> None:
    async with RawPod(lambda n: ok(b"y" * 5000)) as pod, client() as http:
        with pytest.raises(ScrapeRequestError, match="larger than 100 bytes"):
            await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=100)


async def test_malformed_response_and_refused_connect_raise_clear_errors() -> None:
    async with RawPod(lambda n: b"NOT HTTP AT ALL\r\n\r\n") as pod, client() as http:
        with pytest.raises(ScrapeRequestError, match="malformed HTTP response"):
            await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=100)
    free = RawPod(lambda n: None)
    async with free:
        key = free.key
    async with client() as http:
        with pytest.raises(ScrapeRequestError, match="connect failed"):
            await http.get(key, "/metrics", timeout_s=2, max_bytes=100)


async def test_a_pod_closing_mid_response_fails_the_scrape() -> None:
    async with (
        RawPod(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort") as pod,
        client() as http,
    ):
        task = asyncio.create_task(http.get(pod.key, "/metrics", timeout_s=5, max_bytes=1000))
        await wait_for(lambda: bool(pod.requests), what="the request at the pod")
        await asyncio.sleep(0.05)
        for w in pod._writers:
            w.transport.abort()
        with pytest.raises(ScrapeRequestError, match="closed the connection"):
            await task


async def test_concurrent_scrapes_of_one_pod_use_separate_connections() -> None:
    async with RawPod(lambda n: ok(b"z")) as pod, client() as http:
        got = await asyncio.gather(
            *(http.get(pod.key, "/metrics", timeout_s=2, max_bytes=10) for _ in range(3))
        )
        assert [r.body for r in got] == [b"z"] * 3
        assert pod.connections == 3
        for _ in range(3):  # all three are idle and reused now
            await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=10)
        assert pod.connections == 3
        http.forget(pod.key)
        await http.get(pod.key, "/metrics", timeout_s=2, max_bytes=10)
        assert pod.connections == 4


def test_endpoint_keys_are_split_or_refused_by_name() -> None:
    assert split_host_port("10.0.0.1:8000") == ("10.0.0.1", 8000)
    assert split_host_port("[::1]:8000") == ("::1", 8000)
    with pytest.raises(ScrapeRequestError, match="'pod-a' is not host:port"):
        split_host_port("pod-a")


async def test_a_started_request_fails_at_the_callers_deadline_and_shares_its_timer() -> None:
    async with contextlib.AsyncExitStack() as stack:
        pods = [
            await stack.enter_async_context(RawPod(lambda n: ok(b"up") if n == 1 else None)) for _ in range(3)
        ]
        http = await stack.enter_async_context(client())
        for p in pods:  # connected: a kept-alive idle connection each
            assert (await http.get(p.key, "/metrics", timeout_s=2, max_bytes=10)).body == b"up"
        loop = asyncio.get_running_loop()
        outcomes: dict[str, tuple[float, BaseException | None]] = {}

        def landed(key: str) -> Callable[[int, bytes, BaseException | None], None]:
            def done(status: int, body: bytes, error: BaseException | None) -> None:
                outcomes[key] = (loop.time(), error)

            return done

        before = len(loop._scheduled)  # type: ignore[attr-defined]  # asyncio's timer heap
        sent_at = loop.time()
        deadline = sent_at + 0.3  # later than the 0.1 s timeout: the caller's tick
        for p in pods:
            assert http.start(
                p.key, "/metrics", timeout_s=0.1, max_bytes=10, done=landed(p.key), deadline=deadline
            )
        assert len(loop._scheduled) - before == 1  # type: ignore[attr-defined]  # one timer for the three
        await wait_for(lambda: len(outcomes) == 3, what="every request failed")
    for at, error in outcomes.values():
        assert isinstance(error, TimeoutError)
        assert "within 0.1s" in str(error)
        assert at >= deadline - 0.002  # at the caller's deadline, not after the bare 0.1 s timeout
