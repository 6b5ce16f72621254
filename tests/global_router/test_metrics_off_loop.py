"""The global router's ``/metrics`` is formatted off the event loop, page unchanged.

Until session s42 the handler ran ``prometheus_client.generate_latest`` on the event loop: the
duration and TTFT histograms are one series per model, region and locality, so at a fleet of 100
clusters in 10 regions serving 100 models the page was megabytes and every scrape stalled every
routed request and stream for hundreds of milliseconds (``igw perf metrics-page`` measures it).
Now it is rendered by :class:`igw.gateway.metrics_render.MetricsPage`, as tier 1's is.
"""

from __future__ import annotations

import random

from prometheus_client import generate_latest

from igw.global_router.config import parse_global_config
from igw.global_router.metrics import FleetMetrics
from igw.global_router.server import ROUTER_KEY, create_global_app
from igw.perf.metrics_page import router_fleet_metrics
from tests.global_router.support import global_doc
from tests.observability.slow_render import SlowGauge, answered_during_a_render


async def test_the_page_is_byte_for_byte_what_generate_latest_gives_at_a_large_fleet() -> None:
    metrics = router_fleet_metrics(FleetMetrics(), clusters=30, regions=5, models=12)
    assert await metrics.page.render() == generate_latest(metrics.registry)


async def test_a_request_is_answered_while_the_router_page_renders() -> None:
    """``/healthz`` sent while ``/metrics`` renders is answered before the page: the render (held by
    a gauge that waits for the health answer) no longer blocks the event loop."""
    app = create_global_app(parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False)
    slow = SlowGauge(app[ROUTER_KEY].metrics.registry)
    assert await answered_during_a_render(app, slow) == ["/healthz", "/metrics"]
