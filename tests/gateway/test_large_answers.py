"""Non-streamed answers larger than the upstream client's read high-water mark (256 KiB) are forwarded
whole, over real loopback HTTP on both sides of the ``IGW_HTTP_SERVER`` switch; one past
:data:`~igw.gateway.upstream.WHOLE_ANSWER_BUFFER_BYTES` (1 MiB) is relayed as it arrives, so each costs
the gateway at most that much whatever its size; an error answer (held while it may be retried)
past :data:`~igw.gateway.upstream.ERROR_ANSWER_BUFFER_BYTES` (1 MiB) is relayed as it arrives (JSON) or
answered without its body (anything else), never collected whole.

Before: reading paused at the high-water mark and the whole-body read never took the bytes that
would resume it, so any non-streamed answer of more than about half a megabyte (long outputs,
logprobs, ``n`` > 1) waited forever - there is no ``routeTimeout`` by default."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from igw.gateway.lean_server import SWITCH_ENV
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.reliability.harness import gateway_doc, in_process_gateway, scripted_upstream

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DOC = config_doc([scheduler("llama", MODEL)])
TOKENS = 20_000_000  # the fake answers "t" per token: a 20 MB body
BOUNDED = aiohttp.ClientTimeout(total=60)


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_a_20_mb_answer_is_forwarded_whole(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with running(FakeModelServer("a", tokens=TOKENS)) as (a,), gateway(DOC, {"llama": [a.key]}) as gw:
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": MODEL, "prompt": "long"}, timeout=BOUNDED
        ) as resp:
            assert resp.status == 200
            answer = orjson.loads(await resp.read())
        assert len(answer["choices"][0]["text"]) == TOKENS
        # The upstream connection went back to the pool complete: the next request is served too.
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": MODEL, "prompt": "again"}, timeout=BOUNDED
        ) as resp:
            assert resp.status == 200


LARGE = 4 * 1024 * 1024  # past WHOLE_ANSWER_BUFFER_BYTES and ERROR_ANSWER_BUFFER_BYTES (1 MiB each)


def _held_back(
    status: int, head: bytes, tail: bytes, release: asyncio.Event, sent: dict[str, int] | None = None
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A pod handler answering ``status`` with a JSON body of ``head`` + ``tail`` (its length
    declared) that holds ``tail`` back until ``release`` is set: a gateway collecting the answer
    whole passes nothing on meanwhile. Each request counts in ``sent["n"]`` when given."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        if sent is not None:
            sent["n"] += 1
        resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        resp.content_length = len(head) + len(tail)
        await resp.prepare(request)
        await resp.write(head)
        await release.wait()
        await resp.write(tail)
        await resp.write_eof()
        return resp

    return answer


async def _read_past_held_back(resp: aiohttp.ClientResponse, head: bytes, release: asyncio.Event) -> bytes:
    """The whole body of ``resp`` from a :func:`_held_back` pod: ``head`` read first (within 30 s: a
    gateway that collects the answer whole passes nothing on, and the test fails here), then
    ``release`` set and the rest read to the end."""
    received = b""
    async with asyncio.timeout(30):
        while len(received) < len(head):
            received += await resp.content.readany()
    release.set()
    return received + await resp.content.read()


async def test_a_large_json_error_answer_is_relayed_as_it_arrives_not_retried(tmp_path: Path) -> None:
    """An error answer is held while it may still be retried on another pod, but only up to
    :data:`~igw.gateway.upstream.ERROR_ANSWER_BUFFER_BYTES`: past it a JSON error is relayed as it
    arrives (and so not retried). The pod sends the first 4 MiB of a 503 and holds the rest until the
    client has read them: until session s41 the gateway collected every error answer whole, up to
    256 MiB each (eight concurrent 40 MB ones took ``igw serve`` from 78 to 431 MiB), never passed
    them on, and the exchange hung here. The next small 503 is still a refusal retried as before."""
    release = asyncio.Event()
    head = b'{"error":{"code":503,"message":"' + b"x" * LARGE
    tail = b'"}}'
    sent = {"n": 0}
    failing = _held_back(503, head, tail, release, sent)

    async with (
        scripted_upstream({"POST /v1/completions": failing}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        resp = await gw.complete("huge")
        assert resp.status == 503
        received = await _read_past_held_back(resp, head, release)
        assert received == head + tail
        assert sent["n"] == 1  # relayed: not retried


async def test_a_large_non_json_error_answer_is_answered_without_its_body(tmp_path: Path) -> None:
    """A non-JSON error answer's body never reaches the client (it is answered in the OpenAI shape,
    with its status alone), so the gateway reads at most
    :data:`~igw.gateway.upstream.ERROR_ANSWER_BUFFER_BYTES` of it and answers at once. The pod sends
    4 MiB of an HTML 502 page and never ends it: until session s41 the gateway collected it whole (up
    to 256 MiB) and the request waited for its end. Then a small one: the gateway serves on."""
    endless = {"on": True}
    done = asyncio.Event()

    async def failing(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(status=502, headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        await resp.write(b"<html>" + b"x" * (LARGE if endless["on"] else 10))
        if endless["on"]:
            await done.wait()  # not ended while the test runs (the gateway closes the connection)
            return resp
        await resp.write_eof()
        return resp

    async with (
        scripted_upstream({"POST /v1/completions": failing}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        async with asyncio.timeout(30):  # collected whole, never answered: the test fails here
            resp = await gw.complete("huge")
            error = (await resp.json())["error"]
        assert resp.status == 502
        assert error["code"] == "upstream_error"
        assert "HTTP 502" in error["message"]
        endless["on"] = False
        resp = await gw.complete("small")
        assert resp.status == 502
        assert (await resp.json())["error"]["code"] == "upstream_error"
        done.set()


@pytest.mark.parametrize("switch", ["lean", "aiohttp"])
async def test_a_large_answer_is_relayed_as_it_arrives_and_its_usage_charged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """The pod sends the first 4 MiB of its answer and holds the rest until the client has read them:
    a gateway that collected whole answers (every one until session s41, up to 256 MiB each, so N
    concurrent large answers held N times that) never passes them on, and the exchange hangs. The
    usage at the answer's end is still read and charged."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    release = asyncio.Event()
    head = b'{"object":"text_completion","choices":[{"index":0,"text":"' + b"t" * LARGE
    tail = b'"}],"usage":{"prompt_tokens":3,"completion_tokens":4321,"total_tokens":4324}}'
    large = _held_back(200, head, tail, release)

    async with (
        scripted_upstream({"POST /v1/completions": large}) as pod,
        in_process_gateway(tmp_path, gateway_doc(), [pod]) as gw,
    ):
        resp = await gw.complete("long")
        assert resp.status == 200
        received = await _read_past_held_back(resp, head, release)
        assert orjson.loads(received)["usage"]["completion_tokens"] == 4321
        charged = 'igw_tokens_total{direction="out",model="llama"} 4321.0'
        for _ in range(200):  # counted once the handler has finished its accounting
            if charged in await (await gw.http.get(gw.url + "/metrics")).text():
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the answer's usage was not charged")


async def test_a_large_answer_cut_by_route_timeout_ends_the_clients_connection(tmp_path: Path) -> None:
    """routeTimeout passing while a large whole answer is relayed closes the client's connection
    before the body's end: a JSON body has no place for the SSE error event a stream gets, and a
    client must never read a shorter body as whole."""
    head = b'{"object":"text_completion","choices":[{"index":0,"text":"' + b"t" * LARGE

    async def stuck(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(head) + 100
        await resp.prepare(request)
        await resp.write(head)
        await asyncio.sleep(60)
        return resp

    async with (
        scripted_upstream({"POST /v1/completions": stuck}) as pod,
        in_process_gateway(tmp_path, gateway_doc(routeTimeout="1s"), [pod]) as gw,
    ):
        resp = await gw.complete("long")
        assert resp.status == 200
        received = bytearray()

        async def read_all() -> None:
            while chunk := await resp.content.readany():
                received.extend(chunk)

        with pytest.raises(aiohttp.ClientPayloadError):
            await asyncio.wait_for(read_all(), 30)
    assert bytes(received) == head
