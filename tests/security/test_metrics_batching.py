"""The security counters an admitted request touches are batched (igw.gateway.metric_batch): every
reader of the registry sees each increment, and prometheus_client's own child is not touched until a
read folds them in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from igw.security.metrics import SecurityMetrics


def test_batched_security_counters_are_folded_on_every_read() -> None:
    registry = CollectorRegistry()
    m = SecurityMetrics(registry=registry)
    for _ in range(3):
        m.child(m.tenant_requests, "team-a", "admitted").inc()
        m.allowed.inc()
    m.child(m.tenant_tokens, "team-a", "prompt").inc(40)
    m.child(m.token_cache, "hit").inc()
    # not yet handed to prometheus_client's child (no lock, no per-update call) ...
    assert m.tenant_requests.labels("team-a", "admitted")._value.get() == 0
    # ... but every read sees it
    value = registry.get_sample_value
    assert value("igw_tenant_requests_total", {"tenant": "team-a", "outcome": "admitted"}) == 3
    assert value("igw_auth_allowed_total") == 3
    assert value("igw_tenant_tokens_total", {"tenant": "team-a", "kind": "prompt"}) == 40
    assert value("igw_auth_token_cache_total", {"result": "hit"}) == 1
    m.child(m.tenant_requests, "team-a", "admitted").inc()
    assert b'igw_tenant_requests_total{outcome="admitted",tenant="team-a"} 4.0' in generate_latest(registry)


def test_unbatched_counters_are_updated_at_once() -> None:
    m = SecurityMetrics(registry=CollectorRegistry())
    m.child(m.auth_denied, "expired").inc()
    assert m.auth_denied.labels("expired")._value.get() == 1
