"""The SSE relay's first write to the client carries the response head and the first event together
(one segment, one client wake-up), and the stream after it is relayed event by event."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from igw.gateway import inference, lean_server, serving, upstream
from igw.gateway.observer import RequestObserver
from igw.gateway.upstream import ConnectFailed
from igw.gateway.upstream_client import UpstreamResponse, _Connection
from igw.scheduling import scheduler as scheduler_module
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.types import RequestOutcome
from tests.compiled.tree import skip_compiled
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

DOC = config_doc([scheduler("llama", "m")])


@pytest.fixture
def client_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every write the gateway's server side makes to a client connection, in order."""
    writes: list[bytes] = []
    made = serving._GatewayRequestHandler.connection_made

    def connection_made(self: serving._GatewayRequestHandler, transport: Any) -> None:
        write, writelines = transport.write, transport.writelines

        def recorded_write(data: bytes) -> None:
            writes.append(bytes(data))
            write(data)

        def recorded_writelines(parts: list[bytes]) -> None:
            writes.append(b"".join(parts))
            writelines(parts)

        transport.write = recorded_write
        transport.writelines = recorded_writelines
        made(self, transport)

    monkeypatch.setattr(serving._GatewayRequestHandler, "connection_made", connection_made)
    return writes


async def streamed_text(gateway: Any, client_writes: list[bytes], server: FakeModelServer) -> str:
    """One streamed completion through the gateway from ``server``; ``client_writes`` holds only its
    writes."""
    body = {"model": "m", "prompt": "hi", "max_tokens": server.tokens, "stream": True}
    async with running(server) as (a,), gateway(DOC, {"llama": [a.key]}) as gw:
        client_writes.clear()
        resp = await gw.post("/v1/completions", body)
        assert resp.status == 200
        text: str = (await resp.read()).decode()
        await asyncio.sleep(0)
    return text


async def test_the_head_leaves_with_the_first_event(gateway: Any, client_writes: list[bytes]) -> None:
    server = FakeModelServer("a", tokens=3, first_token_delay_s=0.05, token_delay_s=0.05)
    text = await streamed_text(gateway, client_writes, server)
    assert text.count("data: ") == 4  # three tokens, [DONE] (the usage chunk only when asked for)
    head = next(i for i, w in enumerate(client_writes) if w.startswith(b"HTTP/1.1 200"))
    assert b"text/event-stream" in client_writes[head]
    assert b'"text":"tok0"' in client_writes[head]  # not in a write of its own after the head
    assert b'"text":"tok1"' not in client_writes[head]  # relayed as it came, not buffered


async def test_the_last_events_leave_with_the_end_of_the_stream(
    gateway: Any, client_writes: list[bytes]
) -> None:
    """Events that came in the model server's last read, with its end of stream, are written with the
    client's end of stream (the chunked terminator): one write, one client wake-up, not two."""
    server = FakeModelServer("a", tokens=3, first_token_delay_s=0.02, token_delay_s=0.02)
    text = await streamed_text(gateway, client_writes, server)
    assert text.count("data: ") == 4
    (last,) = [w for w in client_writes if b"data: [DONE]" in w]
    assert last.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert client_writes[-1] == last  # nothing after it: the terminator did not leave on its own
    assert b'"text":"tok0"' not in last  # the earlier events were relayed as they came


