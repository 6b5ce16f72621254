"""A stored response's replay (``GET /v1/responses/{id}?stream=true``) held for its first event's
check still gets the relay's keep-alives (:func:`igw.gateway.upstream._relay_stream`), over real
HTTP on loopback. Until session s47 a held replay wrote nothing - no head, no ``: ping`` - until its
first event with data was whole: a pod that sent its head and then nothing for ``streamIdleTimeout``
(60 s) left the client silent that long, then answered 502; a proxy's idle timeout gave up first."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

MODEL = "m1"
PINGS = {"sseKeepAliveInterval": "100ms"}

HELD = b"event: response.created\n"
"""The start of an event whose data has not come: the replay stays held for its check."""


async def _made(gw: Any, pods: tuple[FakeModelServer, ...]) -> tuple[str, FakeModelServer]:
    async with gw.http.post(gw.url + "/v1/responses", json={"model": MODEL, "input": "x"}) as r:
        rid = (await r.json())["id"]
    return rid, next(pod for pod in pods if rid in pod.stored_responses)


async def _misnamed_count(gw: Any) -> float:
    text = await (await gw.http.get(gw.url + "/metrics")).text()
    line = next((ln for ln in text.splitlines() if ln.startswith("igw_usage_misnamed_total ")), "x 0")
    return float(line.split()[1])


async def test_a_held_replay_gets_keepalives_then_its_events(gateway: Any) -> None:
    """The pod sends the head and part of its first event, then nothing: the client gets the head
    and ``: ping`` comments every ``sseKeepAliveInterval`` while the replay is held, then the events."""
    d = config_doc([scheduler("pool", MODEL)], routing=PINGS)
    async with running(FakeModelServer("a")) as pods, gateway(d, {"pool": [pods[0].key]}) as gw:
        rid, holder = await _made(gw, pods)
        holder.replay_first = HELD
        async with gw.http.get(gw.url + f"/v1/responses/{rid}?stream=true") as r:
            assert r.status == 200
            first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), timeout=10)
            assert first == b": ping\n\n"  # the held part of the event is not written
            holder.replay_release.set()
            body = first + await r.read()
        assert body.count(b": ping\n\n") >= 1
        completed = [ln for ln in body.split(b"\n") if ln.startswith(b"data:")]
        assert len(completed) == 1
        assert orjson.loads(completed[0][5:])["response"]["id"] == rid
        assert await _misnamed_count(gw) == 0


async def test_a_held_replay_started_by_a_keepalive_and_then_misnamed_ends_with_an_error_event(
    gateway: Any,
) -> None:
    """Once a keep-alive has started a held replay, its answer can no longer become a 404: a first
    event naming another response is not relayed, and the stream ends with an error event instead
    (counted as misnamed, the pod forgotten as the holder), as a released replay that goes on with
    another response is cut (``_cut_replay``). Before the first keep-alive it is still a 404."""
    d = config_doc([scheduler("pool", MODEL)], routing=PINGS)
    pods = (FakeModelServer("a"), FakeModelServer("b"))
    async with running(*pods), gateway(d, {"pool": [p.key for p in pods]}) as gw:
        polled, holder = await _made(gw, pods)
        other, other_pod = await _made(gw, pods)
        holder.stored_responses[polled] = other_pod.stored_responses[other]
        holder.replay_first = HELD
        async with gw.http.get(gw.url + f"/v1/responses/{polled}?stream=true") as r:
            assert r.status == 200
            first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), timeout=10)
            assert first == b": ping\n\n"
            holder.replay_release.set()
            body = first + await r.read()
        assert other.encode() not in body
        assert b"response.completed" not in body
        assert b"named another response" in body
        assert await _misnamed_count(gw) == 1
        for sr in gw.state.runtime.schedulers.values():
            assert sr.scheduler.responses.endpoint_of(polled) is None


class _Trickling(FakeModelServer):
    """A pod whose replay sends its one event a few bytes at a time, ``gap_s`` apart."""

    gap_s = 0.03

    async def _stored(self, request: web.Request) -> web.StreamResponse:
        rid = request.match_info["rid"]
        if request.query.get("stream") != "true" or rid not in self.stored_responses:
            return await super()._stored(request)
        event = {"type": "response.completed", "sequence_number": 0, "response": self.stored_responses[rid]}
        body = b"event: response.completed\ndata: " + orjson.dumps(event) + b"\n\n"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        step = max(len(body) // 20, 1)
        for at in range(0, len(body), step):
            await resp.write(body[at : at + step])
            await asyncio.sleep(self.gap_s)
        await resp.write_eof()
        return resp


async def test_an_event_arriving_in_pieces_still_gets_keepalives(gateway: Any) -> None:
    """An event that takes ~0.6 s to arrive in 20 pieces: each piece is upstream bytes, none writes
    anything, and keep-alives are due ``sseKeepAliveInterval`` after the last write to the client
    (until session s47, after the last upstream bytes: none while the pieces came)."""
    d = config_doc([scheduler("pool", MODEL)], routing=PINGS)
    async with running(_Trickling("a")) as pods, gateway(d, {"pool": [pods[0].key]}) as gw:
        rid, _ = await _made(gw, pods)
        async with gw.http.get(gw.url + f"/v1/responses/{rid}?stream=true") as r:
            assert r.status == 200
            body = await r.read()
        assert body.count(b": ping\n\n") >= 2
        assert rid.encode() in body
