"""/metrics pages: exact names per engine version, parseable by prometheus_client, realistic size."""

from __future__ import annotations

import random

import aiohttp
import pytest
from packaging.version import Version
from prometheus_client.parser import text_string_to_metric_families

from igw import engines
from igw.gateway.metrics_parser import parse_page
from igw.gateway.page_filter import filter_path
from igw.sim.des_pod import SimPod
from igw.sim.engine import Engine
from igw.sim.live import run_fleet
from igw.sim.metrics_page import PageContext, render_sglang, render_vllm
from igw.sim.pod_stats import PodStats
from igw.sim.presets import get_preset
from igw.sim.spec import FleetSpec
from tests.sim.support import make_request, run_alone

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _pod(version: str, *, max_lora: int = 0) -> tuple[PageContext, Engine, PodStats]:
    """A simulated ``llama-3.1-8b/h100`` pod of engine ``version`` that has served nothing yet: the
    context its page is rendered in, its engine (seeded, no jitter) and its stats."""
    preset = get_preset("llama-3.1-8b/h100")
    engine = Engine(preset=preset, rng=random.Random(0), jitter_sigma=0, max_loras=max_lora)
    stats = PodStats(max_model_len=preset.max_model_len)
    ctx = PageContext(
        model_name=MODEL,
        version=Version(version),
        max_model_len=preset.max_model_len,
        gpu_memory_utilization=0.9,
        prefix_caching=True,
        created_unix=1.7e9,
        max_lora=max_lora,
    )
    return ctx, engine, stats


def _page(version: str, *, max_lora: int = 0) -> tuple[str, Engine]:
    ctx, engine, stats = _pod(version, max_lora=max_lora)
    run_alone(engine, make_request("a", text="x" * 800, out=3))
    if max_lora:
        stats.note_lora_state(running="sql", waiting="", unix_now=1.7e9)
        stats.note_lora_state(running="", waiting="", unix_now=1.8e9)
    return render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=1.8e9, uptime_s=10), engine


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.mark.parametrize(
    ("version", "old_kv", "new_kv", "tpot", "itl"),
    [
        ("0.8.5", True, False, True, False),
        ("0.9.1", True, False, True, False),
        ("0.9.2", True, True, True, False),
        ("0.10.1", True, True, True, False),
        ("0.11.0", False, True, False, True),
        ("0.12.0", False, True, False, True),
        ("0.13.0", False, True, False, True),
    ],
)
def test_vllm_names_follow_the_version(
    version: str, old_kv: bool, new_kv: bool, tpot: bool, itl: bool
) -> None:
    text, _ = _page(version)
    s = _samples(text)
    assert ("vllm:gpu_cache_usage_perc" in s) is old_kv
    assert ("vllm:kv_cache_usage_perc" in s) is new_kv
    assert ("vllm:gpu_prefix_cache_queries_total" in s) is old_kv
    assert ("vllm:prefix_cache_queries_total" in s) is new_kv
    assert ("vllm:time_per_output_token_seconds_count" in s) is tpot
    assert ("vllm:inter_token_latency_seconds_count" in s) is itl
    for name in (
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:cache_config_info",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:num_preemptions_total",
    ):
        assert name in s, name
    assert "vllm:lora_requests_info" not in s  # only with LoRA enabled


def test_vllm_values_and_labels() -> None:
    text, engine = _page("0.10.1")
    s = _samples(text)
    labels, value = s["vllm:cache_config_info"][0]
    assert labels["block_size"] == "16"
    assert labels["num_gpu_blocks"] == str(engine.pool.num_blocks)
    assert value == 1.0
    assert s["vllm:num_requests_running"][0] == ({"engine": "0", "model_name": MODEL}, 0.0)
    assert s["vllm:prefix_cache_queries_total"][0][1] == 200.0
    ttft = s["vllm:time_to_first_token_seconds_bucket"]
    assert [b["le"] for b, _ in ttft][:3] == ["0.001", "0.005", "0.01"]
    assert ttft[-1][0]["le"] == "+Inf"
    assert s["vllm:time_to_first_token_seconds_count"][0][1] == 0.0  # PodStats is fed by the live server
    assert (
        'vllm:num_requests_running{engine="0",model_name=' in text
    )  # labels sorted as prometheus_client does
    assert "vllm:prompt_tokens_created" in text


def test_vllm_page_size_is_realistic() -> None:
    text, _ = _page("0.12.0")
    lines = text.count("\n")
    assert 420 <= lines <= 650  # reference: ~500-600 lines per vLLM pod
    assert 38_000 <= len(text.encode()) <= 65_000  # reference: ~50-60 KB (CAP-V1 47.7 KB)


