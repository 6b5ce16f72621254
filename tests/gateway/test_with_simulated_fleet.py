"""Key integration paths against the project's simulated vLLM/SGLang fleet (``igw.sim.live``): real
model-server behaviour (continuous batching, exact metric names per engine version, faults)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from igw.sim.live import run_fleet
from igw.sim.spec import FaultKind, FaultSpec, FleetSpec, StreamCut
from tests.gateway.support import config_doc, data_events, scheduler, wait_for


def fleet(*pods: Mapping[str, Any], time_scale: float = 0.05) -> FleetSpec:
    return FleetSpec.from_mapping({"time_scale": time_scale, "seed": 7, "pods": list(pods)})


def pod(name: str, model: str = "llama", **extra: Any) -> dict[str, Any]:
    return {"name": name, "preset": "llama-3.1-8b/h100", "served_model_name": model, **extra}


def served_by(body: Mapping[str, Any]) -> str:
    return str(body["id"]).split("-")[1]  # the simulator names the pod in the response id


async def test_routes_models_and_adapters_to_their_pools(gateway: Any) -> None:
    spec = fleet(pod("l0", lora_adapters=["sql"]), pod("l1", lora_adapters=["sql"]), pod("q0", "qwen"))
    doc = config_doc([scheduler("llama", "llama", loraAdapters=["sql"]), scheduler("qwen", "qwen")])
    async with run_fleet(spec, admin=False) as f:
        keys = {p.name: p.key for p in f.pods}
        eps = {"llama": [keys["l0"], keys["l1"]], "qwen": [keys["q0"]]}
        async with gateway(doc, eps) as gw:
            for model, pods in (("llama", {"l0", "l1"}), ("sql", {"l0", "l1"}), ("qwen", {"q0"})):
                resp = await gw.post(
                    "/v1/completions", {"model": model, "prompt": "hello world", "max_tokens": 4}
                )
                assert resp.status == 200, await resp.text()
                body = await resp.json()
                assert served_by(body) in pods
                assert body["usage"]["completion_tokens"] == 4


async def test_vllm_091_impersonation_reports_the_missing_kv_name(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="igw.gateway.scraper")
    spec = fleet(pod("old", engine_version="0.9.1"), pod("new", engine_version="0.12.0"))
    async with run_fleet(spec, admin=False) as f:
        old, new = f.pods
        async with gateway(config_doc([scheduler("llama", "llama")]), {"llama": [old.key, new.key]}) as gw:
            state = gw.state.runtime.schedulers["llama"].pool.states
            await wait_for(lambda: state[old.key].kv_source is not None)
            assert state[old.key].kv_source == "vllm:gpu_cache_usage_perc"
            assert state[new.key].kv_source == "vllm:kv_cache_usage_perc"
            assert state[old.key].missing == {"vllm:kv_cache_usage_perc"}
            assert state[new.key].missing == frozenset()
            metrics = await (await gw.http.get(gw.url + "/metrics")).text()
            labels = f'endpoint="{old.key}",scheduler="llama",signal="vllm:kv_cache_usage_perc"'
            assert f"igw_endpoint_signal_missing{{{labels}}} 1.0" in metrics
            logged = [r for r in caplog.records if "vllm:kv_cache_usage_perc" in r.getMessage()]
            assert len(logged) == 1
            readyz = await (await gw.http.get(gw.url + "/readyz")).json()
            assert readyz["schedulers"]["llama"]["endpoints"][old.key]["missing_signals"] == [
                "vllm:kv_cache_usage_perc"
            ]


async def test_sglang_without_enable_metrics_is_reported_and_not_routed_to(gateway: Any) -> None:
    spec = fleet(
        pod("bare", engine="sglang", engine_version="0.4.6", enable_metrics=False),
        pod("good", engine="sglang", engine_version="0.4.6"),
    )
    doc = config_doc([scheduler("sg", "llama", engineType="sglang")])
    async with run_fleet(spec, admin=False) as f:
        bare, good = f.pods
        async with gateway(doc, {"sg": [bare.key, good.key]}, wait_fresh=False) as gw:
            states = gw.state.runtime.schedulers["sg"].pool.states
            await wait_for(lambda: gw.fresh("sg", good.key) and "/metrics" in states[bare.key].missing)
            for _ in range(4):
                body = await (await gw.post("/v1/completions", {"model": "llama", "prompt": "x y z"})).json()
                assert served_by(body) == "good"


@contextlib.asynccontextmanager
async def _sglang_dp_pod(gateway: Any, **extra: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A simulated SGLang 0.5.12 pod with two data-parallel ranks (``extra``: more of its settings)
    at real speed, behind the gateway (scheduler ``sg``); yields the pod and the gateway."""
    spec = fleet(
        pod("dp", preset="llama-3.1-8b/a10g", engine="sglang", engine_version="0.5.12", dp_size=2, **extra),
        time_scale=1.0,
    )
    doc = config_doc([scheduler("sg", "llama", engineType="sglang")])
    async with run_fleet(spec, admin=False) as f:
        (dp,) = f.pods
        async with gateway(doc, {"sg": [dp.key]}) as gw:
            yield dp, gw


