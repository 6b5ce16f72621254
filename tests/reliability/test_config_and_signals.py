"""Threshold validation is the same for ``spec.extensions.routing`` and an EndpointPickerConfig's
``saturationDetector``; the simulator and the gateway agree on when the first token happens."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from igw.config.validate import validate_document
from igw.gateway.upstream import _carries_token
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.picker_config import profile_from_picker_config
from igw.scheduling.settings import RoutingSettings
from igw.sim.live import run_fleet
from tests.reliability.harness import MODEL, fleet_spec, gateway_doc, in_process_gateway, scripted_upstream

BAD_THRESHOLDS = [
    ({"queueDepthThreshold": 0}, "queueDepthThreshold"),
    ({"kvCacheUtilThreshold": 0.0}, "kvCacheUtilThreshold"),
    ({"kvCacheUtilThreshold": 1.5}, "kvCacheUtilThreshold"),
]


@pytest.mark.parametrize(("saturation", "field"), BAD_THRESHOLDS)
def test_out_of_range_thresholds_are_refused_on_both_paths(saturation: dict[str, Any], field: str) -> None:
    with pytest.raises(SchedulerConfigError) as routing:
        RoutingSettings.from_extension({"saturation": saturation})
    assert f"spec.extensions.routing.saturation.{field}" in str(routing.value)
    problems = validate_document(gateway_doc(routing={"saturation": saturation}))
    assert [p for p in problems if field in str(p)], problems
    with pytest.raises(SchedulerConfigError) as picker:
        profile_from_picker_config({"saturationDetector": saturation}, settings=RoutingSettings())
    assert f"saturationDetector.{field}" in str(picker.value)


def test_staleness_not_above_the_scrape_interval_is_refused_on_both_paths() -> None:
    with pytest.raises(SchedulerConfigError) as routing:
        RoutingSettings.from_extension({"scrapeInterval": "100ms", "staleThreshold": "100ms"})
    assert "spec.extensions.routing.staleThreshold" in str(routing.value)
    settings = RoutingSettings(scrape_interval_s=0.1)
    with pytest.raises(SchedulerConfigError) as picker:
        profile_from_picker_config(
            {"saturationDetector": {"metricsStalenessThreshold": "50ms"}}, settings=settings
        )
    assert "saturationDetector.metricsStalenessThreshold" in str(picker.value)
    profile_from_picker_config(
        {"saturationDetector": {"metricsStalenessThreshold": "200ms"}}, settings=settings
    )


async def test_simulated_chat_stream_sends_the_role_chunk_with_the_first_token() -> None:
    async with run_fleet(fleet_spec("llama-3.1-8b/a10g", time_scale=0.2), admin=False) as fleet:
        url = fleet.pods[0].url + "/v1/chat/completions"
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "x" * 20000}],
            "max_tokens": 5,
            "stream": True,
        }
        async with aiohttp.ClientSession() as http:
            resp = await http.post(url, json=body)
            first = await resp.content.readany()
            await resp.read()
    events = [orjson.loads(e[6:]) for e in first.split(b"\n\n") if e.startswith(b"data: {")]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(events) >= 2, "the first token arrived after the role chunk, not with it"
    assert events[1]["choices"][0]["delta"]["content"]


@pytest.mark.parametrize("max_tokens", [2_000_000, 10**12])
async def test_simulator_refuses_oversized_max_tokens_before_generating(max_tokens: int) -> None:
    async with (
        run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet,
        aiohttp.ClientSession() as http,
    ):
        url = fleet.pods[0].url + "/v1/completions"
        resp = await http.post(url, json={"model": MODEL, "prompt": "hi", "max_tokens": max_tokens})
        assert resp.status == 400
        error = await resp.json()  # vLLM's flat ErrorResponse shape (its ValueError names no param)
        assert error["param"] is None
        assert f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}." in error["message"]
        ok = await http.post(url, json={"model": MODEL, "prompt": "hi", "max_tokens": 2})
        assert ok.status == 200


FIRST_TOKEN_DELAY_S = 0.3


async def role_chunk_first(request: web.Request) -> web.StreamResponse:
    """A chat stream whose role chunk comes at once and whose first token comes only later."""
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    await resp.write(b"data: " + orjson.dumps(role) + b"\n\n")
    await asyncio.sleep(FIRST_TOKEN_DELAY_S)
    token = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}
    await resp.write(b"data: " + orjson.dumps(token) + b"\n\ndata: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def test_gateway_ttft_is_the_first_content_token_not_the_role_chunk(tmp_path: Path) -> None:
    async with (
        scripted_upstream({"POST /v1/chat/completions": role_chunk_first}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
    ):
        t0 = time.monotonic()
        resp = await gw.http.post(
            gw.url + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True},
        )
        assert resp.status == 200
        await resp.read()
        assert time.monotonic() - t0 >= FIRST_TOKEN_DELAY_S
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
    (line,) = [m for m in metrics.splitlines() if m.startswith("igw_time_to_first_token_seconds_sum")]
    assert float(line.split()[-1]) >= FIRST_TOKEN_DELAY_S * 0.95


@pytest.mark.parametrize(
    ("chunk", "token"),
    [
        (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', False),
        (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', True),
        (b'data: {"choices":[{"text":"a"}]}\n\n', True),
        (b'data: {"choices":[{"delta":{"tool_calls":[{"id":"c"}]}}]}\n\n', True),
        (b": ping\n\n", False),
        (b'data: {"choices":[{"delta":{"content":"a', True),  # an event split across reads
    ],
)
def test_what_counts_as_the_first_token(chunk: bytes, token: bool) -> None:
    assert _carries_token(chunk) is token
