"""A simulated vLLM pod's Anthropic Messages API over real loopback HTTP, driven by the real
``anthropic`` SDK as an agent calls it: whole and streamed messages, a conversation's next turn
hitting its prefix in the KV cache, token counts, and the errors vLLM gives on those routes."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import pytest

from igw.sim.live import run_fleet
from igw.sim.spec import FaultKind, FaultSpec, FleetSpec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POD = {"name": "h", "preset": "llama-3.1-8b/h100"}
QUESTION = "what is a KV cache? " * 20


def fleet_spec(*pods: dict[str, Any]) -> FleetSpec:
    return FleetSpec.from_mapping({"time_scale": 0.05, "seed": 1, "pods": list(pods)})


def client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0, timeout=30)


async def test_a_conversations_next_turn_hits_its_prefix_and_a_count_runs_nothing() -> None:
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as claude:
        turn = [{"role": "user", "content": QUESTION}]
        first = await claude.messages.create(model=MODEL, max_tokens=8, system="Be brief.", messages=turn)  # type: ignore[arg-type]
        assert first.id.startswith("msg_")
        assert (first.type, first.role, first.model, first.stop_reason) == (
            "message",
            "assistant",
            MODEL,
            "max_tokens",
        )
        answer = first.content[0].text  # type: ignore[union-attr]
        assert answer
        assert first.usage.output_tokens == 8
        counters = fleet.pod("h").engine.counters
        steps, hits = counters.steps, counters.prefix_hits
        conversation = [*turn, {"role": "assistant", "content": answer}, {"role": "user", "content": "and?"}]
        counted = await claude.messages.count_tokens(model=MODEL, system="Be brief.", messages=conversation)  # type: ignore[arg-type]
        assert counters.steps == steps  # tokenized only
        second = await claude.messages.create(
            model=MODEL,
            max_tokens=4,
            system="Be brief.",
            messages=conversation,  # type: ignore[arg-type]
        )
        assert second.usage.input_tokens == counted.input_tokens > first.usage.input_tokens + 8
        # the first turn's prompt and answer lead the second's: their full blocks are cached (vLLM
        # reports no cache reads on this API: the engine's counter shows them)
        assert counters.prefix_hits - hits >= (first.usage.input_tokens + 8) // 16 * 16 - 16 > 0


async def test_a_streamed_message_sends_vllms_events_in_order() -> None:
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as claude:
        messages = [{"role": "user", "content": QUESTION}]
        whole = await claude.messages.create(model=MODEL, max_tokens=6, messages=messages)  # type: ignore[arg-type]
        async with claude.messages.stream(model=MODEL, max_tokens=6, messages=messages) as stream:  # type: ignore[arg-type]
            final = await stream.get_final_message()
        body = {"model": MODEL, "max_tokens": 6, "messages": messages, "stream": True}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{fleet.pods[0].url}/v1/messages", json=body) as resp,
        ):
            lines = (await resp.text()).splitlines()
        kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
        # vLLM opens the message with its first token (after the prefill) and sends no ping
        assert kinds[:2] == ["message_start", "content_block_start"]
        assert kinds[2:-3] == ["content_block_delta"] * 6
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        assert final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
        assert (final.usage.input_tokens, final.usage.output_tokens) == (whole.usage.input_tokens, 6)
        assert final.stop_reason == "max_tokens"


async def test_errors_take_the_anthropic_envelope_with_vllms_types_and_priority_is_dropped() -> None:
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as claude:
        hello = [{"role": "user", "content": "hi"}]
        with pytest.raises(anthropic.NotFoundError) as missing:
            await claude.messages.create(model="nope", max_tokens=4, messages=hello)  # type: ignore[arg-type]
        assert missing.value.body == {
            "type": "error",
            "error": {"type": "NotFoundError", "message": "The model `nope` does not exist."},
        }
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/v1/messages", json={"model": MODEL, "messages": hello}) as resp:
                assert resp.status == 400
                body = await resp.json()
                assert body["type"] == "error"
                assert body["error"]["type"] == "BadRequestError"
                assert "max_tokens" in body["error"]["message"]
            # vLLM's Anthropic request model drops fields outside Anthropic's API: no priority check
            prioritised = {"model": MODEL, "max_tokens": 2, "messages": hello, "priority": 5}
            async with http.post(f"{url}/v1/messages", json=prioritised) as resp:
                assert resp.status == 200
            async with http.post(
                f"{url}/v1/completions", json={"model": MODEL, "prompt": "x", "priority": 5}
            ) as resp:
                assert resp.status == 400  # where vLLM reads it, unstarted priority scheduling refuses it
        await fleet.inject("h", FaultSpec(kind=FaultKind.ERROR_RATE, rate=1.0, status=500))
        with pytest.raises(anthropic.InternalServerError) as failed:
            await claude.messages.create(model=MODEL, max_tokens=4, messages=hello)  # type: ignore[arg-type]
        assert isinstance(failed.value.body, dict)
        assert failed.value.body["error"]["type"] == "InternalServerError"
