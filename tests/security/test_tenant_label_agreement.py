"""The ``tenant`` label agrees between flow control and the security metrics, and ``other`` is the
overflow alone.

Before session s39 flow control (``igw_flow_rejections_total``) and the security guard
(``igw_tenant_requests_total``, ``igw_tenant_tokens_total``) each kept their own
:class:`~igw.gateway.tenant_labels.TenantLabels`: with flow control's ``tenantLabels: [acme]`` and the
rate limiter's first-come labels, ``user-0`` was ``user-0`` in the security families and ``other`` in
flow control's, ``acme`` the reverse, so dashboards joining the families on ``tenant`` were wrong. And
a real tenant named ``other`` was counted in the overflow's series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.limiter import RateLimiter
from igw.security.ratelimit.local import LocalBuckets
from igw.security.settings import RateLimitSettings
from tests.gateway.flow_shedding import shed_on_arrival, shedding_gates
from tests.security.helpers import ManualClock


def _labels(registry: CollectorRegistry, family: str, key: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in registry.collect():
        if metric.name != family:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and (not key or key in sample.labels.values()):
                out[sample.labels["tenant"]] = out.get(sample.labels["tenant"], 0) + sample.value
    return out


def _limiter(registry: CollectorRegistry, clock: ManualClock, limit: int) -> RateLimiter:
    settings = RateLimitSettings.from_mapping({"metrics": {"maxTenantLabels": limit}})
    return RateLimiter(
        settings=settings,
        backend=LocalBuckets(clock=clock),
        clock=clock,
        metrics=SecurityMetrics(registry=registry),
    )


async def test_flow_control_and_the_security_metrics_label_the_same_tenants(clock: ManualClock) -> None:
    registry = CollectorRegistry()
    limiter = _limiter(registry, clock, limit=2)
    gates = shedding_gates(registry, tenant_labels={"acme"})
    tenants = ["user-0", "user-1", "user-2", "acme"]
    for tenant in tenants:  # admission (the guard) comes before flow control on the request path
        await limiter.admit(tenant=tenant, est_tokens=1)
    await shed_on_arrival(gates, tenants)
    admitted = _labels(registry, "igw_tenant_requests", "admitted")
    shed = _labels(registry, "igw_flow_rejections")
    assert admitted == {"user-0": 1, "user-1": 1, "acme": 1, "other": 1}
    assert shed == admitted  # the same tenants under the same labels: a join on tenant is exact


async def test_a_tenant_named_other_is_not_the_overflow(clock: ManualClock) -> None:
    """``other`` is the overflow's label alone; a real tenant of that name (tenant claims are
    printable ASCII, ``other`` is one) is ``~other``, and a tenant starting with ``~`` gets one more."""
    registry = CollectorRegistry()
    limiter = _limiter(registry, clock, limit=3)
    for tenant in ["other", "~x", "alice", "bob", "carol"]:
        await limiter.admit(tenant=tenant, est_tokens=1)
        await limiter.admit(tenant=tenant, est_tokens=1)  # a second request: the label caches
        await limiter.account(tenant=tenant, prompt_tokens=1, completion_tokens=0)
    admitted = _labels(registry, "igw_tenant_requests", "admitted")
    assert admitted == {"~other": 2, "~~x": 2, "alice": 2, "other": 4}
    assert _labels(registry, "igw_tenant_tokens", "prompt") == {"~other": 1, "~~x": 1, "alice": 1, "other": 2}
