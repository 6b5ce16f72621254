"""A simulated TGI pod: TGI-shaped /v1/models and /metrics, read by the gateway through the catalogue."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from igw import engines
from igw.gateway.metrics_parser import parse_page
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TGI_POD = {"name": "tgi", "preset": "llama-3.1-8b/h100", "engine": "tgi", "engine_version": "3.0.0"}


async def test_tgi_pod_serves_tgi_shaped_model_list_and_metrics() -> None:
    spec = FleetSpec.from_mapping({"time_scale": 0.2, "seed": 1, "pods": [TGI_POD]})
    async with run_fleet(spec) as fleet, aiohttp.ClientSession() as s:
        url = fleet.pods[0].url
        async with s.get(url + engines.TGI.model_info_path) as r:
            models = await r.json()
        assert models["object"] == "list"
        assert models["data"] == [
            {"id": MODEL, "object": "model", "created": models["data"][0]["created"], "owned_by": MODEL}
        ]
        async with s.post(
            url + "/v1/completions", json={"model": MODEL, "prompt": "abcd" * 50, "max_tokens": 3}
        ) as r:
            assert r.status == 200
        async with s.get(url + engines.TGI.metrics_path) as r:
            page = await r.text()
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert families["tgi_queue_size"].type == "gauge"
    assert families["tgi_batch_current_size"].type == "gauge"
    assert families["tgi_request_success"].samples[0].value == 1.0
    assert not any(name.startswith("vllm:") for name in families)
    parsed = parse_page(page, engines.TGI.families)
    assert parsed.missing == frozenset()  # nothing TGI could publish is absent
    assert (parsed.metrics.waiting, parsed.metrics.running) == (0, 0)
    assert parsed.metrics.kv_usage is None  # TGI has no KV-cache gauge: the scorer leaves it out
