"""When cert-manager renews a Certificate: read by the operator (a renewal that does not come) and
the audit (IGW-AU103, a renewal overdue), so both agree on the point.

cert-manager writes the point it will renew at into ``status.renewalTime``. Without it (a status not
yet written, an older cert-manager) the point follows cert-manager's own rule: ``spec.renewBefore``
before expiry when shorter than the lifetime, else ``spec.renewBeforePercentage`` of the lifetime
before expiry, else a third of the lifetime before expiry (two thirds into it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

RENEWAL_GRACE: Final = timedelta(hours=1)
"""How long past ``status.renewalTime`` a Certificate may still be renewing before the audit calls
the renewal overdue."""

_GO_GROUP: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (``2026-12-07T10:00:00Z``); ``None`` for
    anything else."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def parse_go_duration(value: object) -> timedelta | None:
    """A non-negative Go ``time.Duration`` as a ``metav1.Duration`` field holds it (``720h``,
    ``1h30m0s``, ``1.5h``, ``0``); ``None`` when it is not one."""
    if value == "0":
        return timedelta(0)
    if not isinstance(value, str) or not value:
        return None
    groups = _GO_GROUP.findall(value)
    if "".join(number + unit for number, unit in groups) != value:
        return None
    return timedelta(seconds=sum(float(number) * _GO_UNITS[unit] for number, unit in groups))


def renewal_time(
    certificate: Mapping[str, Any] | None, not_before: datetime | None, not_after: datetime | None
) -> datetime | None:
    """When cert-manager renews the certificate valid from ``not_before`` to ``not_after`` that the
    Certificate ``certificate`` (as read from the API) issued: its ``status.renewalTime`` when
    written, else cert-manager's rule (module docstring); ``None`` without the validity."""
    status = (certificate or {}).get("status") or {}
    written = parse_time(status.get("renewalTime")) if isinstance(status, Mapping) else None
    if written is not None:
        return written
    if not_before is None or not_after is None or not_after <= not_before:
        return None
    lifetime = not_after - not_before
    spec = (certificate or {}).get("spec") or {}
    spec = spec if isinstance(spec, Mapping) else {}
    before = parse_go_duration(spec.get("renewBefore"))
    percentage = spec.get("renewBeforePercentage")
    if before is not None and before < lifetime:
        return not_after - before
    if isinstance(percentage, int) and not isinstance(percentage, bool) and 0 < percentage < 100:
        return not_after - lifetime * percentage / 100
    return not_after - lifetime / 3
