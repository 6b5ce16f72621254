"""The bounded ``tenant`` label of the gateway's per-tenant metric families.

A tenant label value is a Prometheus series (and memory, and bytes of every ``/metrics`` page) for
the life of the process, and tenants come from places the operator does not bound: the
client-chosen ``x-gateway-inference-fairness-id`` header (flow control), or a verified token's
tenant claim, which with ``authorization.tenantClaim: sub`` is one tenant per user. Every family
labelled by tenant maps it through :class:`TenantLabels`:

- tenants the configuration *names* always get their own label (flow control's
  ``metrics.tenantLabels``; the tenants of ``rateLimits.tenants`` and ``rateLimits.anonymousTenant``);
- with ``named_only`` (flow control when ``tenantLabels`` is set) every other tenant is
  :data:`OTHER_TENANT`;
- otherwise the first ``limit`` distinct other tenants a process sees keep their name, later ones
  are :data:`OTHER_TENANT`. The names handed out are kept for the life of the process (across
  configuration reloads), so one tenant's series never switches label.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Final

OTHER_TENANT: Final = "other"
"""The ``tenant`` label of every tenant without a label of its own."""


class TenantLabels:
    """Maps tenants to a bounded set of ``tenant`` label values (module docstring)."""

    __slots__ = ("_given",)

    def __init__(self) -> None:
        self._given: set[str] = set()

    def label(self, tenant: str, *, named: Set[str], limit: int, named_only: bool = False) -> str:
        """``tenant`` when it is ``named`` or among the first ``limit`` others seen, else ``other``."""
        if tenant in named:
            return tenant
        if named_only:
            return OTHER_TENANT
        given = self._given
        if tenant in given:
            return tenant
        if len(given) < limit:
            given.add(tenant)
            return tenant
        return OTHER_TENANT
