"""IGW-AU601: rate limits are set (``spec.extensions.rateLimits``) so one client cannot starve the rest.

An entry limits only with a rate (``requestsPerSecond`` or ``tokensPerMinute``): ``burst`` and
``tokenBurst`` alone size buckets that are never used, and the gateway serves such a tenant without
limit (``TenantLimits.limited``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU601",
    title="Rate limits configured",
    command=Command.AUDIT,
    category="tenancy",
    severity=Severity.MEDIUM,
    description="Without limits a single tenant (or a leaked token) can saturate every GPU behind the "
    "gateway.",
    remediation="Set spec.extensions.rateLimits.default (requestsPerSecond/tokensPerMinute) and per-tenant "
    "entries.",
)

RATES: Final = ("requestsPerSecond", "tokensPerMinute")
"""The fields that make a limits entry limit anything."""


def limits(entry: Any) -> bool:
    """Whether a ``default`` or ``tenants[]`` entry sets a rate (a bucket size alone limits nothing)."""
    return isinstance(entry, Mapping) and any(entry.get(rate) is not None for rate in RATES)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        settings = section(config, "extensions", "rateLimits") or {}
        tenants = [t for t in settings.get("tenants") or [] if limits(t)]
        if not (limits(settings.get("default")) or tenants):
            yield r.warn(
                ref(config),
                "no rate limits (no requestsPerSecond or tokensPerMinute in "
                "spec.extensions.rateLimits.default/tenants)",
            )
        elif settings.get("backend") == "redis" and settings.get("onRedisUnavailable") == "allow":
            yield r.warn(
                ref(config),
                "rate limits fail open when Redis is unavailable (onRedisUnavailable: allow)",
                severity=Severity.LOW,
            )
        else:
            default = "default limits" if limits(settings.get("default")) else "no default limits"
            yield r.passed(ref(config), f"{default}{f' and {len(tenants)} tenant(s)' if tenants else ''}")


CHECK = FunctionCheck(META, _run)
