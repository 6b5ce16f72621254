"""A simulated vLLM pod's Responses API over real loopback HTTP, driven by the real ``openai`` SDK:
whole, streamed and background responses, continuations from the pod's in-memory store (and their
prefix-cache hits), retrieval, resumed streams, cancel, and the errors a real vLLM gives."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from igw.sim.live import run_fleet
from igw.sim.spec import FaultKind, FaultSpec, FleetSpec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POD = {"name": "h", "preset": "llama-3.1-8b/h100"}


def fleet_spec(*pods: dict[str, Any], time_scale: float = 0.05) -> FleetSpec:
    return FleetSpec.from_mapping({"time_scale": time_scale, "seed": 1, "pods": list(pods)})


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


async def test_a_conversation_continues_from_the_store_and_hits_its_prefix_in_the_cache() -> None:
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as oai:
        first = await oai.responses.create(
            model=MODEL, instructions="Be brief.", input="what is a KV cache? " * 20, max_output_tokens=8
        )
        assert first.id.startswith("resp_")
        assert first.status == "completed"
        assert first.output_text
        assert first.usage is not None
        assert (first.usage.output_tokens, first.usage.input_tokens_details.cached_tokens) == (8, 0)
        second = await oai.responses.create(
            model=MODEL, input="and a prefix cache?", previous_response_id=first.id, max_output_tokens=4
        )
        assert second.previous_response_id == first.id
        assert second.usage is not None
        # the stored conversation (prompt + answer) leads the new prompt: its full blocks are cached
        assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
        cached = second.usage.input_tokens_details.cached_tokens
        assert cached >= (first.usage.input_tokens + first.usage.output_tokens) // 16 * 16 - 16 > 0
        again = await oai.responses.retrieve(second.id)
        assert (again.id, again.output_text, again.status) == (second.id, second.output_text, "completed")
        with pytest.raises(openai.NotFoundError, match="Response with id 'resp_elsewhere' not found"):
            await oai.responses.create(model=MODEL, input="x", previous_response_id="resp_elsewhere")
        with pytest.raises(openai.NotFoundError, match="not found"):
            await oai.responses.retrieve("resp_elsewhere")
        unstored = await oai.responses.create(model=MODEL, input="x", store=False, max_output_tokens=2)
        with pytest.raises(openai.NotFoundError):
            await oai.responses.retrieve(unstored.id)


async def test_the_body_request_id_names_the_stored_response_and_a_reused_one_replaces_it() -> None:
    """vLLM's ``ResponsesRequest.request_id``: the caller may name its response, and a second
    response under a name already stored replaces it, conversation and all (what the gateway's
    minted ids guard against: igw.gateway.response_ids)."""
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as oai:
        named = {"request_id": "resp_chosen"}
        first = await oai.responses.create(model=MODEL, input="first", max_output_tokens=2, extra_body=named)
        assert first.id == "resp_chosen"
        replaced = await oai.responses.create(
            model=MODEL, input="second " * 40, max_output_tokens=2, extra_body=named
        )
        assert replaced.id == "resp_chosen"
        follow_up = await oai.responses.create(
            model=MODEL, input="go on", previous_response_id="resp_chosen", max_output_tokens=2
        )
        assert follow_up.usage is not None
        assert replaced.usage is not None
        # the continuation's prompt starts with the second conversation, not the first
        assert follow_up.usage.input_tokens > replaced.usage.input_tokens
        with pytest.raises(openai.BadRequestError, match="request_id"):
            await oai.responses.create(model=MODEL, input="x", extra_body={"request_id": 7})


async def test_a_streamed_response_sends_the_named_events_in_order() -> None:
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as oai:
        stream = await oai.responses.create(
            model=MODEL, input="stream this", stream=True, max_output_tokens=6
        )
        events = [event async for event in stream]
        kinds = [e.type for e in events]
        assert kinds[:4] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert kinds[4:10] == ["response.output_text.delta"] * 6
        assert kinds[10:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        done = events[-1].response  # type: ignore[union-attr]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert done.output_text == text
        assert done.usage is not None
        assert done.usage.output_tokens == 6
        assert (await oai.responses.retrieve(done.id)).output_text == text  # stored when it finished


async def test_a_background_response_is_polled_resumed_and_cancelled() -> None:
    async with run_fleet(fleet_spec(POD, time_scale=0.2)) as fleet, client(fleet.pods[0].url) as oai:
        queued = await oai.responses.create(model=MODEL, input="later", background=True, max_output_tokens=20)
        assert (queued.status, queued.output) == ("queued", [])
        polled = await oai.responses.retrieve(queued.id)
        while polled.status in ("queued", "in_progress"):
            await asyncio.sleep(0.02)
            polled = await oai.responses.retrieve(queued.id)
        assert polled.status == "completed"
        assert polled.usage is not None
        assert polled.usage.output_tokens == 20
        # the stream resumed after event 3: the rest of the events, numbered on from 4
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{fleet.pods[0].url}/v1/responses/{queued.id}?stream=true&starting_after=3") as resumed,
        ):
            assert resumed.headers["Content-Type"].startswith("text/event-stream")
            payloads = [
                orjson.loads(line[6:])
                for line in (await resumed.text()).splitlines()
                if line.startswith("data: ")
            ]
        assert [p["sequence_number"] for p in payloads] == list(range(4, 4 + 20 + 4))
        assert payloads[-1]["response"]["output"][0]["content"][0]["text"] == polled.output_text
        long = await oai.responses.create(
            model=MODEL, input="forever", background=True, max_output_tokens=100_000 // 40
        )
        cancelled = await oai.responses.cancel(long.id)
        assert cancelled.status == "cancelled"
        assert (await oai.responses.retrieve(long.id)).status == "cancelled"
        assert fleet.pod("h").engine.num_running + fleet.pod("h").engine.num_waiting == 0
        whole = await oai.responses.create(model=MODEL, input="now", max_output_tokens=2)
        with pytest.raises(openai.BadRequestError, match="Cannot cancel a synchronous response"):
            await oai.responses.cancel(whole.id)


async def test_a_background_streamed_response_answers_its_events() -> None:
    """``background`` with ``stream``: vLLM answers the response's event stream (its background
    stream generator) while it goes on generating; the simulator answered a JSON ``queued`` object."""
    async with run_fleet(fleet_spec(POD, time_scale=0.2)) as fleet, client(fleet.pods[0].url) as oai:
        stream = await oai.responses.create(
            model=MODEL, input="later", background=True, stream=True, max_output_tokens=5
        )
        events = [event async for event in stream]
        kinds = [e.type for e in events]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds.count("response.output_text.delta") == 5
        assert kinds[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        done = events[-1].response  # type: ignore[union-attr]
        stored = await oai.responses.retrieve(done.id)
        assert (stored.status, stored.output_text) == ("completed", done.output_text)


async def test_a_background_streamed_response_sends_each_delta_as_its_token_is_generated() -> None:
    """The deltas of a ``background`` + ``stream`` response come while it generates (vLLM's background
    stream generator forwards them live), so time to first token measured on that path is real; the
    simulator sent them all, replayed, only once the response had completed."""
    async with run_fleet(fleet_spec(POD, time_scale=0.5)) as fleet, client(fleet.pods[0].url) as oai:
        stream = await oai.responses.create(
            model=MODEL, input="later", background=True, stream=True, max_output_tokens=60
        )
        status_at_first_delta = None
        kinds = []
        response_id = ""
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.created":
                response_id = event.response.id
            elif event.type == "response.output_text.delta" and status_at_first_delta is None:
                status_at_first_delta = (await oai.responses.retrieve(response_id)).status
        assert status_at_first_delta == "in_progress"
        assert kinds.count("response.output_text.delta") == 60
        assert kinds[-1] == "response.completed"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "input": []}, "input"),
        ({"model": MODEL, "input": [{"content": "no role"}]}, "input[0]"),
        ({"model": MODEL, "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": MODEL, "input": "x", "instructions": 3}, "instructions"),
        ({"model": MODEL, "input": "x", "stream": "yes"}, "stream"),
        ({"model": MODEL, "input": "x", "background": True, "store": False}, "background"),
        ({"model": MODEL, "input": "x", "previous_response_id": 7}, "previous_response_id"),
    ],
)
async def test_a_bad_responses_body_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    async with (
        run_fleet(fleet_spec(POD)) as fleet,
        aiohttp.ClientSession() as http,
        http.post(fleet.pods[0].url + "/v1/responses", json=body) as resp,
    ):
        assert resp.status == 400
        assert (await resp.json())["param"] == param


async def test_a_killed_pod_comes_back_without_its_stored_responses() -> None:
    """vLLM's store is the serving process's memory: a restarted pod has none of its responses."""
    async with run_fleet(fleet_spec(POD)) as fleet, client(fleet.pods[0].url) as oai:
        made = await oai.responses.create(model=MODEL, input="remember me", max_output_tokens=2)
        await fleet.inject("h", FaultSpec(kind=FaultKind.KILL))
        await fleet.clear("h", FaultKind.KILL)
        with pytest.raises(openai.NotFoundError):
            await oai.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            await oai.responses.create(model=MODEL, input="x", previous_response_id=made.id)
