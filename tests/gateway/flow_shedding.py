"""Flow control that refuses every arrival, for tests of how refused requests are counted and
labelled (by tenant) rather than of the queueing itself."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry

from igw.gateway.flow_gate import FlowGates, Refused
from igw.scheduling.flow_control import SHEDDABLE, BandLimits, FlowControlSettings
from igw.scheduling.types import RoutingDecision


def shedding_gates(registry: CollectorRegistry, *, tenant_labels: Iterable[str]) -> FlowGates:
    """Flow gates on ``registry`` whose ``sheddable`` band holds at most 1 byte: a request of 2 is
    refused on arrival. ``tenant_labels``: flow control's ``tenantLabels``."""
    gates = FlowGates(registry=registry, clock=lambda: 0.0)
    bands = {SHEDDABLE: BandLimits(max_requests=1, max_bytes=1, ttl_s=1.0)}
    settings = FlowControlSettings(
        bands=bands, max_requests=1, max_bytes=1, tenant_labels=frozenset(tenant_labels)
    )
    gates.configure(settings, retry_after_bounds=(1, 30))
    return gates


def _never_picked() -> RoutingDecision:
    raise AssertionError("refused on arrival: never dispatched")


async def shed_on_arrival(gates: FlowGates, tenants: Iterable[str]) -> None:
    """One sheddable request of 2 bytes from each of ``tenants`` through ``gates`` (scheduler
    ``pool``), each required to be refused at once (:func:`shedding_gates`)."""
    for i, tenant in enumerate(tenants):
        result = await gates.wait(
            scheduler="pool",
            request_id=f"r{i}",
            priority=SHEDDABLE,
            tenant=tenant,
            size_bytes=2,
            max_queue_s=None,
            pick=_never_picked,
        )
        assert isinstance(result, Refused)
