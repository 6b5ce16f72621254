"""IGW-AU604: tenants do not share the model servers' prefix caches.

A prompt's cached prefix shows in its answer (vLLM's ``cached_tokens``) and its time to first token,
so on a shared cache one tenant can test whether another sent a given prefix.
``spec.extensions.authorization.prefixCacheIsolation: tenant`` salts each tenant's prompts
(:mod:`igw.gateway.cache_salt`); the price is that tenants no longer share cached system prompts,
hence a low-severity warning, not a failure.
"""

from __future__ import annotations

from collections.abc import Iterator

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity

META = CheckMeta(
    id="IGW-AU604",
    title="Prefix caches kept per tenant",
    command=Command.AUDIT,
    category="tenancy",
    severity=Severity.LOW,
    description="On a prefix cache every tenant shares, one tenant can tell from cached_tokens or the time "
    "to first token whether another sent a given prompt prefix (a system prompt, a document).",
    remediation="Set spec.extensions.authorization.prefixCacheIsolation: tenant (tenants then no longer "
    "share cached prefixes).",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    for config in need(ctx.inventory.kube.of("InferenceGatewayConfig")):
        authz = section(config, "extensions", "authorization") or {}
        isolation = authz.get("prefixCacheIsolation", "shared")
        if section(config, "auth", "jwt") is None:
            yield r.passed(ref(config), "no authentication: callers have no tenant to keep apart (IGW-AU602)")
        elif isolation == "tenant":
            yield r.passed(ref(config), "prefixCacheIsolation: tenant")
        else:
            yield r.warn(
                ref(config),
                "tenants share the model servers' prefix caches: one can tell whether another sent a "
                "prompt (authorization.prefixCacheIsolation is not 'tenant')",
            )


CHECK = FunctionCheck(META, _run)
