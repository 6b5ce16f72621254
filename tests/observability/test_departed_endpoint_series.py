"""Pod churn does not grow ``/metrics``: the per-endpoint counters of an endpoint that left its pool
(``igw_endpoint_picks_total``, ``igw_endpoint_ejections_total``) are dropped after a grace period.

Until session s40 they were kept for the life of the process: ``igw serve`` with an endpoints file
rewritten with 1,000 successive pod addresses (10 at a time) grew its page from 26 KB to 199 KB,
2,000 samples of pods long gone, and its cache of children with them.
"""

from __future__ import annotations

import random

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from igw.config.build import build_gateway_config
from igw.gateway.departed_series import DEPARTED_GRACE_S
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.guards import OpenGuard
from igw.gateway.state import GatewayState
from tests.gateway.support import config_doc, scheduler

PER_ENDPOINT_COUNTERS = ("igw_endpoint_picks_total", "igw_endpoint_ejections_total")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(clock: Clock, *schedulers: str) -> GatewayState:
    config = build_gateway_config(config_doc([scheduler(name, name) for name in schedulers]))
    return GatewayState(config, guard=OpenGuard(), clock=clock, rng=random.Random(0))


def _counted(state: GatewayState) -> dict[str, dict[tuple[str, str], float]]:
    """Per per-endpoint counter: ``(scheduler, endpoint)`` -> value, as ``/metrics`` shows it."""
    page = generate_latest(state.metrics.registry).decode()
    found: dict[str, dict[tuple[str, str], float]] = {name: {} for name in PER_ENDPOINT_COUNTERS}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.name in found:
                found[s.name][(s.labels["scheduler"], s.labels["endpoint"])] = s.value
    return found


def _route(state: GatewayState, scheduler: str, key: str, *, ejected: bool = False) -> None:
    """What the request path records of an attempt on ``key`` (and of its ejection)."""
    metrics = state.metrics
    metrics.picks_child(scheduler, key).inc()
    if ejected:
        metrics.child(metrics.ejections, scheduler, key).inc()


def test_a_thousand_successive_pod_addresses_leave_only_the_live_ones_on_the_page() -> None:
    clock = Clock()
    state = _state(clock, "pool")
    for i in range(1000):
        key = f"10.0.{i // 250}.{i % 250}:8000"
        state.apply_endpoints("pool", [DiscoveredEndpoint(key)])
        _route(state, "pool", key, ejected=i % 10 == 0)
        clock.now += 1.0
        if i == 0:
            first_page = len(generate_latest(state.metrics.registry))
    clock.now += DEPARTED_GRACE_S
    counted = _counted(state)
    assert counted["igw_endpoint_picks_total"] == {("pool", "10.0.3.249:8000"): 1.0}
    assert counted["igw_endpoint_ejections_total"] == {}
    assert len(generate_latest(state.metrics.registry)) <= first_page


def test_a_departed_endpoint_keeps_its_count_for_the_grace_period_and_if_it_returns() -> None:
    clock = Clock()
    state = _state(clock, "pool")
    a, b = DiscoveredEndpoint("a:1"), DiscoveredEndpoint("b:1")
    state.apply_endpoints("pool", [a, b])
    for _ in range(3):
        _route(state, "pool", "a:1", ejected=True)
    state.apply_endpoints("pool", [b])  # a's readiness probe fails for a moment
    clock.now += DEPARTED_GRACE_S - 1
    counted = _counted(state)  # Prometheus still reads a's final counts
    assert counted["igw_endpoint_picks_total"][("pool", "a:1")] == 3
    assert counted["igw_endpoint_ejections_total"][("pool", "a:1")] == 3
    state.apply_endpoints("pool", [a, b])  # back within the grace period: it keeps counting
    _route(state, "pool", "a:1")
    clock.now += 10 * DEPARTED_GRACE_S
    assert _counted(state)["igw_endpoint_picks_total"] == {("pool", "a:1"): 4.0}

    state.apply_endpoints("pool", [b])
    clock.now += DEPARTED_GRACE_S
    assert _counted(state)["igw_endpoint_picks_total"] == {}
    state.apply_endpoints("pool", [a, b])  # a pod at that address again: it counts from 0
    _route(state, "pool", "a:1")
    assert _counted(state)["igw_endpoint_picks_total"] == {("pool", "a:1"): 1.0}


def test_the_endpoints_of_a_scheduler_a_reload_removed_leave_too() -> None:
    clock = Clock()
    state = _state(clock, "old", "kept")
    state.apply_endpoints("old", [DiscoveredEndpoint("a:1")])
    state.apply_endpoints("kept", [DiscoveredEndpoint("b:1")])
    _route(state, "old", "a:1")
    _route(state, "kept", "b:1")
    state.apply_config(build_gateway_config(config_doc([scheduler("kept", "kept")])))
    clock.now += DEPARTED_GRACE_S
    assert _counted(state)["igw_endpoint_picks_total"] == {("kept", "b:1"): 1.0}