@skip_compiled(
    "igw.gateway.upstream",
    "stream_head and UpstreamResponse.readany are replaced by monkeypatch to record the order; "
    "compiled callers do not look them up",
)
async def test_the_head_is_built_while_the_model_server_computes_its_first_token(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model server sends its head before the prefill (as vLLM does): the client's head is
    serialised then, not after the first event arrived, and still leaves with that event."""
    order: list[str] = []
    build = lean_server.stream_head
    readany = UpstreamResponse.readany

    def recorded_build(response: Any, *, keep_alive: bool) -> bytes:
        order.append("head built")
        return build(response, keep_alive=keep_alive)

    async def recorded_readany(self: UpstreamResponse, timeout_s: float | None = None) -> bytes | None:
        chunk = await readany(self, timeout_s)
        if chunk:
            order.append("event read")
        return chunk

    monkeypatch.setattr(lean_server, "stream_head", recorded_build)
    monkeypatch.setattr(UpstreamResponse, "readany", recorded_readany)
    server = FakeModelServer("a", tokens=2, first_token_delay_s=0.2)  # head now, the first token later
    text = await streamed_text(gateway, client_writes, server)
    assert order[:2] == ["head built", "event read"]
    assert order.count("head built") == 1  # the built head is the one written, not built again
    assert text.count("data: ") == 3  # two tokens, [DONE]
    first = next(w for w in client_writes if w.startswith(b"HTTP/1.1 200"))
    assert b"text/event-stream" in first
    assert b'"text":"tok0"' in first


@skip_compiled(
    "igw.gateway.upstream",
    "UpstreamResponse.readany and Scheduler.on_first_token are replaced by monkeypatch to record the order; "
    "compiled callers do not look them up",
)
async def test_the_first_token_is_judged_once_the_relay_waits_again(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler hears the first token after the relay has gone back to waiting for the next
    bytes (the client's read is woken onto the gateway's core, so nothing runs between the first
    event's write and that wait), once, with the TTFT of the event's write."""
    order: list[str] = []
    heard: list[float | None] = []
    readany = UpstreamResponse.readany
    hook = Scheduler.on_first_token

    async def recorded_readany(self: UpstreamResponse, timeout_s: float | None = None) -> bytes | None:
        order.append("wait")
        return await readany(self, timeout_s)

    def recorded_hook(self: Scheduler, outcome: RequestOutcome, *, now: float) -> None:
        order.append("first token heard")
        heard.append(outcome.ttft_s)
        hook(self, outcome, now=now)

    monkeypatch.setattr(UpstreamResponse, "readany", recorded_readany)
    monkeypatch.setattr(Scheduler, "on_first_token", recorded_hook)
    text = await streamed_text(gateway, client_writes, FakeModelServer("a", tokens=3, token_delay_s=0.05))
    assert text.count("data: ") == 4
    # the first event's read, its write, the wait for the next bytes: then the hook
    assert order[:3] == ["wait", "wait", "first token heard"]
    assert order.count("first token heard") == 1
    assert len(heard) == 1
    assert (heard[0] or 0.0) > 0


async def test_the_first_event_is_written_in_the_read_that_brought_it(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream's first bytes go to the client inside the read callback that brought them from the
    model server (no event-loop turn and no relay wake-up in between: the first token's path); the
    events that came in the same read follow in the relay's next write, all of them byte for byte."""
    spans: list[tuple[int, int]] = []
    received = _Connection.data_received

    def recorded(self: _Connection, data: bytes) -> None:
        before = len(client_writes)
        received(self, data)
        spans.append((before, len(client_writes)))

    monkeypatch.setattr(_Connection, "data_received", recorded)
    # the head at once, then (after the "prefill") every event back to back: one read brings them all
    server = FakeModelServer("a", tokens=3, first_token_delay_s=0.1)
    text = await streamed_text(gateway, client_writes, server)
    events = [e for e in text.split("\n\n") if e]
    assert [e for e in events if '"text"' in e] == [
        f'data: {{"id":"cmpl-1","server":"a","choices":[{{"index":0,"text":"tok{i}"}}]}}' for i in range(3)
    ]
    assert events[-1] == "data: [DONE]"
    head = next(i for i, w in enumerate(client_writes) if w.startswith(b"HTTP/1.1 200"))
    assert any(before <= head < after for before, after in spans)  # written inside the read
    assert b'"text":"tok0"' in client_writes[head]
    assert b'"text":"tok1"' not in client_writes[head]  # the rest of that read: the relay's write
    assert b'"text":"tok1"' in client_writes[head + 1]


async def test_first_bytes_that_came_with_the_head_are_written_without_a_prepare_coroutine(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model server whose head and first events arrive in one read (no prefill wait: the benchmark's
    backend): the relay starts the response and writes those bytes without awaiting, as the read
    callback would have, not through ``prepare`` and ``write``; the stream is still complete."""
    prepared: list[object] = []
    prepare = upstream._RelayedStream.prepare

    async def recorded_prepare(self: upstream._RelayedStream, request: Any) -> Any:
        prepared.append(request)
        return await prepare(self, request)

    monkeypatch.setattr(upstream._RelayedStream, "prepare", recorded_prepare)
    text = await streamed_text(gateway, client_writes, FakeModelServer("a", tokens=3))
    assert text.count("data: ") == 4
    assert text.endswith("data: [DONE]\n\n")
    assert prepared == []
    first = next(w for w in client_writes if w.startswith(b"HTTP/1.1 200"))
    assert b'"text":"tok0"' in first


async def test_the_picks_bookkeeping_runs_after_the_first_event_is_written(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pick's own bookkeeping (dispatch ledger, ``on_picked``, pick notes) is off a streamed
    request's way to its first event: the scheduler settles it when it hears the first token, after
    the write that carried that event (``Scheduler.pick``'s ``settle_later``), once."""
    marks: list[int] = []
    picked = Scheduler._picked

    def recorded_picked(self: Scheduler, ctx: Any, chosen: Any, noted: bool) -> None:
        marks.append(len(client_writes))  # how many client writes came before it
        picked(self, ctx, chosen, noted)

    monkeypatch.setattr(Scheduler, "_picked", recorded_picked)
    server = FakeModelServer("a", tokens=2, first_token_delay_s=0.05)
    text = await streamed_text(gateway, client_writes, server)
    assert text.count("data: ") == 3  # two tokens, [DONE]
    first = next(i for i, w in enumerate(client_writes) if b'"text":"tok0"' in w)
    assert len(marks) == 1
    assert marks[0] > first  # the write with the first event came before it


@skip_compiled(
    "igw.gateway.inference",
    "the test replaces the module's exchange (and RequestObserver.finish); the compiled request path "
    "calls the ones it was built with",
)
async def test_a_forced_choice_is_scored_after_the_first_event_and_logged_as_before(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One endpoint (the forced choice, ``Scheduler.pick``'s ``on_decided``): the scoring runs after
    the client write carrying the first event, once, and the access log's reason and scores are
    those of the same request scored before it was sent (the forced choice turned off by making the
    profile's picker not count as the max-score one)."""
    marks: list[int] = []
    score_and_pick = Scheduler._score_and_pick

    def recorded(self: Scheduler, *args: Any, **kwargs: Any) -> Any:
        marks.append(len(client_writes))  # how many client writes came before it
        return score_and_pick(self, *args, **kwargs)

    logged: list[tuple[object, object]] = []
    finish = RequestObserver.finish

    def recorded_finish(self: RequestObserver, response: Any) -> Any:
        scores = self.record.scores
        # each run's server has its own port: the endpoint's scores, not its key
        logged.append((self.record.reason, list(scores.values()) if scores else scores))
        return finish(self, response)

    monkeypatch.setattr(Scheduler, "_score_and_pick", recorded)
    monkeypatch.setattr(RequestObserver, "finish", recorded_finish)
    server = FakeModelServer("a", tokens=2, first_token_delay_s=0.05)
    text = await streamed_text(gateway, client_writes, server)
    first = next(i for i, w in enumerate(client_writes) if b'"text":"tok0"' in w)
    assert len(marks) == 1
    assert marks[0] > first
    monkeypatch.setattr(scheduler_module, "MaxScorePicker", type("NotThePicker", (), {}))
    marks.clear()
    again = await streamed_text(
        gateway, client_writes, FakeModelServer("a", tokens=2, first_token_delay_s=0.05)
    )
    assert marks == [0]  # scored before anything was written: the forced choice off
    assert again == text
    assert len(logged) == 2
    assert logged[0] == logged[1]
    assert logged[0][1]  # scores were logged


@skip_compiled(
    "igw.gateway.inference",
    "the test replaces the module's exchange (and RequestObserver.finish); the compiled request path "
    "calls the ones it was built with",
)
async def test_a_forced_choice_whose_connect_fails_is_logged_with_its_scores(
    gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No outcome settles a pick whose endpoint refused the connection: the gateway settles it
    before the access log is written, so the log still carries the decision's scores."""

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise ConnectFailed("refused")

    logged: list[object] = []
    finish = RequestObserver.finish

    def recorded_finish(self: RequestObserver, response: Any) -> Any:
        logged.append(self.record.scores)
        return finish(self, response)

    monkeypatch.setattr(inference, "exchange", refused)
    monkeypatch.setattr(RequestObserver, "finish", recorded_finish)
    body = {"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True}
    async with running(FakeModelServer("a", tokens=2)) as (a,), gateway(DOC, {"llama": [a.key]}) as gw:
        resp = await gw.post("/v1/completions", body)
        assert resp.status == 502
        await resp.read()
    assert len(logged) == 1
    assert logged[0]  # the settled decision's scores


def _reads_as_aiohttp_reads(response: upstream._RelayedStream) -> None:
    for name in ("prepared", "status", "reason", "headers"):
        ours = getattr(response, name)
        theirs = getattr(web.StreamResponse, name).fget(response)
        assert ours is theirs or ours == theirs, name
    assert response.headers is response._headers  # the response's own map, not a copy


@skip_compiled(
    "igw.gateway.upstream",
    "_relay_stream is replaced by monkeypatch to keep the relayed response; compiled callers do not "
    "look it up",
)
async def test_the_relayed_streams_own_accessors_read_what_aiohttps_read(
    gateway: Any, client_writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_RelayedStream`` defines ``prepared``, ``status``, ``reason`` and ``headers`` itself (aiohttp's
    are interpreted calls in the compiled build, several per stream): each reads what aiohttp's
    own reads, on a new response and on a relayed one after its end; the relayed head is built from
    the response's own header map."""
    fresh = upstream._RelayedStream(status=503, reason="Busy")
    _reads_as_aiohttp_reads(fresh)
    assert (fresh.prepared, fresh.status, fresh.reason) == (False, 503, "Busy")
    seen: list[object] = []
    relay = upstream._relay_stream

    async def kept(*args: Any, **kwargs: Any) -> upstream.ExchangeResult:
        result = await relay(*args, **kwargs)
        seen.append(result.answer)
        return result

    monkeypatch.setattr(upstream, "_relay_stream", kept)
    text = await streamed_text(gateway, client_writes, FakeModelServer("a", tokens=2))
    assert text.count("data: ") == 3
    (response,) = seen
    assert isinstance(response, upstream._RelayedStream)
    _reads_as_aiohttp_reads(response)
    assert (response.prepared, response.status, response.reason) == (True, 200, "OK")
    head = next(w for w in client_writes if w.startswith(b"HTTP/1.1 200"))
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    for name, value in response.headers.items():  # the head is the response's map, serialised
        assert f"\r\n{name}: {value}\r\n".encode() in head
    assert response.headers["X-Request-Id"]
    assert response.headers["Content-Type"].startswith("text/event-stream")


@skip_compiled(
    "igw.gateway.upstream",
    "_relay_stream is replaced by monkeypatch to keep its result; compiled callers do not look it up",
)
async def test_a_client_gone_at_the_streams_end_still_gives_the_relays_result(
    gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay's last write (the chunked terminator) to a client that has gone is not an error of
    the exchange: the relay returns its result as for a stream that ended normally."""
    results: list[upstream.ExchangeResult] = []
    relay = upstream._relay_stream

    async def kept(*args: Any, **kwargs: Any) -> upstream.ExchangeResult:
        result = await relay(*args, **kwargs)
        results.append(result)
        return result

    async def gone(self: upstream._RelayedStream, data: bytes = b"") -> None:
        if data:  # events joined to the end of the stream: they reach the client, the terminator not
            await self.write(data)
        raise ConnectionResetError("client went away")

    monkeypatch.setattr(upstream, "_relay_stream", kept)
    monkeypatch.setattr(upstream._RelayedStream, "write_eof", gone)
    server = FakeModelServer("a", tokens=2)
    body = {"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True}
    async with running(server) as (a,), gateway(DOC, {"llama": [a.key]}) as gw:
        resp = await gw.post("/v1/completions", body)
        assert resp.status == 200
        with contextlib.suppress(asyncio.TimeoutError, aiohttp.ClientError):
            await asyncio.wait_for(resp.read(), 1.0)
        for _ in range(100):
            if results:
                break
            await asyncio.sleep(0.01)
    (result,) = results
    assert result.ok
    assert result.status == 200
    assert result.streamed
    assert result.events >= 3
