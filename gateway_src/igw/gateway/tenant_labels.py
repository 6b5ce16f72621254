"""The bounded ``tenant`` label of the gateway's per-tenant metric families.

A tenant label value is a Prometheus series (and memory, and bytes of every ``/metrics`` page) for
the life of the process, and tenants come from places the operator does not bound: the
client-chosen ``x-gateway-inference-fairness-id`` header (flow control), or a verified token's
tenant claim, which with ``authorization.tenantClaim: sub`` is one tenant per user. Every family
labelled by tenant maps it through :class:`TenantLabels`:

- tenants the configuration *names* always get their own label (flow control's
  ``metrics.tenantLabels``; the tenants of ``rateLimits.tenants`` and ``rateLimits.anonymousTenant``);
- with ``named_only`` (flow control when ``tenantLabels`` is set) a tenant no family has given a
  label of its own is :data:`OTHER_TENANT`;
- otherwise the first ``limit`` distinct other tenants a process sees keep their name, later ones
  are :data:`OTHER_TENANT`. The names handed out are kept for the life of the process (across
  configuration reloads), so one tenant's series never switches label.

The families exported on one ``/metrics`` page agree: they share one instance per Prometheus
registry (:meth:`TenantLabels.of`), so a tenant named, or given a label, by one family (flow
control's ``igw_flow_rejections_total``, the security guard's ``igw_tenant_*_total``) has it in the
other too, and ``other`` means the same tenants in every family. Before session s39 each family kept
its own instance: a tenant could be ``acme`` in one and ``other`` in the other, and a dashboard
joining them on ``tenant`` was wrong.

:data:`OTHER_TENANT` is the overflow alone: a real tenant whose name is ``other``, or starts with
:data:`ESCAPE`, is labelled with :data:`ESCAPE` prepended (``other`` -> ``~other``, ``~x`` -> ``~~x``),
an injective mapping. Before session s39 a tenant named ``other`` shared the overflow's series.

Callers without a tenant are one tenant, named :func:`anonymous_tenant` (``rateLimits.anonymousTenant``,
default ``anonymous``) in every family and in the access log. Before session s40 flow control labelled
them ``""`` (no label, to Prometheus), or ``other`` with ``tenantLabels`` set, while the security
families said ``anonymous``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Set
from typing import Any, Final

from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

OTHER_TENANT: Final = "other"
"""The ``tenant`` label of every tenant without a label of its own (and of no real tenant)."""
ESCAPE: Final = "~"
"""Prepended to the label of a real tenant named :data:`OTHER_TENANT` or starting with it."""

FOLDED_TRACKED: Final = 4096
"""Most distinct tenants folded into :data:`OTHER_TENANT` that ``igw_tenant_labels_folded_total``
counts (4x the schema's ``maxTenantLabels`` maximum of 1,000): each is remembered as its 64-bit hash
(about 100 bytes, whatever the name's length), so a claim per user costs a bounded set."""

ANONYMOUS_TENANT: Final = "anonymous"
"""``spec.extensions.rateLimits.anonymousTenant`` when not set."""


def anonymous_tenant(extensions: Mapping[str, Any]) -> str:
    """The name of the tenant of callers without one: ``rateLimits.anonymousTenant`` of the config's
    ``spec.extensions`` (the rate limiter's bucket key), else :data:`ANONYMOUS_TENANT`."""
    limits = extensions.get("rateLimits")
    name = limits.get("anonymousTenant") if isinstance(limits, Mapping) else None
    return str(name) if name else ANONYMOUS_TENANT


_SHARED: weakref.WeakKeyDictionary[object, TenantLabels] = weakref.WeakKeyDictionary()


def is_plain(tenant: str) -> bool:
    """Whether ``tenant``'s own label is ``tenant`` itself (no escape): a cache keyed by label may be
    looked up by such a tenant directly."""
    return tenant != OTHER_TENANT and not tenant.startswith(ESCAPE)


def _own(tenant: str) -> str:
    return tenant if is_plain(tenant) else ESCAPE + tenant


class TenantLabels:
    """Maps tenants to a bounded set of ``tenant`` label values (module docstring)."""

    __slots__ = ("_folded", "_given", "_named")

    def __init__(self) -> None:
        self._folded: set[int] = set()
        """Hashes of the distinct tenants folded into ``other`` because ``limit`` was reached (not
        ``named_only``'s, which raising ``maxTenantLabels`` would not name), at most
        :data:`FOLDED_TRACKED`. Counting folded requests instead would say nothing new: that is
        ``igw_tenant_requests_total{tenant="other"}``; how many tenants lack a label is what sizes
        ``maxTenantLabels``."""
        self._given: set[str] = set()
        """Tenants given a label of their own first come, first served (bounded by ``limit``)."""
        self._named: set[str] = set()
        """Tenants some family's configuration named (bounded by the configurations)."""

    @classmethod
    def of(cls, registry: object) -> TenantLabels:
        """The instance every tenant-labelled family registered on ``registry`` shares (one
        ``/metrics`` page, one mapping); created on first use, gone with the registry."""
        found = _SHARED.get(registry)
        if found is None:
            found = _SHARED[registry] = cls()
            if isinstance(registry, CollectorRegistry):
                registry.register(_FoldedCollector(found))
        return found

    @property
    def folded(self) -> int:
        """Distinct tenants counted as ``other`` because the first-come labels ran out (exact up to
        :data:`FOLDED_TRACKED`, then it stays there: "at least"; a 64-bit hash collision, about one
        in 10^12 at that size, would under-count by one)."""
        return len(self._folded)

    def name(self, tenants: Set[str]) -> None:
        """Record tenants a family's configuration names (at start-up and on reload), so the other
        families label them by name from their first request, not only after this family's first."""
        self._named.update(tenants)

    def label(self, tenant: str, *, named: Set[str], limit: int, named_only: bool = False) -> str:
        """``tenant``'s own label when any family named it or gave it one, or when it is among the
        first ``limit`` others seen (not with ``named_only``); else :data:`OTHER_TENANT`."""
        if tenant in named:
            self._named.add(tenant)
            return _own(tenant)
        if tenant in self._named or tenant in self._given:
            return _own(tenant)
        if not named_only:
            if len(self._given) < limit:
                self._given.add(tenant)
                return _own(tenant)
            if len(self._folded) < FOLDED_TRACKED:
                self._folded.add(hash(tenant))
        return OTHER_TENANT


@mypyc_attr(native_class=False)  # mypyc: it subclasses prometheus_client's, so it stays a Python class
class _FoldedCollector(Collector):
    """``igw_tenant_labels_folded_total`` of one registry's :class:`TenantLabels` (both tiers)."""

    def __init__(self, labels: TenantLabels) -> None:
        self._labels = labels

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "igw_tenant_labels_folded",
            "Distinct tenants counted as tenant=other because the first maxTenantLabels labels were "
            f"taken (counted up to {FOLDED_TRACKED}); above 0, raise maxTenantLabels to name them.",
            value=self._labels.folded,
        )
