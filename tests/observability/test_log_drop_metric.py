"""``igw_log_lines_dropped_total{stream}`` on both tiers' ``/metrics``: the lines a batched log writer
dropped while its stream took none (a stalled log shipper) are counted where an alert can see them."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from igw.gateway.log_buffer import LOG_RECORD_BYTES, BatchedLineHandler
from igw.gateway.telemetry import GatewayMetrics
from igw.global_router.metrics import FleetMetrics
from tests.gateway.log_streams import StalledStream


def _dropped(registry: CollectorRegistry) -> dict[str, float]:
    page = generate_latest(registry).decode()
    return {
        sample.labels["stream"]: sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "igw_log_lines_dropped_total"
    }


@pytest.mark.parametrize("tier", ["gateway", "global-router"])
def test_lines_dropped_behind_a_stalled_stream_are_on_the_metrics_page(tier: str) -> None:
    """Until s43 the drops were reported only by a line on the stalled stream itself, once it moved
    again: while the stall lasted nothing said that lines were being lost."""
    registry = (
        GatewayMetrics(lister=list, clock=lambda: 0.0).registry
        if tier == "gateway"
        else FleetMetrics().registry
    )
    assert _dropped(registry) == {"stdout": 0.0, "stderr": 0.0}  # there before the first drop
    stream = StalledStream()
    handler = BatchedLineHandler(
        stream, interval_s=0.01, max_queued_bytes=5 * LOG_RECORD_BYTES, close_timeout_s=0.1, label="stdout"
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    access = logging.getLogger("igw.access")
    level, propagate = access.level, access.propagate
    access.setLevel(logging.INFO)
    access.propagate = False
    access.addHandler(handler)
    try:
        access.info("first")
        assert stream.entered.wait(30)  # the writer thread holds "first" and is stuck in write()
        for i in range(10):
            access.info("n%d", i)
        assert _dropped(registry) == {"stdout": 6.0, "stderr": 0.0}
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
        access.propagate = propagate
        stream.release.set()
        handler.close()