async def test_sglang_data_parallel_ranks_are_summed_from_a_live_pod(gateway: Any) -> None:
    """An SGLang pod with two data-parallel ranks (one request slot each) behind the gateway: four
    long requests put one running and one queued on each rank, and the gateway's scrape of the real
    page reads the pod's queue and batch as the sum over ``dp_rank`` (2 and 2), not one rank's."""
    async with _sglang_dp_pod(gateway, max_num_seqs=1) as (dp, gw):
        views = gw.state.runtime.schedulers["sg"].pool.views
        body = {"model": "llama", "prompt": "hello " * 40, "max_tokens": 2000}
        sends = [asyncio.create_task(gw.post("/v1/completions", body)) for _ in range(4)]
        try:
            await wait_for(
                lambda: (views()[0].metrics.waiting, views()[0].metrics.running) == (2, 2),
                within=5.0,
                what="the pod's two ranks summed",
            )
            assert gw.state.runtime.schedulers["sg"].pool.states[dp.key].missing == frozenset()
        finally:
            for task in sends:
                task.cancel()
            await asyncio.gather(*sends, return_exceptions=True)


def _per_rank(text: str, family: str) -> dict[str, float]:
    """``family``'s samples on an SGLang page by their ``dp_rank``, as Prometheus reads them."""
    (fam,) = (f for f in text_string_to_metric_families(text) if f.name == family)
    return {s.labels["dp_rank"]: s.value for s in fam.samples}


async def test_sglang_data_parallel_kv_capacity_and_usage_are_the_pods_from_a_live_pod(gateway: Any) -> None:
    """A two-rank SGLang pod with one long request (on rank 0; rank 1 idle): the gateway's reading of
    the real page through its scraper (filtered page, template) holds the pod's KV cache - both
    ranks' pages summed - and the pod's used share - its used tokens over that, half of rank 0's
    share here. Before, it read one rank's pages and the busy rank's share as the pod's."""
    async with _sglang_dp_pod(gateway) as (dp, gw):
        views = gw.state.runtime.schedulers["sg"].pool.views
        body = {"model": "llama", "prompt": "hello " * 3000, "max_tokens": 2000}
        send = asyncio.create_task(gw.post("/v1/completions", body))
        try:
            for _ in range(200):  # the page moves as the request decodes: compare one reading
                text = await (await gw.http.get(dp.url + "/metrics")).text()
                usage, pages = _per_rank(text, "sglang:token_usage"), _per_rank(text, "sglang:num_pages")
                m = views()[0].metrics
                if usage.get("0", 0.0) > 0.0 and m is not None and m.kv_usage:
                    expected = sum(usage[r] * pages[r] for r in usage) / sum(pages.values())
                    if m.kv_usage == pytest.approx(expected):
                        break
                await asyncio.sleep(0.02)
            else:
                pytest.fail(f"the gateway read KV usage {m and m.kv_usage}; the page had {usage}")
            assert usage["1"] == 0.0
            assert m.kv_usage == pytest.approx(usage["0"] / 2)
            assert len(pages) == 2
            assert (m.block_size, m.num_gpu_blocks) == (16, int(sum(pages.values())))
            assert gw.state.runtime.schedulers["sg"].pool.states[dp.key].missing == frozenset()
        finally:
            send.cancel()
            await asyncio.gather(send, return_exceptions=True)


@pytest.mark.parametrize("fault", [FaultKind.KILL, FaultKind.HANG])
async def test_dead_or_hung_pod_is_excluded_and_recovers(gateway: Any, fault: FaultKind) -> None:
    # KILL closes the pod's pooled keep-alive connections too (a dead process), so the scraper's
    # next scrape fails at once; HANG leaves them open and silent until the scrape timeout.
    spec = fleet(pod("a"), pod("b"))
    async with run_fleet(spec, admin=False) as f:
        a, b = f.pods
        async with gateway(config_doc([scheduler("llama", "llama")]), {"llama": [a.key, b.key]}) as gw:
            await f.inject("a", FaultSpec(kind=fault))
            await wait_for(lambda: not gw.fresh("llama", a.key), what=f"{fault.value} pod excluded")
            for i in range(6):
                resp = await gw.post("/v1/completions", {"model": "llama", "prompt": f"question {i}"})
                assert resp.status == 200
                assert served_by(await resp.json()) == "b"
            await f.clear("a")
            # Back by itself once scraped again; the bound is generous (a loaded machine delays
            # scrapes), the assertion is the recovery, not its speed.
            await wait_for(lambda: gw.fresh("llama", a.key), within=15.0, what="pod back")


