"""IGW-AU601: rate limits are set (``spec.extensions.rateLimits``) so one client cannot starve the rest."""

from __future__ import annotations

from collections.abc import Iterator

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


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        limits = section(config, "extensions", "rateLimits")
        if limits is None or not (limits.get("default") or limits.get("tenants")):
            yield r.warn(ref(config), "no rate limits (spec.extensions.rateLimits.default/tenants)")
        elif limits.get("backend") == "redis" and limits.get("onRedisUnavailable") == "allow":
            yield r.warn(
                ref(config),
                "rate limits fail open when Redis is unavailable (onRedisUnavailable: allow)",
                severity=Severity.LOW,
            )
        else:
            tenants = len(limits.get("tenants") or [])
            yield r.passed(ref(config), f"default limits{f' and {tenants} tenant(s)' if tenants else ''}")


CHECK = FunctionCheck(META, _run)
