"""A worker group's ``/metrics``: the series read from scrapes once (worker 0's, it scrapes), each
worker's own in-flight counts, and every worker's staleness summary of its copy of the scrapes.

Every worker of ``igw serve --workers N`` holds a relayed copy of worker 0's scrapes; exporting the
copies as well made N identical per-endpoint series (16 workers at 1,000 pods: 128,000 lines per
``/metrics``). A copy that falls behind shows in its worker's ``igw_pool_stale_endpoints``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.telemetry import SCRAPED_ENDPOINT_FAMILIES, GatewayMetrics
from igw.scheduling.types import EngineMetrics
from tests.gateway.worker_pair import worker_runtime
from tests.observability.live_gateway import MODEL, metrics_after_traffic, serving_gateway

# Families with samples on a two-pod page without adapters (the others of SCRAPED_ENDPOINT_FAMILIES
# have none there: no LoRA, no missing signal).
READ_FROM_SCRAPES = (
    *[name for name in SCRAPED_ENDPOINT_FAMILIES if "lora" not in name and "missing" not in name],
    "inference_pool_per_pod_queue_size",
    "inference_pool_ready_pods",
    "inference_pool_average_kv_cache_utilization",
)
EVERY_WORKER = (
    "igw_endpoint_inflight_requests",
    "igw_pool_stale_endpoints",
    "igw_pool_oldest_scrape_age_seconds",
)


def _workers(families: dict[str, Metric], name: str) -> set[str]:
    return {s.labels["worker"] for s in families[name].samples}


async def test_a_group_exports_the_scraped_series_once_and_each_worker_its_own(tmp_path: Path) -> None:
    async with serving_gateway(tmp_path, "--workers", "2") as url:
        families = await metrics_after_traffic(url)
        async with aiohttp.ClientSession() as http:
            for _ in range(100):  # until worker 1 answers for its page too (it may start later)
                if _workers(families, "igw_pool_stale_endpoints") == {"0", "1"}:
                    break
                await asyncio.sleep(0.1)
                text = await (await http.get(url + "/metrics")).text()
                families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in READ_FROM_SCRAPES:
        assert _workers(families, name) == {"0"}, name
    for name in EVERY_WORKER:
        assert _workers(families, name) == {"0", "1"}, name
    per_endpoint = [
        s for s in families["igw_endpoint_inflight_requests"].samples if s.labels["worker"] == "1"
    ]
    assert len(per_endpoint) == 2  # both pods, though worker 1 scrapes neither
    stale = {s.labels["worker"]: s.value for s in families["igw_pool_stale_endpoints"].samples}
    assert stale == {"0": 0.0, "1": 0.0}  # worker 1's relayed copy is as fresh as worker 0's
    oldest = [s.value for s in families["igw_pool_oldest_scrape_age_seconds"].samples]
    assert all(0.0 <= age < 1.0 for age in oldest), oldest
    assert {s.labels["scheduler"] for s in families["igw_pool_stale_endpoints"].samples} == {MODEL}


def _collected(metrics: GatewayMetrics) -> dict[str, Metric]:
    return {m.name: m for m in metrics.registry.collect()}


def test_the_summary_counts_what_the_scheduler_routes_around() -> None:
    now = time.monotonic()
    runtime = worker_runtime("fresh:1", "old:1", "failing:1", "never:1", stale_threshold="1s")
    states = runtime.schedulers["s"].pool.states
    for key, age in (("fresh:1", 0.2), ("old:1", 1.5), ("failing:1", 0.1)):
        states[key].metrics = EngineMetrics(waiting=0)
        states[key].scraped_at = now - age
    states["failing:1"].scrape_failing = True
    metrics = GatewayMetrics(
        lister=runtime.endpoints,
        clock=lambda: now,
        stale_threshold_s=lambda: runtime.settings.stale_threshold_s,
    )
    families = _collected(metrics)
    (stale,) = families["igw_pool_stale_endpoints"].samples
    assert (stale.labels, stale.value) == ({"scheduler": "s"}, 3.0)  # old, failing, never scraped
    (oldest,) = families["igw_pool_oldest_scrape_age_seconds"].samples
    assert abs(oldest.value - 1.5) < 1e-9
    runtime.schedulers["s"].pool.replace([DiscoveredEndpoint(key="fresh:1")])
    (stale,) = _collected(metrics)["igw_pool_stale_endpoints"].samples
    assert stale.value == 0.0


def test_a_follower_exports_its_in_flight_counts_and_summary_alone() -> None:
    now = time.monotonic()
    runtime = worker_runtime("a:1", "b:1")
    for state in runtime.schedulers["s"].pool.states.values():
        state.metrics = EngineMetrics(waiting=4, running=2, kv_usage=0.5)
        state.scraped_at = now
    runtime.schedulers["s"].pool.states["a:1"].inflight = 3
    follower = _collected(GatewayMetrics(lister=runtime.endpoints, clock=lambda: now, scrapes=False))
    leader = _collected(GatewayMetrics(lister=runtime.endpoints, clock=lambda: now))
    with_samples = {name for name, family in follower.items() if family.samples}
    assert not with_samples & set(READ_FROM_SCRAPES)
    assert set(READ_FROM_SCRAPES) <= {name for name, family in leader.items() if family.samples}
    inflight = {s.labels["endpoint"]: s.value for s in follower["igw_endpoint_inflight_requests"].samples}
    assert inflight == {"a:1": 3.0, "b:1": 0.0}
    assert follower["igw_pool_stale_endpoints"].samples[0].value == 0.0


def test_the_scraped_families_are_exactly_what_a_follower_leaves_out() -> None:
    """:data:`SCRAPED_ENDPOINT_FAMILIES` names what worker 0 alone exports: the families a leader's
    collector declares and a follower's does not (dashboards and tests read the list)."""
    runtime = worker_runtime("a:1")
    leader = {
        m.name for m in GatewayMetrics(lister=runtime.endpoints, clock=time.monotonic).registry.collect()
    }
    follower = {
        m.name
        for m in GatewayMetrics(
            lister=runtime.endpoints, clock=time.monotonic, scrapes=False
        ).registry.collect()
    }
    pool_gauges = {name for name in leader - follower if name.startswith("inference_pool_")}
    assert leader - follower - pool_gauges == set(SCRAPED_ENDPOINT_FAMILIES)