@pytest.mark.parametrize("mode", [StreamCut.FIN, StreamCut.RST, StreamCut.STALL])
async def test_upstream_cut_mid_stream_gives_terminal_error_event(gateway: Any, mode: StreamCut) -> None:
    spec = fleet(pod("a", faults=[{"kind": "die_mid_stream", "after_tokens": 2, "mode": mode.value}]))
    doc = config_doc([scheduler("llama", "llama")], routing={"streamIdleTimeout": "500ms"})
    async with run_fleet(spec, admin=False) as f, gateway(doc, {"llama": [f.pods[0].key]}) as gw:
        resp = await gw.post(
            "/v1/completions", {"model": "llama", "prompt": "tell me", "max_tokens": 20, "stream": True}
        )
        body = await asyncio.wait_for(resp.read(), timeout=15)  # a hang never ends; generous for load
        events = data_events(body)
        assert len(events) == 4  # two tokens, the error event, [DONE]
        assert orjson.loads(events[2][6:])["error"]["type"] == "upstream_error"
        assert events[3] == b"data: [DONE]"


async def test_client_disconnect_aborts_the_engine_request(gateway: Any) -> None:
    spec = fleet(pod("a"))
    async with run_fleet(spec, admin=False) as f:
        live = f.pod("a")
        async with gateway(config_doc([scheduler("llama", "llama")]), {"llama": [f.pods[0].key]}) as gw:
            body = {"model": "llama", "prompt": "write a long story", "max_tokens": 4000, "stream": True}
            resp = await gw.post("/v1/completions", body)
            await resp.content.readany()  # generation is running
            assert live.engine.num_running == 1
            resp.close()  # the client goes away
            # 4,000 tokens at real pace take far longer than this bound: reaching zero running
            # requests within it means the request was aborted, not finished.
            await wait_for(lambda: live.engine.num_running == 0, within=10.0, what="engine abort")


async def test_measured_speed_steers_traffic_to_the_faster_gpu(gateway: Any) -> None:
    # real-time pace (time_scale 1): per-token steps of ~6 ms (H100) vs ~35 ms (A10G) stand well above
    # the scheduling noise of a loaded 2-core test machine
    spec = fleet(
        pod("fast", labels={"gpu": "h100"}),
        pod("slow", preset="llama-3.1-8b/a10g", labels={"gpu": "a10g"}),
        time_scale=1.0,
    )
    # speed only (prefix off), so the measured time to first token decides once both are measured
    doc = config_doc([scheduler("llama", "llama", weights={"prefix": 0, "queue": 0, "kvCache": 0})])
    async with run_fleet(spec, admin=False) as f:
        fast, slow = f.pods
        # Warm both pods directly first: the first request served in the fleet's process pays
        # one-time costs (lazy imports, first socket) that would otherwise be measured as that
        # pod's "speed" and make whichever pod happened to be picked first look slow.
        async with aiohttp.ClientSession() as direct:
            for key in (fast.key, slow.key):
                warm = {"model": "llama", "prompt": "warm up", "max_tokens": 1}
                async with direct.post(f"http://{key}/v1/completions", json=warm) as resp:
                    assert resp.status == 200
        async with gateway(doc, {"llama": [fast.key, slow.key]}) as gw:
            profile = gw.state.runtime.schedulers["llama"].scheduler.profile
            scorers = {ws.scorer.type_name: ws.scorer for ws in profile.scorers}
            speed, backlog = scorers["predicted-ttft-scorer"], scorers["backlog-ttft-scorer"]
            body = {"model": "llama", "prompt": "count to twenty", "max_tokens": 6, "stream": True}
            for _ in range(12):
                await (await gw.post("/v1/completions", body)).read()
            # backlog-ttft-scorer keeps the A10G (a thirteenth of the H100's KV cache) out of the way
            # from the first request on, so the H100 is the one measured.
            ttft = speed.ttft.values
            assert fast.key in ttft
            assert fast.key in backlog.fits
            assert ttft.get(slow.key, float("inf")) > ttft[fast.key]
            served = []
            for _ in range(6):
                resp = await gw.post("/v1/completions", {**body, "stream": False})
                served.append(served_by(await resp.json()))
            assert served == ["fast"] * 6


