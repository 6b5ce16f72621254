"""The Anthropic Messages API (``POST /v1/messages``, which vLLM serves from 0.11.1) through the
gateway, driven by the real ``anthropic`` SDK as an agent built on it calls it, on both sides of the
``IGW_HTTP_SERVER`` switch, over loopback in front of fake model servers.

Before session s32 every call here was a 404 ``not_found``, and a stream the gateway had to end
early (a pod dying mid-stream) ended with an unnamed ``data: {"error": ...}`` event that the
Anthropic SDK skips: the caller got a truncated message and no error."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import orjson
import pytest

from igw.gateway.lean_server import SWITCH_ENV
from tests.gateway.fake_model_server import PROMPT_TOKENS, FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.gateway.test_openai_apis import metric

CHAT_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
OTHER_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DOC = config_doc([scheduler("coder", CHAT_MODEL), scheduler("llama", OTHER_MODEL)])
SWITCHES = pytest.mark.parametrize("switch", ["lean", "aiohttp"])


def client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0, timeout=30)


@SWITCHES
async def test_a_message_whole_and_streamed_is_routed_by_model_and_counted(
    gateway: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    caplog.set_level(logging.INFO, logger="igw.access")
    slow_coder = FakeModelServer("coder", tokens=4, first_token_delay_s=0.2, token_delay_s=0.15)
    async with (
        running(slow_coder, FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
        client(gw.url) as claude,
    ):
        whole = await claude.messages.create(
            model=CHAT_MODEL,
            max_tokens=64,
            system="You are a careful engineer.",
            messages=[{"role": "user", "content": "Refactor this function."}],
        )
        assert whole.content[0].text == "tok0tok1tok2tok3"  # type: ignore[union-attr]
        assert (whole.usage.input_tokens, whole.usage.output_tokens) == (PROMPT_TOKENS, 4)
        async with claude.messages.stream(
            model=CHAT_MODEL, max_tokens=64, messages=[{"role": "user", "content": "Stream it."}]
        ) as stream:
            text = "".join([chunk async for chunk in stream.text_stream])
            final = await stream.get_final_message()
        assert text == "tok0tok1tok2tok3"
        assert final.usage.output_tokens == 4
        assert llama.received == []
        assert [r.path for r in coder.received] == ["/v1/messages", "/v1/messages"]
        sent = orjson.loads(coder.received[0].body)
        assert (sent["system"], sent["max_tokens"]) == ("You are a careful engineer.", 64)
        text_metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        # both answers' usage: the stream's input tokens from message_start, its output from message_delta
        assert metric(text_metrics, "igw_tokens_total", model=CHAT_MODEL, direction="in") == 2 * PROMPT_TOKENS
        assert metric(text_metrics, "igw_tokens_total", model=CHAT_MODEL, direction="out") == 2 * 4
        lines = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
        streamed = next(line for line in lines if line["stream"])
        # the first token is the first content_block_delta, after the pod's 0.2 s prefill, not
        # message_start / content_block_start / ping, which leave before it
        # (and not message_delta, which ends the stream 4 x 0.15 s later)
        assert 200 <= streamed["ttft_ms"] < 500
        assert (streamed["prompt_tokens"], streamed["completion_tokens"]) == (PROMPT_TOKENS, 4)


@SWITCHES
async def test_a_message_stream_cut_by_its_pod_ends_in_an_error_the_sdk_raises(
    gateway: Any, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    monkeypatch.setenv(SWITCH_ENV, switch)
    async with (
        running(FakeModelServer("coder", tokens=6, die_after=2), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
        client(gw.url) as claude,
    ):
        received: list[str] = []

        async def read_the_stream() -> None:
            async with claude.messages.stream(
                model=CHAT_MODEL, max_tokens=64, messages=[{"role": "user", "content": "go"}]
            ) as stream:
                async for chunk in stream.text_stream:
                    received.append(chunk)

        with pytest.raises(anthropic.APIStatusError, match="upstream_error"):
            await read_the_stream()
        assert received == ["tok0", "tok1"]


async def test_a_bad_message_body_is_a_400_naming_the_field(gateway: Any) -> None:
    async with (
        running(FakeModelServer("coder"), FakeModelServer("llama")) as (coder, llama),
        gateway(DOC, {"coder": [coder.key], "llama": [llama.key]}) as gw,
    ):
        for body, param in (
            ({"model": CHAT_MODEL, "max_tokens": 8, "messages": "hi"}, "messages"),
            ({"model": CHAT_MODEL, "max_tokens": "8", "messages": []}, "max_tokens"),
            ({"model": CHAT_MODEL, "max_tokens": 8, "messages": [], "system": 3}, "system"),
        ):
            resp = await gw.post("/v1/messages", body)
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == param
        async with client(gw.url) as claude:
            with pytest.raises(anthropic.NotFoundError):
                await claude.messages.create(
                    model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "x"}]
                )
        assert coder.received == llama.received == []
