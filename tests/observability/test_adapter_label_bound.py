"""The ``adapter`` label of ``igw_endpoint_lora_adapter`` is bounded although pods choose the names.

A pod's ``vllm:lora_requests_info`` lists up to 1,024 adapter names per state, read anew every
scrape: until session s48 each name was a series, so a hostile or broken pod listing new names every
scrape made up to 2,048 new series per scrape. The adapters the scheduler routes to keep their name,
then the first ``UNCONFIGURED_ADAPTER_LABELS`` others; the rest are summed as ``adapter="other"``.
Routing still reads every name."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.guards import OpenGuard
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.gateway.state import GatewayState
from igw.gateway.telemetry import OTHER_ADAPTER, UNCONFIGURED_ADAPTER_LABELS
from igw.scheduling.plugins.lora_affinity_scorer import adapter_affinity
from tests.gateway.support import config_doc, scheduler

SCRAPES = 3
RUNNING, WAITING = 1000, 667  # each under the parser's 1,024 per state: 5,001 names in 3 scrapes
CAP = (1 + UNCONFIGURED_ADAPTER_LABELS + 1) * 2  # sql, first-seen others, other; per state


def _page(scrape: int) -> str:
    running = ["sql"] + [f"r{scrape}-{i}" for i in range(RUNNING - 1)]
    waiting = [f"w{scrape}-{i}" for i in range(WAITING)]
    return (
        f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="{",".join(running)}",'
        f'waiting_lora_adapters="{",".join(waiting)}"}} 1.9e9\n'
    )


def _adapter_series(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.labels["adapter"], s.labels["state"]): s.value
        for f in registry.collect()
        for s in f.samples
        if s.name == "igw_endpoint_lora_adapter"
    }


def test_a_pod_naming_thousands_of_adapters_makes_a_bounded_stable_set_of_series() -> None:
    config = build_gateway_config(config_doc([scheduler("p", "m", loraAdapters=["sql"])]))
    state = GatewayState(config, guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0))
    state.apply_endpoints("p", [DiscoveredEndpoint("10.0.0.1:8000")])
    sr = state.runtime.schedulers["p"]
    (endpoint,) = sr.pool.states.values()
    seen: set[tuple[str, str]] = set()
    for scrape in range(SCRAPES):
        endpoint.metrics = parse_page(_page(scrape), VLLM).metrics
        endpoint.scraped_at = 0.0
        series = _adapter_series(state.metrics.registry)
        seen |= series.keys()
        assert len(series) <= CAP, len(series)
        # nothing is lost: the values still add up to every name the page listed
        assert sum(v for (_, st), v in series.items() if st == "running") == RUNNING
        assert sum(v for (_, st), v in series.items() if st == "waiting") == WAITING
        assert series[("sql", "running")] == 1.0  # the adapter the scheduler routes to, by name
        assert series[(OTHER_ADAPTER, "running")] > 0
        # routing reads every name of this scrape, the folded ones included
        (view,) = sr.pool.views()
        assert view.metrics is not None
        assert view.metrics.active_adapters is not None
        assert len(view.metrics.active_adapters) == RUNNING
        assert adapter_affinity(f"r{scrape}-{RUNNING - 2}", view) == 1.0
        assert adapter_affinity(f"w{scrape}-{WAITING - 1}", view) == 0.6
    # over all scrapes the label values are the same bounded set, not one per name
    assert len(seen) <= CAP, len(seen)
    assert {adapter for adapter, _ in seen} <= {"sql", OTHER_ADAPTER} | {
        f"r0-{i}" for i in range(RUNNING)
    } | {f"w0-{i}" for i in range(WAITING)}