async def test_responses_api_conversations_stay_on_their_pods_and_reuse_their_prefixes(gateway: Any) -> None:
    """The OpenAI SDK's Responses API through the gateway in front of simulated vLLM pods that keep
    their store in memory, as vLLM does: each continuation reaches the pod that stored its previous
    response (any other answers 404) and finds the conversation's prefix in that pod's KV cache; a
    background response is polled to completion through the gateway."""
    import openai

    spec = fleet(pod("p0"), pod("p1"), pod("p2"))
    async with run_fleet(spec, admin=False) as f:
        servers = [f.pod(p.name) for p in f.pods]
        async with (
            gateway(config_doc([scheduler("llama", "llama")]), {"llama": [p.key for p in f.pods]}) as gw,
            openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0) as oai,
        ):
            for conversation in range(4):
                previous = None
                cached = []
                for turn in range(3):
                    answer = await oai.responses.create(
                        model="llama",
                        input=f"conversation {conversation} turn {turn}: " + "tell me more " * 30,
                        previous_response_id=previous,
                        max_output_tokens=8,
                    )
                    assert answer.status == "completed"
                    assert answer.usage is not None
                    cached.append(answer.usage.input_tokens_details.cached_tokens)
                    holders = [s.spec.name for s in servers if answer.id in s.responses]
                    assert len(holders) == 1
                    if previous is not None:
                        assert previous in next(s for s in servers if s.spec.name == holders[0]).responses
                    previous = answer.id
                assert 0 < cached[1] < cached[2]  # the conversation's prefix, cached
            queued = await oai.responses.create(
                model="llama", input="later", background=True, max_output_tokens=4
            )
            assert queued.status == "queued"
            polled = await oai.responses.retrieve(queued.id)
            while polled.status in ("queued", "in_progress"):
                await asyncio.sleep(0.02)
                polled = await oai.responses.retrieve(queued.id)
            assert polled.status == "completed"
            assert polled.output_text


async def test_an_anthropic_sdk_agents_conversation_reuses_its_prefix_through_the_gateway(
    gateway: Any,
) -> None:
    """Agents on the Anthropic SDK (as Claude Code pointed at the gateway) in front of a simulated
    vLLM pod serving the Messages API: each turn resends the whole conversation through the gateway
    and finds the conversation so far in the pod's KV cache (its cached tokens grow turn by turn),
    and a token count runs nothing. One pod: which of several a turn goes to is the scheduler's
    choice among its signals (the routing tests and the DES measure that); a first version with
    three pods failed once in a loaded CI run, a follow-up turn finding nothing cached (its pick went
    to a pod without the prefix; which signal outweighed it was not found)."""
    import anthropic

    spec = fleet(pod("p0"))
    async with run_fleet(spec, admin=False) as f:
        servers = [f.pod(p.name) for p in f.pods]
        async with (
            gateway(config_doc([scheduler("llama", "llama")]), {"llama": [p.key for p in f.pods]}) as gw,
            anthropic.AsyncAnthropic(base_url=gw.url, api_key="unused", max_retries=0) as claude,
        ):
            for agent in range(3):
                conversation: list[dict[str, str]] = []
                cached = []
                for turn in range(3):
                    conversation.append(
                        {"role": "user", "content": f"agent {agent} step {turn}: " + "go on " * 40}
                    )
                    steps = sum(s.engine.counters.steps for s in servers)
                    hits = sum(s.engine.counters.prefix_hits for s in servers)
                    counted = await claude.messages.count_tokens(model="llama", messages=conversation)  # type: ignore[arg-type]
                    assert sum(s.engine.counters.steps for s in servers) == steps
                    async with claude.messages.stream(
                        model="llama",
                        max_tokens=8,
                        system="You are an agent.",
                        messages=conversation,  # type: ignore[arg-type]
                    ) as stream:
                        answer = await stream.get_final_message()
                    assert answer.usage.input_tokens > counted.input_tokens  # the system prompt besides
                    # vLLM reports no cache reads on this API: the pods' engines count them
                    cached.append(sum(s.engine.counters.prefix_hits for s in servers) - hits)
                    conversation.append({"role": "assistant", "content": answer.content[0].text})  # type: ignore[union-attr]
                assert 0 < cached[1] < cached[2]  # each turn finds the conversation so far in the cache
