"""``igw_tenant_labels_folded_total``: how many distinct tenants were counted as ``tenant="other"``
because the first ``maxTenantLabels`` labels were taken, so an operator knows when (and by how much)
to raise it. Requests of ``other`` were already counted (``igw_tenant_requests_total{tenant="other"}``);
how many tenants lack a label was not."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from igw.gateway.tenant_labels import FOLDED_TRACKED, OTHER_TENANT, TenantLabels


def _folded(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("igw_tenant_labels_folded_total")


def test_distinct_tenants_beyond_the_cap_are_counted_once_each() -> None:
    registry = CollectorRegistry()
    labels = TenantLabels.of(registry)
    assert _folded(registry) == 0.0
    for _ in range(3):  # each tenant's requests repeat: counted once
        for i in range(50):
            labels.label(f"user-{i}", named=frozenset({"vip"}), limit=4)
        labels.label("vip", named=frozenset({"vip"}), limit=4)
    assert labels.label("user-49", named=frozenset(), limit=4) == OTHER_TENANT
    assert _folded(registry) == 46.0  # 50 users, 4 first-come labels; the named tenant never folds


def test_folds_of_a_named_only_family_are_not_counted() -> None:
    """Flow control with a tenantLabels list folds every unlisted tenant by design: raising
    maxTenantLabels would not name them, so they are not counted."""
    registry = CollectorRegistry()
    labels = TenantLabels.of(registry)
    for i in range(20):
        assert labels.label(f"t{i}", named=frozenset(), limit=0, named_only=True) == OTHER_TENANT
    assert _folded(registry) == 0.0


def test_the_count_s_memory_is_bounded() -> None:
    registry = CollectorRegistry()
    labels = TenantLabels.of(registry)
    for i in range(FOLDED_TRACKED + 1000):
        labels.label(f"user-{i}", named=frozenset(), limit=0)
    assert _folded(registry) == float(FOLDED_TRACKED)
