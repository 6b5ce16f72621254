"""The gateway's own refusals through the official SDKs with their default retries: which exception
each SDK raises, and how many times it sends the request (counted by the gateway's metrics)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from igw.checks.preflight.sdk_retry_after import OPENAI_MAX_RETRY_AFTER_S
from igw.gateway.errors import gateway_error
from igw.gateway.lean_server import SWITCH_ENV
from igw.gateway.serving import serve_app
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.gateway.test_openai_apis import metric

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EMPTY_MODEL = "qwen3"
DOC = config_doc(
    [scheduler("llama", MODEL), scheduler("qwen", EMPTY_MODEL)],
    bbr={"maxRequestBodyBytes": 4096},
)
SWITCHES = pytest.mark.parametrize("switch", ["lean", "aiohttp"])


async def refused(gw: Any, code: str) -> float:
    """How many requests the gateway answered with HTTP status ``code`` (a 413's model is unknown:
    its body is not read)."""
    text = await (await gw.http.get(gw.url + "/metrics")).text()
    return metric(text, "igw_requests_total", code=code)


@SWITCHES
async def test_a_body_over_the_limit_is_a_413_each_sdk_raises_once_without_retrying(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """``bbr.maxRequestBodyBytes``: the OpenAI SDK raises its status error with the 413 and the code
    ``request_too_large``, the Anthropic SDK its ``RequestTooLargeError`` (``request_too_large``,
    Anthropic's type for a 413); neither retries a 4xx other than 408/409/429 (default retries on)."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    big = "x" * 5000
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "qwen": []}) as gw:
        oai = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", timeout=30)  # default retries
        monkeypatch.setattr(oai, "_calculate_retry_timeout", lambda *args, **kw: 0.0)
        async with oai:
            with pytest.raises(openai.APIStatusError) as raised:
                await oai.completions.create(model=MODEL, prompt=big, max_tokens=4)
        assert raised.value.status_code == 413
        assert raised.value.code == "request_too_large"
        assert "bbr.maxRequestBodyBytes" in raised.value.message
        assert raised.value.request_id == raised.value.response.headers["x-request-id"]
        assert await refused(gw, "413") == 1
        claude = anthropic.AsyncAnthropic(base_url=gw.url, api_key="k", timeout=30)
        monkeypatch.setattr(claude, "_calculate_retry_timeout", lambda *args, **kw: 0.0)
        async with claude:
            hello = [{"role": "user", "content": big}]
            with pytest.raises(anthropic.RequestTooLargeError) as too_large:
                await claude.messages.create(model=MODEL, max_tokens=8, messages=hello)  # type: ignore[arg-type]
        assert too_large.value.status_code == 413
        assert too_large.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
        assert too_large.value.request_id == too_large.value.response.headers["x-request-id"]
        assert await refused(gw, "413") == 2
        assert a.received == []


class _Sleeps:
    """Stands in for ``anyio`` in an SDK's client module: records each retry's sleep, waits none."""

    def __init__(self) -> None:
        self.taken: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.taken.append(seconds)


