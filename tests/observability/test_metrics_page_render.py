"""``/metrics`` is rendered off the event loop (:mod:`igw.gateway.metrics_render`), page unchanged.

Until session s42 the handler ran ``prometheus_client.generate_latest`` on the event loop: at 1,000
endpoints in 20 pools a 1.4 MB page that took 130-400 ms of CPU, during which no request or stream of
the process moved (``igw perf metrics-page`` measures it). Now the values are read on the loop and
the page is built and formatted on a worker thread; these tests hold the page to what
``generate_latest`` of the registry gives, and the loop to serving while a page renders.
"""

from __future__ import annotations

import asyncio
import random

from prometheus_client import generate_latest

from igw.config.build import build_gateway_config
from igw.gateway.app import create_app
from igw.gateway.departed_series import DEPARTED_GRACE_S
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.guards import OpenGuard
from igw.gateway.inference import STATE_KEY
from igw.gateway.state import GatewayState
from igw.perf.metrics_page import fleet_state
from tests.gateway.support import config_doc, scheduler
from tests.observability.slow_render import SlowGauge, answered_during_a_render


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_page_is_byte_for_byte_what_generate_latest_of_the_registry_gives() -> None:
    """A fleet with every per-endpoint case (never scraped, failing, frozen, adapters, a missing
    signal, picks, in flight) and request series: the page rendered off the loop is the old one."""
    clock = Clock()
    state = fleet_state(60, pools=3, models=6, clock=clock)
    page = await state.metrics.page.render()
    assert page == generate_latest(state.metrics.registry)
    text = page.decode()
    for family in (
        "igw_endpoint_scrape_age_seconds{",
        "igw_endpoint_lora_adapter{",
        "igw_endpoint_signal_missing{",
        "igw_endpoint_picks_total{",
        "inference_pool_per_pod_queue_size{",
        "inference_objective_request_total{",
        "igw_request_duration_seconds_bucket{",
        "igw_pool_stale_endpoints{",
    ):
        assert family in text, family
    # updates made after a render are on the next page (the request path's batched updates folded)
    state.metrics.model_series("model0", "model0").requests(200).inc(1000)
    assert await state.metrics.page.render() == generate_latest(state.metrics.registry)


async def test_a_follower_worker_s_page_is_unchanged_too() -> None:
    """A worker of a group that follows worker 0's scrapes exports only its own per-endpoint series."""
    config = build_gateway_config(config_doc([scheduler("pool", "m")]))
    state = GatewayState(
        config, guard=OpenGuard(), clock=Clock(), rng=random.Random(0), exports_scrapes=False
    )
    state.apply_endpoints("pool", [DiscoveredEndpoint(f"10.0.0.{i}:8000") for i in range(5)])
    page = await state.metrics.page.render()
    assert b"igw_endpoint_inflight_requests{" in page
    assert b"igw_endpoint_queue_depth" not in page
    assert page == generate_latest(state.metrics.registry)


async def test_departed_endpoints_counters_leave_the_rendered_page() -> None:
    """The per-endpoint counters' grace period runs on the rendered page as on a collection."""
    clock = Clock()
    state = fleet_state(20, pools=2, models=2, clock=clock)
    gone = "10.0.0.0:8000"
    assert f'endpoint="{gone}"' in (await state.metrics.page.render()).decode()
    state.apply_endpoints("pool0", [])
    state.apply_endpoints("pool1", [])
    clock.now += DEPARTED_GRACE_S + 1
    page = (await state.metrics.page.render()).decode()
    assert "igw_endpoint_picks_total{" not in page


async def test_scrapes_that_arrive_while_a_page_renders_share_that_render() -> None:
    state = fleet_state(20, pools=2, models=2, clock=Clock())
    slow = SlowGauge(state.metrics.registry)
    first = asyncio.ensure_future(state.metrics.page.render())
    await slow.read_started()
    second = asyncio.ensure_future(state.metrics.page.render())
    await asyncio.sleep(0)
    slow.release.set()
    assert await first == await second
    assert slow.reads == 1
    await state.metrics.page.render()  # a scrape after the render ended gets a new one
    assert slow.reads == 2


async def test_a_scrape_whose_client_left_does_not_cancel_the_render_others_share() -> None:
    state = fleet_state(4, pools=1, models=1, clock=Clock())
    slow = SlowGauge(state.metrics.registry)
    left = asyncio.ensure_future(state.metrics.page.render())
    await slow.read_started()
    stays = asyncio.ensure_future(state.metrics.page.render())
    await asyncio.sleep(0)
    left.cancel()
    slow.release.set()
    assert b"igw_test_slow 1.0" in await stays


async def test_a_request_is_answered_while_a_large_page_renders() -> None:
    """``/healthz`` sent while ``/metrics`` renders is answered before the page, not after it: the
    render (held by a gauge that waits for the health answer) no longer blocks the event loop. With
    the handler rendering on the loop, the health check waited for the whole page."""
    config = build_gateway_config(config_doc([scheduler("pool", "m")]))
    app = create_app(config)
    slow = SlowGauge(app[STATE_KEY].metrics.registry)
    assert await answered_during_a_render(app, slow) == ["/healthz", "/metrics"]