def test_lora_requests_info_keeps_one_series_per_combination() -> None:
    text, _ = _page("0.10.1", max_lora=2)
    series = _samples(text)["vllm:lora_requests_info"]
    assert len(series) == 2
    latest = max(series, key=lambda kv: kv[1])
    assert latest[0] == {"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}


def test_sglang_page_names_and_format() -> None:
    ctx, engine, stats = _pod("0.4.6")
    fresh = _samples(render_sglang(ctx=ctx, engine=engine, stats=stats, gen_throughput=0.0))
    assert "sglang:num_queue_reqs" in fresh
    assert "sglang:token_usage" in fresh
    assert "sglang:prompt_tokens_total" not in fresh  # tokenizer families appear after the first request
    stats.requests_received = 1
    text = render_sglang(ctx=ctx, engine=engine, stats=stats, gen_throughput=0.0)
    s = _samples(text)
    for name in ("sglang:num_running_reqs", "sglang:cache_hit_rate", "sglang:prompt_tokens_total"):
        assert name in s
    assert "_created" not in text
    assert "python_gc" not in text
    assert s["sglang:num_queue_reqs"][0][0] == {
        "engine_type": "unified",
        "model_name": MODEL,
        "pp_rank": "0",
        "tp_rank": "0",
    }
    assert text.index("sglang:time_to_first_token_seconds_sum") < text.index(
        "sglang:time_to_first_token_seconds_bucket"
    )


@pytest.mark.parametrize(("version", "per_stage"), [("0.3.6", False), ("0.4.6", False), ("0.5.2", True)])
def test_sglang_page_grows_with_version_and_stays_parseable(version: str, per_stage: bool) -> None:
    ctx, engine, stats = _pod(version)
    req = make_request("a", text="x" * 800, out=3)
    run_alone(engine, req)
    stats.on_finish(req, requested_max_tokens=3)
    stats.requests_received = 1
    text = render_sglang(ctx=ctx, engine=engine, stats=stats, gen_throughput=0.0)
    s = _samples(text)
    assert ("sglang:per_stage_req_latency_seconds_count" in s) is per_stage
    if per_stage:
        stages = {labels["stage"] for labels, _ in s["sglang:per_stage_req_latency_seconds_count"]}
        assert stages == {
            "prefill_waiting",
            "request_process",
            "prefill_forward",
            "chunked_prefill",
            "decode_loop",
        }
        assert 45_000 <= len(text.encode()) <= 65_000  # reference: ~55-60 KB for a 0.5.x page after traffic
    decode = [v for labels, v in s.get("sglang:realtime_tokens_total", []) if labels.get("mode") == "decode"]
    assert decode == ([3.0] if Version(version) >= Version("0.4") else [])


def test_cached_histogram_blocks_follow_new_observations() -> None:
    ctx, engine, stats = _pod("0.11.0")

    def render() -> str:
        return render_vllm(ctx=ctx, engine=engine, stats=stats, unix_now=1.8e9, uptime_s=1)

    first = render()
    assert render() == first
    stats.ttft.observe(0.03)
    s = _samples(render())
    assert s["vllm:time_to_first_token_seconds_count"][0][1] == 1.0
    buckets = {labels["le"]: v for labels, v in s["vllm:time_to_first_token_seconds_bucket"]}
    assert buckets["0.02"] == 0.0
    assert buckets["0.04"] == 1.0


@pytest.mark.parametrize(
    ("version", "published"), [("0.4.6", False), ("0.5.8", True), ("0.5.11", True), ("0.5.12", True)]
)
async def test_an_sglang_pod_publishes_its_cache_config_and_the_gateway_reads_it(
    version: str, published: bool
) -> None:
    """SGLang 0.5.8 - 0.5.11 publish ``sglang:cache_config_info{num_pages,page_size}`` (the page size
    and page count of the KV pool), 0.5.12 on the ``sglang:page_size`` and ``sglang:num_pages``
    gauges, which the gateway reads for prefix auto-tuning: a simulated pod of those versions lacked
    them, so every one was reported as missing that signal, and the gateway read only the info gauge
    (every current SGLang pod was reported so). Read here as the gateway scrapes it (the
    name-filtered page) from a real simulated pod; the DES reports the same."""
    pod = {"name": "s", "preset": "llama-3.1-8b/h100", "engine": "sglang", "engine_version": version}
    spec = FleetSpec.from_mapping({"time_scale": 0.2, "seed": 1, "pods": [pod]})
    families = engines.SGLANG.families
    path = filter_path(families)
    assert path is not None
    async with run_fleet(spec) as fleet, aiohttp.ClientSession() as http:
        async with http.get(fleet.pods[0].url + path) as resp:
            page = await resp.text()
        async with http.get(fleet.pods[0].url + engines.SGLANG.metrics_path) as resp:
            whole = _samples(await resp.text())
        num_blocks = fleet.pod("s").engine.pool.num_blocks
    parsed = parse_page(page, families)
    des_pod = SimPod(
        index=0, spec=spec.pods[0], rng=random.Random(1), scrape_interval=0.05, sample_interval=1.0
    )
    des_pod.observe(0.1)
    if published:
        assert families.cache_config not in parsed.missing
        assert (parsed.metrics.block_size, parsed.metrics.num_gpu_blocks) == (16, num_blocks)
        assert des_pod.metrics is not None
        assert (des_pod.metrics.block_size, des_pod.metrics.num_gpu_blocks) == (16, num_blocks)
    else:
        assert families.cache_config in parsed.missing
        assert parsed.metrics.block_size is None
    # from 0.5.12 the capacity is two plain gauges instead (the catalogue's cache_gauges)
    gauges = Version(version) >= Version("0.5.12")
    assert ("sglang:page_size" in whole) is gauges
    if gauges:
        assert [v for _, v in whole["sglang:num_pages"]] == [float(num_blocks)]
