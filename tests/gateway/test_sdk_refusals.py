"""The gateway's own refusals through the official SDKs with their default retries: which exception
each SDK raises, and how many times it sends the request (counted by the gateway's metrics)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from igw.gateway.lean_server import SWITCH_ENV
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
