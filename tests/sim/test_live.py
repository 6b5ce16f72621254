"""The live fleet over real loopback HTTP: OpenAI API, /metrics, disconnects, faults, admin API."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw.sim.live import RunningFleet, run_fleet
from igw.sim.server import TIME_SCALE_HEADER
from igw.sim.spec import SLOW_FACTOR_MAX, FaultKind, FaultSpec, FleetSpec, StreamCut
from igw.sim.tokens import generated_text

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def fleet_spec(*pods: Mapping[str, Any], time_scale: float = 0.2) -> FleetSpec:
    return FleetSpec.from_mapping({"time_scale": time_scale, "seed": 1, "pods": list(pods)})


H100 = {"name": "h", "preset": "llama-3.1-8b/h100", "labels": {"gpu": "h100"}, "lora_adapters": ["sql"]}


async def _metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as r:
        assert r.status == 200
        text = await r.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, s.value)
    return out


async def _sse(resp: aiohttp.ClientResponse) -> list[str]:
    events = []
    async for raw in resp.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            events.append(line[6:])
    return events


async def test_fleet_exposes_pods_with_keys_and_labels() -> None:
    spec = fleet_spec(
        H100, {"name": "s", "preset": "llama-3.1-8b/a10g", "engine": "sglang", "engine_version": "0.4.6"}
    )
    async with run_fleet(spec) as fleet:
        keys = [p.key for p in fleet.pods]
        assert all(k.startswith("127.0.0.1:") and int(k.split(":")[1]) > 0 for k in keys)
        assert len(set(keys)) == 2
        assert fleet.pods[0].labels == {"gpu": "h100"}
        assert fleet.pods[1].engine == "sglang"
        async with aiohttp.ClientSession() as s:
            async with s.get(fleet.pods[0].url + "/health") as r:
                assert r.status == 200
                assert r.headers[TIME_SCALE_HEADER] == "0.2"
            async with s.get(fleet.pods[0].url + "/v1/models") as r:
                ids = [m["id"] for m in (await r.json())["data"]]
                assert ids == [MODEL, "sql"]
    async with aiohttp.ClientSession() as s:  # stopped on exit
        with pytest.raises(aiohttp.ClientConnectionError):
            await s.get(f"http://{keys[0]}/health")


async def test_completion_usage_and_prefix_cache_over_http() -> None:
    prompt = "abcd" * 400  # 400 tokens = 25 full blocks
    async with run_fleet(fleet_spec(H100)) as fleet:
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            bodies = []
            for _ in range(2):
                async with s.post(
                    url + "/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 5}
                ) as r:
                    assert r.status == 200
                    bodies.append(await r.json())
            assert bodies[0]["usage"]["prompt_tokens"] == 400
            assert bodies[0]["usage"]["completion_tokens"] == 5
            assert bodies[0]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            assert bodies[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 384
            assert bodies[1]["choices"][0]["finish_reason"] == "length"
            m = await _metrics(s, url)
            assert m["vllm:prefix_cache_hits_total"] == 384
            assert m["vllm:prefix_cache_queries_total"] == 800
            assert m["vllm:time_to_first_token_seconds_count"] == 2
            assert m["vllm:request_success_total"] >= 0


async def test_streaming_sends_one_event_per_token_then_done() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet:
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            body = {
                "model": MODEL,
                "prompt": "hello " * 50,
                "max_tokens": 7,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with s.post(url + "/v1/completions", json=body) as r:
                assert r.headers["Content-Type"].startswith("text/event-stream")
                events = await _sse(r)
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            tokens = [c for c in chunks if c["choices"]]
            assert len(tokens) == 7
            assert tokens[-1]["choices"][0]["finish_reason"] == "length"
            assert chunks[-1]["usage"]["completion_tokens"] == 7
            chat = {
                "model": "sql",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3,
                "stream": True,
            }
            async with s.post(url + "/v1/chat/completions", json=chat) as r:
                events = await _sse(r)
            deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
            assert deltas[0] == {"role": "assistant", "content": ""}
            assert len(deltas) == 4
            async with s.post(url + "/v1/chat/completions", json={**chat, "stream": False}) as r:
                whole = await r.json()
            assert whole["object"] == "chat.completion"
            assert whole["usage"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (json.dumps({"prompt": "x"}).encode(), 400, "'model'"),
        (json.dumps({"model": "gpt-x", "prompt": "x"}).encode(), 404, "does not exist"),
        (json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 0}).encode(), 400, "max_tokens"),
        (json.dumps({"model": MODEL, "prompt": ""}).encode(), 400, "prompt"),
        (json.dumps({"model": MODEL, "prompt": "x", "stream": "yes"}).encode(), 400, "stream"),
        (json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 10**7}).encode(), 400, "context length"),
    ],
)
async def test_bad_requests_get_openai_style_errors(body: bytes, status: int, needle: str) -> None:
    async with (
        run_fleet(fleet_spec(H100)) as fleet,
        aiohttp.ClientSession() as s,
        s.post(fleet.pods[0].url + "/v1/completions", data=body) as r,
    ):
        assert r.status == status
        err = await r.json()
    assert err["object"] == "error"
    assert needle in err["message"]
    assert err["code"] == status


async def test_a_completion_prompt_takes_the_one_prompt_forms_vllm_takes() -> None:
    """A token-id list (and a one-element list of one) is a prompt to vLLM; the simulator answered
    400 ``'prompt' must be a non-empty string``. Equal id prefixes share cached blocks."""
    ids = list(range(1000, 1000 + 64))
    async with run_fleet(fleet_spec(H100)) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url + "/v1/completions"
        usages = []
        for prompt in (ids, [ids + [7] * 16], ["one prompt as a list"]):
            async with s.post(url, json={"model": MODEL, "prompt": prompt, "max_tokens": 2}) as r:
                assert r.status == 200, await r.text()
                answer = await r.json()
            assert len(answer["choices"]) == 1
            usages.append(answer["usage"])
        assert [u["prompt_tokens"] for u in usages[:2]] == [64, 80]
        assert usages[1]["prompt_tokens_details"]["cached_tokens"] == 64  # the first 4 blocks
        async with s.post(url, json={"model": MODEL, "prompt": [1, 10**9]}) as r:
            assert r.status == 400
            assert (await r.json())["message"] == "Token id 1000000000 is out of vocabulary"


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({"prompt": ["a", "b"]}, "prompt", "a batch of 2 prompts is not simulated"),
        ({"prompt": [[1, 2], [3, 4]]}, "prompt", "a batch of 2 prompts is not simulated"),
        ({"prompt": "x", "n": 3}, "n", "'n' > 1 (parallel sampling) is not simulated"),
        ({"prompt": "x", "n": 0}, "n", "'n' must be a positive integer"),
    ],
)
async def test_batches_and_parallel_sampling_are_refused_not_answered_with_one_choice(
    body: dict[str, Any], param: str, needle: str
) -> None:
    """vLLM answers a batch with a choice per prompt and ``n`` with n choices (n-fold decode work and
    usage); the simulator answered one choice and one usage without a word. It now refuses them."""
    async with (
        run_fleet(fleet_spec(H100)) as fleet,
        aiohttp.ClientSession() as s,
        s.post(fleet.pods[0].url + "/v1/completions", json={"model": MODEL, **body}) as r,
    ):
        assert r.status == 400
        err = await r.json()
    assert (err["param"], err["object"]) == (param, "error")
    assert needle in err["message"]


A10G = {"name": "a", "preset": "llama-3.1-8b/a10g"}  # max_model_len 16384


@pytest.mark.parametrize(
    ("prompt_tokens", "max_tokens", "message"),
    [
        (
            16384,
            1,
            "This model's maximum context length is 16384 tokens. However, your request has 16384 "
            "input tokens. Please reduce the length of the input messages.",
        ),
        (
            16000,
            500,
            "'max_tokens' or 'max_completion_tokens' is too large: 500. This model's maximum context "
            "length is 16384 tokens and your request has 16000 input tokens (500 > 16384 - 16000).",
        ),
    ],
)
async def test_context_overflow_is_worded_as_vllm_words_it(
    prompt_tokens: int, max_tokens: int, message: str
) -> None:
    """vLLM 0.10-0.11 words a prompt that alone fills the window and an output bound that overflows
    it differently, and names no ``param`` (a plain ValueError); the simulator answered its own
    wording with ``param: "max_tokens"`` even when the prompt alone was too long."""
    body = {"model": MODEL, "prompt": "x" * 4 * prompt_tokens, "max_tokens": max_tokens}
    async with (
        run_fleet(fleet_spec(A10G)) as fleet,
        aiohttp.ClientSession() as s,
        s.post(fleet.pods[0].url + "/v1/completions", json=body) as r,
    ):
        assert r.status == 400
        err = await r.json()
    assert err == {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


async def test_oversized_body_is_refused() -> None:
    async with (
        run_fleet(fleet_spec(H100)) as fleet,
        aiohttp.ClientSession() as s,
        s.post(fleet.pods[0].url + "/v1/completions", data=b"x" * (9 * 1024 * 1024)) as r,
    ):
        assert r.status == 413


@pytest.mark.parametrize(
    ("engine", "version", "flag", "served"),
    [("sglang", "0.4.6", True, True), ("sglang", "0.4.6", False, False), ("sglang", "0.3.4", True, False)],
)
async def test_sglang_metrics_only_with_flag_and_version(
    engine: str, version: str, flag: bool, served: bool
) -> None:
    pod = {"preset": "llama-3.1-8b/h100", "engine": engine, "engine_version": version, "enable_metrics": flag}
    async with (
        run_fleet(fleet_spec(pod)) as fleet,
        aiohttp.ClientSession() as s,
        s.get(fleet.pods[0].url + "/metrics") as r,
    ):
        assert (r.status == 200) is served
        if served:
            assert "sglang:num_queue_reqs" in await r.text()


async def test_client_disconnect_aborts_and_frees_kv_blocks() -> None:
    async with run_fleet(fleet_spec(H100, time_scale=1.0)) as fleet:
        pod = fleet.pod("h")
        async with aiohttp.ClientSession() as s:
            body = {"model": MODEL, "prompt": "z" * 40_000, "max_tokens": 5000, "stream": True}
            resp = await s.post(pod.url + "/v1/completions", json=body)
            await resp.content.readline()
            for _ in range(100):
                if pod.engine.pool.usage > 0:
                    break
                await asyncio.sleep(0.01)
            assert pod.engine.pool.usage > 0
            assert pod.engine.num_running == 1
            resp.close()
            for _ in range(200):
                if pod.engine.num_running == 0:
                    break
                await asyncio.sleep(0.01)
        assert pod.engine.num_running == 0
        assert pod.engine.pool.usage == 0.0
        assert pod.engine.counters.finished_by_reason["abort"] == 1


async def test_non_streaming_disconnect_aborts_too() -> None:
    async with run_fleet(fleet_spec(H100, time_scale=1.0)) as fleet:
        pod = fleet.pod("h")
        async with aiohttp.ClientSession() as s:
            body = {"model": MODEL, "prompt": "q" * 400, "max_tokens": 5000}
            with pytest.raises(asyncio.TimeoutError):
                await s.post(pod.url + "/v1/completions", json=body, timeout=aiohttp.ClientTimeout(total=0.2))
        for _ in range(200):
            if pod.engine.num_running == 0 and pod.engine.num_waiting == 0:
                break
            await asyncio.sleep(0.01)
        assert pod.engine.num_running == 0
        assert pod.engine.pool.usage == 0.0


async def _admin(fleet: RunningFleet, method: str, path: str, body: object = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.request(method, fleet.admin_url + path, json=body) as r:
        return r.status, await r.json()


async def test_kill_and_revive_through_the_admin_api() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet:
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            body = {"model": MODEL, "prompt": "k" * 400, "max_tokens": 2}
            async with s.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200
        pool = fleet.pod("h").engine.pool
        assert pool.num_free > pool.free_anonymous  # the prompt's blocks are cached-but-free
        status, out = await _admin(fleet, "POST", "/pods/h/faults", {"kind": "kill"})
        assert status == 200
        assert pool.num_free == pool.free_anonymous  # a killed server loses its prefix cache
        assert out["faults"][0]["kind"] == "kill"
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientConnectionError):
                await s.get(url + "/health")
            status, _ = await _admin(fleet, "DELETE", f"/pods/{fleet.pods[0].key}/faults")
            assert status == 200
            async with s.get(url + "/health") as r:
                assert r.status == 200


async def test_kill_also_closes_idle_keep_alive_connections() -> None:
    """A killed pod is a dead process: a pooled client must not get answers over an old connection."""
    async with run_fleet(fleet_spec(H100), admin=False) as fleet:
        pod = fleet.pods[0]
        connector = aiohttp.TCPConnector(limit=1, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector) as s:
            async with s.get(pod.url + "/health") as r:
                assert r.status == 200
                await r.read()
            await fleet.inject("h", FaultSpec(kind=FaultKind.KILL))
            for _ in range(3):
                with pytest.raises(aiohttp.ClientConnectionError):
                    async with s.get(pod.url + "/metrics") as r:
                        await r.read()
            await fleet.clear("h")
            async with s.get(pod.url + "/health") as r:
                assert r.status == 200


async def test_admin_api_rejects_bad_input_naming_the_field() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet:
        status, out = await _admin(fleet, "POST", "/pods/h/faults", {"kind": "slow", "factor": "fast"})
        assert status == 400
        assert out["field"] == "fault.factor"
        status, out = await _admin(fleet, "POST", "/pods/nobody/faults", {"kind": "kill"})
        assert status == 404
        status, out = await _admin(fleet, "DELETE", "/pods/h/faults/explode")
        assert status == 400
        assert out["field"] == "kind"
        status, out = await _admin(fleet, "GET", "/pods")
        assert status == 200
        assert out["time_scale"] == 0.2
        assert out["pods"][0]["name"] == "h"


async def test_hang_accepts_connections_but_never_answers() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet:
        await fleet.inject("h", FaultSpec(kind=FaultKind.HANG))
        async with aiohttp.ClientSession() as s:
            with pytest.raises(asyncio.TimeoutError):
                await s.get(fleet.pods[0].url + "/metrics", timeout=aiohttp.ClientTimeout(total=0.3))
            await fleet.clear("h", FaultKind.HANG)
            async with s.get(fleet.pods[0].url + "/health") as r:
                assert r.status == 200


async def test_freeze_metrics_serves_stale_values() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet:
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            await fleet.inject("h", FaultSpec(kind=FaultKind.FREEZE_METRICS))
            async with s.post(
                url + "/v1/completions", json={"model": MODEL, "prompt": "x" * 80, "max_tokens": 2}
            ) as r:
                assert r.status == 200
            assert (await _metrics(s, url))["vllm:generation_tokens_total"] == 0
            await fleet.clear("h")
            assert (await _metrics(s, url))["vllm:generation_tokens_total"] == 2


async def test_error_rate_and_slow_down() -> None:
    async with run_fleet(fleet_spec(H100, time_scale=0.5)) as fleet:
        url = fleet.pods[0].url
        pod = fleet.pod("h")
        async with aiohttp.ClientSession() as s:
            await fleet.inject("h", FaultSpec(kind=FaultKind.ERROR_RATE, rate=1.0, status=503))
            async with s.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x"}) as r:
                assert r.status == 503
            await fleet.clear("h")
            await fleet.inject("h", FaultSpec(kind=FaultKind.SLOW, factor=4.0))
            assert pod.engine.slowdown == 4.0
            async with s.post(
                url + "/v1/completions", json={"model": MODEL, "prompt": "x" * 40, "max_tokens": 20}
            ) as r:
                assert r.status == 200
        unslowed = pod.engine.step_time_estimate(num_tokens=1, sum_ctx=11) / pod.engine.slowdown
        assert pod.stats.itl.total / pod.stats.itl.n == pytest.approx(4 * unslowed, rel=0.2)


async def test_clearing_a_slow_fault_rescales_the_step_already_running() -> None:
    """A step scheduled under ``slow`` (factor 1000: a 27 ms prefill becomes 27 s) kept its slowed
    length after ``clear``: the request was still stuck seconds later (about 27 s here, against the
    5 s bound). What is left of the step now runs at the new factor, and the admin API refuses a
    factor above the documented maximum."""
    async with run_fleet(fleet_spec(H100, time_scale=1.0)) as fleet, aiohttp.ClientSession() as s:
        status, out = await _admin(fleet, "POST", "/pods/h/faults", {"kind": "slow", "factor": 1e6})
        assert status == 400
        assert out["field"] == "fault.factor"
        await fleet.inject("h", FaultSpec(kind=FaultKind.SLOW, factor=SLOW_FACTOR_MAX))
        body = {"model": MODEL, "prompt": "x" * 400, "max_tokens": 3}
        sent = asyncio.create_task(s.post(fleet.pods[0].url + "/v1/completions", json=body))
        await asyncio.sleep(0.2)
        assert not sent.done()
        await fleet.clear("h")
        cleared = time.monotonic()
        async with await asyncio.wait_for(sent, 10.0) as r:
            assert r.status == 200
        assert time.monotonic() - cleared < 5.0


async def test_die_mid_stream_cuts_the_connection_without_done() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet:
        await fleet.inject("h", FaultSpec(kind=FaultKind.DIE_MID_STREAM, after_tokens=2, mode=StreamCut.RST))
        pod = fleet.pod("h")
        async with aiohttp.ClientSession() as s:
            body = {"model": MODEL, "prompt": "x" * 40, "max_tokens": 20, "stream": True}
            events: list[str] = []

            async def read_all() -> None:
                async with s.post(pod.url + "/v1/completions", json=body) as r:
                    async for raw in r.content:
                        if raw.startswith(b"data: "):
                            events.append(raw.decode())

            with pytest.raises(aiohttp.ClientPayloadError):
                await read_all()
        assert len(events) == 2
        assert all("[DONE]" not in e for e in events)
        assert pod.engine.num_running == 0
        assert pod.engine.pool.usage == 0.0


async def test_http_families_count_requests_by_status_class() -> None:
    async with run_fleet(fleet_spec(H100)) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url
        async with s.get(url + "/v1/nothing-here") as r:
            assert r.status == 404
        async with s.post(
            url + "/v1/completions", json={"model": MODEL, "prompt": "x" * 8, "max_tokens": 1}
        ) as r:
            assert r.status == 200
        async with s.get(url + "/metrics") as r:
            text = await r.text()
    samples = {
        (dict(s.labels)["handler"], dict(s.labels)["status"]): s.value
        for fam in text_string_to_metric_families(text)
        if fam.name == "http_requests"
        for s in fam.samples
        if s.name == "http_requests_total"
    }
    assert samples[("none", "4xx")] == 1.0
    assert samples[("/v1/completions", "2xx")] == 1.0


async def test_follow_up_turn_hits_the_cached_answer_over_http() -> None:
    first_prompt = "q" * 400  # 100 tokens
    async with run_fleet(fleet_spec(H100)) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url + "/v1/completions"
        async with s.post(url, json={"model": MODEL, "prompt": first_prompt, "max_tokens": 60}) as r:
            answer = (await r.json())["choices"][0]["text"]
        assert answer == generated_text(60)
        follow_up = first_prompt + answer + "w" * 40
        async with s.post(url, json={"model": MODEL, "prompt": follow_up, "max_tokens": 2}) as r:
            usage = (await r.json())["usage"]
    assert usage["prompt_tokens"] == 170
    # 159 tokens were computed (the last generated token never is): 9 whole blocks
    assert usage["prompt_tokens_details"]["cached_tokens"] == 144


async def test_an_overloaded_event_loop_is_reported_as_lag() -> None:
    async with run_fleet(fleet_spec(H100, time_scale=1.0)) as fleet, aiohttp.ClientSession() as s:
        pod = fleet.pod("h")
        body = {"model": MODEL, "prompt": "x" * 400, "max_tokens": 40, "stream": True}
        async with s.post(pod.url + "/v1/completions", json=body) as r:
            await r.content.readline()
            time.sleep(0.2)  # noqa: ASYNC251 - deliberately block the loop, as an overloaded host would
            await r.read()
        assert pod.lagged_steps >= 1
        assert pod.max_lag_s >= 0.1
        assert fleet.describe()["pods"][0]["lagged_steps"] == pod.lagged_steps  # type: ignore[index]


async def test_spec_fault_windows_start_and_end_on_time() -> None:
    pod = {
        **H100,
        "faults": [
            {"kind": "slow", "factor": 3, "end_s": 0.5},
            {"kind": "hang", "start_s": 0.25, "end_s": 0.75},
        ],
    }
    async with run_fleet(fleet_spec(pod, time_scale=0.2)) as fleet:
        live = fleet.pod("h")
        assert live.engine.slowdown == 3.0
        assert FaultKind.HANG not in live.faults
        await asyncio.sleep(0.3 * 0.2)
        assert FaultKind.HANG in live.faults
        await asyncio.sleep(0.3 * 0.2)
        assert live.engine.slowdown == 1.0
        await asyncio.sleep(0.3 * 0.2)
        assert live.faults == {}


async def test_vllm_pods_serve_token_ids_for_prefix_routers() -> None:
    """vllm-router's cache_aware asks /v1/completions/render for token ids; equal prefixes share ids."""
    from igw.sim.tokens import count_tokens

    shared = "You are a helpful assistant. " * 20
    sglang = {"name": "s", "preset": "llama-3.1-8b/a10g", "engine": "sglang", "engine_version": "0.4.6"}
    async with run_fleet(fleet_spec(H100, sglang)) as fleet:
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            rendered = []
            for suffix in ("first question?", "another, longer question!"):
                body = {"model": MODEL, "prompt": shared + suffix, "max_tokens": 4}
                async with s.post(url + "/v1/completions/render", json=body) as r:
                    assert r.status == 200
                    (item,) = await r.json()
                    assert item["model"] == MODEL
                    assert len(item["token_ids"]) == count_tokens(shared + suffix)
                    rendered.append(item["token_ids"])
            common = len(shared) // 4
            assert rendered[0][:common] == rendered[1][:common]
            assert rendered[0][common:] != rendered[1][common:]
            async with s.post(url + "/tokenize", json={"model": MODEL, "prompt": shared}) as r:
                tok = await r.json()
                assert tok["count"] == len(tok["tokens"]) == common
                assert tok["tokens"] == rendered[0][:common]
            chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(url + "/tokenize", json=chat) as r:
                assert r.status == 200
                assert (await r.json())["count"] >= 1
            async with s.post(url + "/v1/completions/render", json={"model": "nope", "prompt": "x"}) as r:
                assert r.status == 404
                assert (await r.json())["param"] == "model"
            async with s.post(url + "/v1/completions/render", data=b"{not json") as r:
                assert r.status == 400
            async with s.post(fleet.pods[1].url + "/v1/completions/render", json=body) as r:
                assert r.status == 404  # SGLang has no render endpoint: its routers match on text
            # Rendering generates nothing: the engine saw no request.
            metrics = await _metrics(s, url)
            assert metrics.get("vllm:request_success_total", 0.0) == 0.0