@SWITCHES
async def test_a_pool_without_endpoints_is_a_503_whose_spread_retry_after_each_sdk_waits(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """503 ``no_endpoints`` (a pool scaled to zero, every pod gone) carries ``Retry-After`` as a 429
    does: ``routing.retryAfter.minSeconds`` (1), spread to 2 (since session s48). The SDKs wait it
    before each of their two retries, rather than their own sub-second backoff (0.375 to 1 s,
    jittered) that brought a burst's retries back at once while the pool scaled up."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with running(FakeModelServer("a")) as (a,), gateway(DOC, {"llama": [a.key], "qwen": []}) as gw:
        resp = await gw.http.post(gw.url + "/v1/completions", json={"model": EMPTY_MODEL, "prompt": "x"})
        assert resp.status == 503
        assert resp.headers["Retry-After"] in {"1", "2"}
        assert f"retry after {resp.headers['Retry-After']}s" in (await resp.json())["error"]["message"]
        for sdk in (openai, anthropic):
            sleeps = _Sleeps()
            monkeypatch.setattr(sdk._base_client, "anyio", sleeps)
            if sdk is openai:
                async with openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", timeout=30) as oai:
                    with pytest.raises(openai.InternalServerError) as raised:
                        await oai.completions.create(model=EMPTY_MODEL, prompt="x", max_tokens=4)
                assert raised.value.code == "no_endpoints"
            else:
                async with anthropic.AsyncAnthropic(base_url=gw.url, api_key="k", timeout=30) as claude:
                    hello = [{"role": "user", "content": "x"}]
                    with pytest.raises(anthropic.InternalServerError) as overloaded:
                        await claude.messages.create(model=EMPTY_MODEL, max_tokens=8, messages=hello)  # type: ignore[arg-type]
                assert overloaded.value.status_code == 503
            assert len(sleeps.taken) == 2
            assert set(sleeps.taken) <= {1.0, 2.0}
        assert await refused(gw, "503") == 1 + 3 + 3
        assert a.received == []


LONG_WAIT_DOC = config_doc(
    [scheduler("llama", MODEL), scheduler("qwen", EMPTY_MODEL)],
    routing={"retryAfter": {"minSeconds": 150, "maxSeconds": 160}},
)


@SWITCHES
async def test_a_retry_after_over_the_openai_sdks_cap_is_not_retried_by_it_and_slept_by_anthropics(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    """``routing.retryAfter.minSeconds`` 150, over the OpenAI SDK's cap of 120 s (IGW-PF032 warns about
    it): the OpenAI SDK sends the request once and raises the 503 at once, no retry and no wait; the
    Anthropic SDK, which has no cap, sleeps the whole 150 to 160 s before each of its two retries."""
    monkeypatch.setenv(SWITCH_ENV, switch)
    assert openai._constants.MAX_RETRY_AFTER_DELAY == OPENAI_MAX_RETRY_AFTER_S  # the check's constant
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(LONG_WAIT_DOC, {"llama": [a.key], "qwen": []}) as gw,
    ):
        oai_sleeps, claude_sleeps = _Sleeps(), _Sleeps()
        monkeypatch.setattr(openai._base_client, "anyio", oai_sleeps)
        monkeypatch.setattr(anthropic._base_client, "anyio", claude_sleeps)
        async with openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="k", timeout=30) as oai:
            with pytest.raises(openai.InternalServerError) as raised:
                await oai.completions.create(model=EMPTY_MODEL, prompt="x", max_tokens=4)
        assert 150 <= int(raised.value.response.headers["Retry-After"]) <= 160
        assert oai_sleeps.taken == []
        assert await refused(gw, "503") == 1
        async with anthropic.AsyncAnthropic(base_url=gw.url, api_key="k", timeout=30) as claude:
            with pytest.raises(anthropic.InternalServerError):
                await claude.messages.create(
                    model=EMPTY_MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}]
                )
        assert len(claude_sleeps.taken) == 2
        assert all(150.0 <= s <= 160.0 for s in claude_sleeps.taken)
        assert await refused(gw, "503") == 1 + 3
        assert a.received == []


async def test_the_sdks_retry_of_a_shutting_down_503_opens_a_new_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replica ending its requests at shutdown answers 503 ``shutting_down`` with ``Connection:
    close`` (since session s48), so the SDK's retry opens a new connection (which the Service sends
    to a replica still serving) rather than going out on the pooled one to the same draining replica."""
    peers: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        peers.append(peer[1] if peer else 0)
        if len(peers) == 1:
            return gateway_error("shutting_down", "the gateway is shutting down; retry the request")
        return web.json_response(
            {"id": "c", "object": "text_completion", "created": 0, "model": MODEL, "choices": []}
        )

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    monkeypatch.setattr(openai._base_client, "anyio", _Sleeps())
    async with (
        serve_app(app, host="127.0.0.1", port=0) as url,
        openai.AsyncOpenAI(base_url=url + "/v1", api_key="k", timeout=30, max_retries=1) as oai,
    ):
        raw = await oai.completions.with_raw_response.create(model=MODEL, prompt="x", max_tokens=4)
    assert raw.retries_taken == 1
    assert len(peers) == 2
    assert peers[0] != peers[1]  # the retry's connection is not the refused one's
