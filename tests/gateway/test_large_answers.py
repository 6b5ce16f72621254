"""Non-streamed answers larger than the upstream client's read high-water mark (256 KiB) are forwarded
whole, over real loopback HTTP on both sides of the ``IGW_HTTP_SERVER`` switch; a body past
:data:`~igw.gateway.upstream_client.MAX_WHOLE_BODY_BYTES` is a 502, not unbounded memory.

Before: reading paused at the high-water mark and the whole-body read never took the bytes that
would resume it, so any non-streamed answer of more than about half a megabyte (long outputs,
logprobs, ``n`` > 1) waited forever - there is no ``routeTimeout`` by default."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from igw.gateway import upstream_client
from igw.gateway.lean_server import SWITCH_ENV
from tests.compiled.tree import skip_compiled
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler

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


@skip_compiled(
    "igw.gateway.upstream_client",
    "the cap MAX_WHOLE_BODY_BYTES is lowered by monkeypatch; compiled code bound the Final constant "
    "at build time",
)
async def test_an_answer_past_the_cap_is_a_502_and_the_gateway_serves_on(
    gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream_client, "MAX_WHOLE_BODY_BYTES", 1024 * 1024)
    async with (
        running(FakeModelServer("a", tokens=4_000_000)) as (a,),
        gateway(DOC, {"llama": [a.key]}) as gw,
    ):
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": MODEL, "prompt": "huge"}, timeout=BOUNDED
        ) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
        assert error["code"] == "upstream_error"
        a.tokens = 5
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": MODEL, "prompt": "small"}, timeout=BOUNDED
        ) as resp:
            assert resp.status == 200