async def test_a_pod_records_each_request_under_its_request_id_only_when_asked() -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 3, "stream": True}
    async with run_fleet(fleet_spec(H100)) as fleet:
        pod = fleet.pod("h")
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json=body, headers={"X-Request-Id": "off"}) as r:
                await _sse(r)
            assert pod.arrivals is None  # off by default: nothing kept
            pod.arrivals = {}
            for rid in ("first", "second"):
                async with s.post(url + "/v1/completions", json=body, headers={"X-Request-Id": rid}) as r:
                    await _sse(r)
            async with s.post(url + "/v1/completions", json=body) as r:  # no id: the pod's own
                own = json.loads((await _sse(r))[0])["id"]
        assert set(pod.arrivals) == {"first", "second", own}
        first = pod.arrivals["first"]
        assert (first.running, first.waiting) == (0, 0)  # the pod was idle when it came
        req = first.request
        assert req.first_scheduled_at is not None
        assert req.first_token_at is not None
        assert req.finished_at is not None
        assert req.first_scheduled_at < req.first_token_at <= req.finished_at
        # The written first token is timed on the wall clock, after the arrival.
        assert first.first_token_s is not None
        assert first.taken_s < first.first_token_s


async def test_a_request_after_a_short_idle_gap_is_not_served_in_the_past() -> None:
    """A step never starts before the request it admits arrived.

    The driver keeps its virtual clock continuous across gaps shorter than the re-sync threshold
    (50 ms of wall time, a whole simulated second at time scale 0.05); a request arriving 10 ms of
    wall time after the previous step ended was scheduled at that old instant: its prefill ran
    0.2 simulated seconds in the past, its TTFT came that much early and the pod's
    ``request_queue_time_seconds`` histogram summed to a negative time.
    """
    pod_spec = {"name": "a", "preset": "llama-3.1-8b/a10g", "jitter_sigma": 0}
    async with run_fleet(fleet_spec(pod_spec, time_scale=0.05), admin=False) as fleet:
        pod = fleet.pod("a")
        pod.arrivals = {}
        url = fleet.pods[0].url
        async with aiohttp.ClientSession() as s:
            for rid, letter in (("cold", "x"), ("after-gap", "y")):
                body = {"model": MODEL, "prompt": letter * 4000, "max_tokens": 1}
                async with s.post(url + "/v1/completions", json=body, headers={"X-Request-Id": rid}) as r:
                    assert r.status == 200
                    await r.read()
                await asyncio.sleep(0.01)  # 0.2 simulated seconds: well inside the re-sync threshold
            async with s.get(url + "/metrics") as r:
                page = await r.text()
        ttft = {}
        for rid in ("cold", "after-gap"):
            req = pod.arrivals[rid].request
            assert req.first_scheduled_at is not None
            assert req.first_token_at is not None
            assert req.first_scheduled_at >= req.arrival
            ttft[rid] = req.first_token_at - req.arrival
        # Same prompt length on an idle pod, no jitter: the same prefill time.
        assert ttft["after-gap"] == pytest.approx(ttft["cold"], abs=0.02)
        sums = {
            s.name: s.value
            for fam in text_string_to_metric_families(page)
            for s in fam.samples
            if s.name == "vllm:request_queue_time_seconds_sum"
        }
        assert sums["vllm:request_queue_time_seconds_sum"] >= 0.0


async def test_a_fault_injected_at_run_time_honours_its_window() -> None:
    """``start_s``/``end_s`` of an admin-API fault count from the injection (they were ignored: the
    fault started at once and never ended); a DELETE also cancels a window still pending."""
    async with run_fleet(fleet_spec(H100, time_scale=0.2)) as fleet:
        live = fleet.pod("h")
        status, _ = await _admin(
            fleet, "POST", "/pods/h/faults", {"kind": "slow", "factor": 3, "start_s": 0.25, "end_s": 0.75}
        )
        assert status == 200
        assert live.engine.slowdown == 1.0  # not yet
        await asyncio.sleep(0.4 * 0.2)
        assert live.engine.slowdown == 3.0
        await asyncio.sleep(0.6 * 0.2)
        assert live.engine.slowdown == 1.0  # it ended by itself
        assert live.faults == {}
        await fleet.inject("h", FaultSpec(kind=FaultKind.HANG, start_s=0.25))
        status, _ = await _admin(fleet, "DELETE", "/pods/h/faults/hang")
        assert status == 200
        await asyncio.sleep(0.4 * 0.2)
        assert live.faults == {}  # the cancelled window never started
