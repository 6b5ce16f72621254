"""The anonymous tenant has one name everywhere it is observed: ``rateLimits.anonymousTenant``.

Before session s40 flow control called callers without a tenant ``""``: its
``igw_flow_rejections_total`` series had an empty ``tenant`` (which Prometheus reads as no label at
all, so ``sum by (tenant)`` and a join with ``igw_tenant_requests_total`` on ``tenant`` lost them;
with ``flowControl.metrics.tenantLabels`` set they were even counted as ``other``), and the access log
said ``"tenant": ""``, while the security families counted the same callers as ``anonymous``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from igw.perf.serve_process import serve_process
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.flow_shedding import shed_on_arrival, shedding_gates
from tests.gateway.support import config_doc, scheduler

MODEL = "m"
GUEST = "guest"


def _config(flow: dict[str, Any]) -> dict[str, Any]:
    doc = config_doc([scheduler(MODEL, MODEL)])
    doc["spec"]["extensions"]["rateLimits"] = {
        "anonymousTenant": GUEST,
        "default": {"requestsPerSecond": 0.001, "burst": 2},
    }
    doc["spec"]["extensions"]["flowControl"] = {"maxRequests": 1, "pollInterval": "10ms", **flow}
    return doc


@pytest.mark.parametrize(
    "flow", [{}, {"metrics": {"tenantLabels": ["acme"]}}], ids=["first-come-labels", "named-labels"]
)
async def test_anonymous_callers_are_the_anonymous_tenant_in_every_family_and_the_access_log(
    tmp_path: Path, flow: dict[str, Any]
) -> None:
    """``igw serve`` without ``spec.auth``: requests without a fairness id are the anonymous tenant
    for the rate limiter (``igw_tenant_requests_total``), flow control (``igw_flow_rejections_total``)
    and the access log alike."""
    config, endpoints = tmp_path / "igwc.yaml", tmp_path / "endpoints.yaml"
    config.write_text(yaml.safe_dump(_config(flow)))
    lines: list[str] = []
    async with running(FakeModelServer("pod", waiting=9)) as (pod,):
        endpoints.write_text(yaml.safe_dump({"schedulers": {MODEL: [pod.key]}}))
        async with (
            serve_process(config, endpoints, on_line=lines.append) as gw,
            aiohttp.ClientSession() as http,
        ):

            async def send(band: str) -> int:
                body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
                headers = {"x-gateway-inference-objective": band}
                async with http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                    await resp.read()
                    return resp.status

            sheddable = asyncio.create_task(send("Sheddable"))
            for _ in range(3000):  # until the gateway reports it queued (generous: a loaded machine)
                if 'igw_flow_queue_depth{priority="-1"' in await (await http.get(gw.url + "/metrics")).text():
                    break
                await asyncio.sleep(0.01)
            critical = asyncio.create_task(send("Critical"))
            assert await asyncio.wait_for(sheddable, timeout=30) == 429  # displaced
            pod.waiting = 0
            assert await asyncio.wait_for(critical, timeout=30) == 200
            assert await send("Critical") == 429  # the burst of 2 is spent: rate-limited
            text = await (await http.get(gw.url + "/metrics")).text()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    shed = [s.labels for s in samples if s.name == "igw_flow_rejections_total" and s.value > 0]
    assert [labels.get("tenant") for labels in shed] == [GUEST]
    outcomes = {
        (s.labels["tenant"], s.labels["outcome"])
        for s in samples
        if s.name == "igw_tenant_requests_total" and s.value > 0
    }
    assert outcomes == {(GUEST, "admitted"), (GUEST, "limited_requests")}
    logged = [orjson.loads(line) for line in lines if line.startswith("{") and '"status"' in line]
    queued = [entry for entry in logged if entry.get("priority") is not None]
    assert queued, logged
    assert {entry["tenant"] for entry in queued} == {GUEST}


async def test_flow_control_labels_the_anonymous_tenant_by_its_name_without_rate_limits() -> None:
    """Without ``rateLimits`` the name is the field's default, ``anonymous``, and it is labelled by
    name even when ``tenantLabels`` hands out no other label."""
    registry = CollectorRegistry()
    await shed_on_arrival(shedding_gates(registry, tenant_labels={"acme"}), ["", "acme", "bob"])
    labels = {
        s.labels["tenant"]
        for metric in registry.collect()
        if metric.name == "igw_flow_rejections"
        for s in metric.samples
        if s.name.endswith("_total")
    }
    assert labels == {"anonymous", "acme", "other"}
