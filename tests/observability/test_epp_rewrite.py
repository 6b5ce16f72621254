"""The reference names under a canary rewrite: ``model_name`` is the model the client asked for,
``target_model_name`` the one the request was sent to (real gateway and model servers on loopback)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


def rewrite_doc() -> dict[str, Any]:
    d = config_doc([scheduler("old", "llama-v1"), scheduler("new", "llama-v2")])
    targets = [{"model": "llama-v1", "weight": 0}, {"model": "llama-v2", "weight": 100}]
    d["spec"]["extensions"]["modelRewrites"] = {"rules": [{"model": "llama", "targets": targets}]}
    return d


async def test_target_model_name_is_the_rewritten_model(gateway: Any) -> None:
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(rewrite_doc(), {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        for model, stream in (("llama", False), ("llama", True), ("llama-v1", False)):
            body = {"model": model, "prompt": "hi", "max_tokens": 2, "stream": stream}
            resp = await gw.post("/v1/completions", body)
            assert resp.status == 200, await resp.text()
            await resp.read()
        text = await (await gw.http.get(gw.url + "/metrics")).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def values(family: str, suffix: str) -> dict[tuple[str, str], float]:
        return {
            (s.labels["model_name"], s.labels["target_model_name"]): s.value
            for s in families[family].samples
            if s.name == family + suffix
        }

    assert values("inference_objective_request", "_total") == {
        ("llama", "llama-v2"): 2.0,
        ("llama-v1", "llama-v1"): 1.0,
    }
    assert values("inference_objective_request_duration_seconds", "_count") == {
        ("llama", "llama-v2"): 2.0,
        ("llama-v1", "llama-v1"): 1.0,
    }
    assert values("inference_objective_request_ttft_seconds", "_count") == {("llama", "llama-v2"): 1.0}
    own = {
        (s.labels["model"], s.labels["requested_model"]): s.value
        for s in families["igw_requests"].samples
        if s.name == "igw_requests_total"
    }
    assert own == {("llama-v2", "llama"): 2.0, ("llama-v1", "llama-v1"): 1.0}


async def test_names_a_fallback_rule_catches_are_not_labels(
    gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A fallback rule (no ``model``) catches whatever name a client sends: each made-up name was a
    ``requested_model``/``model_name`` label of its own (≈ 80 lines of ``/metrics`` per name, for ever:
    300 names made the page 2.6 MB). They count as ``(unknown)``; the access log keeps the name."""
    caplog.set_level(logging.INFO, logger="igw.access")
    d = rewrite_doc()
    fallback = {"targets": [{"model": "llama-v1", "weight": 1}]}  # no model: catches any name
    d["spec"]["extensions"]["modelRewrites"]["rules"].append(fallback)
    async with (
        running(FakeModelServer("v1"), FakeModelServer("v2")) as (v1, v2),
        gateway(d, {"old": [v1.key], "new": [v2.key]}) as gw,
    ):
        for i in range(20):
            body = {"model": f"made-up-{i}", "prompt": "hi", "max_tokens": 2, "stream": i % 2 == 0}
            resp = await gw.post("/v1/completions", body)
            assert resp.status == 200, await resp.text()
            await resp.read()
        text = await (await gw.http.get(gw.url + "/metrics")).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "made-up" not in text
    own = {
        (s.labels["model"], s.labels["requested_model"]): s.value
        for s in families["igw_requests"].samples
        if s.name == "igw_requests_total"
    }
    assert own == {("llama-v1", "(unknown)"): 20.0}
    objective = {
        (s.labels["model_name"], s.labels["target_model_name"]): s.value
        for s in families["inference_objective_request_ttft_seconds"].samples
        if s.name == "inference_objective_request_ttft_seconds_count"
    }
    assert objective == {("(unknown)", "llama-v1"): 10.0}
    entries = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.access"]
    assert {e["requested_model"] for e in entries} == {f"made-up-{i}" for i in range(20)}
