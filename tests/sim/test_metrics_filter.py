"""The simulator answers ``/metrics?name[]=...`` as prometheus_client does (vLLM, SGLang), TGI does not."""

from __future__ import annotations

from urllib.parse import urlencode

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from igw.sim.live import run_fleet
from igw.sim.metrics_page import NAME_FILTER, restrict_page
from igw.sim.spec import FleetSpec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    waiting = Gauge("vllm:num_requests_waiting", "waiting", ["engine", "model_name"], registry=registry)
    waiting.labels("0", "m").set(3)
    waiting.labels("1", "m").set(4)
    tokens = Counter("vllm:generation_tokens", "tokens", ["model_name"], registry=registry)
    tokens.labels("m").inc(7)
    ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", ["model_name"], registry=registry)
    ttft.labels("m").observe(0.3)
    Gauge("vllm:cache_config_info", "info", ["block_size"], registry=registry).labels("16").set(1)
    return registry


@pytest.mark.parametrize(
    "names",
    [
        ["vllm:num_requests_waiting"],
        ["vllm:generation_tokens_total", "vllm:cache_config_info"],
        ["vllm:generation_tokens"],  # a counter's family name selects nothing: samples are x_total
        ["vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_sum"],
        ["vllm:num_requests_waiting", "no_such_metric"],
        ["no_such_metric"],
    ],
)
def test_restrict_page_answers_as_prometheus_client_does(names: list[str]) -> None:
    registry = _registry()
    expected = generate_latest(registry.restricted_registry(names)).decode()
    whole = generate_latest(registry).decode()
    # Family for family, byte for byte; the order of families is not part of the format, and
    # prometheus_client's restricted registry walks a set of collectors (its order varies by run).
    assert _families(restrict_page(whole, names)) == _families(expected)


def _families(page: str) -> list[str]:
    """The page's family blocks (each from its ``# HELP`` line), sorted; nothing may fall outside one."""
    assert not page or page.startswith("# HELP "), page
    return sorted("# HELP " + block for block in page.split("# HELP ") if block)


async def _get(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as r:
        assert r.status == 200
        return await r.text()


@pytest.mark.parametrize(
    ("pod", "names", "filtered"),
    [
        (
            {"engine": "vllm", "engine_version": "0.12.0"},
            ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total"],
            True,
        ),
        (
            {"engine": "sglang", "engine_version": "0.5.0", "enable_metrics": True},
            ["sglang:num_queue_reqs", "sglang:token_usage"],
            True,
        ),
        ({"engine": "tgi", "engine_version": "3.0.0"}, ["tgi_queue_size"], False),
    ],
)
async def test_simulated_pods_honour_the_filter_where_their_engine_does(
    pod: dict[str, object], names: list[str], filtered: bool
) -> None:
    spec = FleetSpec.from_mapping(
        {"time_scale": 0.2, "seed": 1, "pods": [{"name": "p", "preset": "llama-3.1-8b/h100", **pod}]}
    )
    async with run_fleet(spec) as fleet, aiohttp.ClientSession() as s:
        base = fleet.pods[0].url
        whole = await _get(s, base + "/metrics")
        answer = await _get(s, base + "/metrics?" + urlencode([(NAME_FILTER, n) for n in names]))
    if not filtered:
        assert answer == whole
        return
    samples = {smp.name for fam in text_string_to_metric_families(answer) for smp in fam.samples}
    assert samples == set(names) & {
        smp.name for fam in text_string_to_metric_families(whole) for smp in fam.samples
    }
    assert samples
    assert len(answer) * 10 < len(whole)
