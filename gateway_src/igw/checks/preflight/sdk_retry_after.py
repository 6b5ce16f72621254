"""IGW-PF032: the ``Retry-After`` the gateway can send stays within what the official SDKs honour.

The OpenAI Python SDK (3.x) honours a ``Retry-After`` (or its own ``retry-after-ms``, read first) of
at most :data:`OPENAI_MAX_RETRY_AFTER_S` (its ``MAX_RETRY_AFTER_DELAY``); above that it does not
retry at all: the 429/503 is raised at once, the wait is lost, and an application that loops on the
error comes straight back. The Anthropic SDK (2.x) has no cap and sleeps whatever it is told before
each retry. Older releases of both capped at :data:`LEGACY_MAX_RETRY_AFTER_S` and retried after their
own backoff (at most 8 s) instead (not warned about: the SDKs this project tests are the current
ones). The configured values behind the waits the gateway sends are judged here:
``routing.retryAfter.maxSeconds`` (a saturated pool's, a shed request's, an empty pool's
``Retry-After``; maxSeconds is also what is sent before any completion is seen) and a rate-limit
entry whose bucket takes longer than that to refill what one request needs (``1/requestsPerSecond``;
``tokenBurst`` at ``tokensPerMinute``), spread as :func:`igw.security.denials.rate_limited` spreads it.
A GlobalRouterConfig's rate limits are refused by the same limiter with the same spread, so its
``spec.rateLimits`` (``default``, ``tenants``) and ``spec.modelRateLimits`` entries are judged the same
way (until session s49 the router was not judged). The router's other waits are fixed, not configured:
``no_healthy_cluster`` sends 1 s spread to at most :data:`ROUTER_FIXED_RETRY_AFTER_S`, and a refusal
relayed from the clusters carries the soonest of their tier-1 values (judged on their configs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.igwc import section
from igw.checks.inventory import Missing, need
from igw.checks.k8s import ref, spec
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.scheduling.retry_spread import SPREAD_FRACTION
from igw.scheduling.settings import DEFAULT_RETRY_AFTER_MAX_SECONDS

OPENAI_MAX_RETRY_AFTER_S: Final = 120
"""The OpenAI Python SDK's ``MAX_RETRY_AFTER_DELAY`` (3.x): a longer ``Retry-After`` is not retried."""
LEGACY_MAX_RETRY_AFTER_S: Final = 60
"""The cap of older OpenAI/Anthropic SDK releases, above which they used their own backoff (<= 8 s);
named in the description only."""

ROUTER_FIXED_RETRY_AFTER_S: Final = 2
"""The longest ``Retry-After`` of the global router's ``no_healthy_cluster`` (1 s, spread by
:func:`igw.scheduling.retry_spread.spread_retry_after`); named in the pass message."""

META = CheckMeta(
    id="IGW-PF032",
    title="Retry-After within what the OpenAI and Anthropic SDKs honour",
    command=Command.PREFLIGHT,
    category="configuration",
    severity=Severity.MEDIUM,
    description="The OpenAI Python SDK does not retry a 429/503 whose Retry-After (or retry-after-ms) is "
    f"over {OPENAI_MAX_RETRY_AFTER_S} s: it raises at once; the Anthropic SDK sleeps any Retry-After; older "
    f"releases of both ignored one over {LEGACY_MAX_RETRY_AFTER_S} s and retried after at most 8 s.",
    remediation=f"Keep spec.extensions.routing.retryAfter.maxSeconds at or below {OPENAI_MAX_RETRY_AFTER_S} "
    f"({LEGACY_MAX_RETRY_AFTER_S} where older SDKs call the gateway), and rate limits (the gateway's, a "
    "GlobalRouterConfig's rateLimits and modelRateLimits) whose bucket refills what one request needs "
    "within that time.",
)

_CONSEQUENCE: Final = (
    f"the OpenAI Python SDK (Retry-After cap {OPENAI_MAX_RETRY_AFTER_S} s) raises such a 429 at once "
    "without retrying, the Anthropic SDK (no cap) sleeps the whole wait before each retry"
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def rate_limit_waits(entry: Any) -> Iterator[tuple[str, float]]:
    """The longest ``Retry-After`` (seconds) each rate of a limits entry can send from an empty
    bucket, by field: a request token takes ``1/requestsPerSecond``; a request needing up to
    ``tokenBurst`` tokens (default ``tokensPerMinute``) takes ``tokenBurst/tokensPerMinute`` minutes.
    A response's debt can make the token wait longer still; that is not known from the config."""
    if not isinstance(entry, Mapping):
        return
    rps = _number(entry.get("requestsPerSecond"))
    if rps is not None and rps > 0:
        yield "requestsPerSecond", _spread_top(1.0 / rps)
    tpm = _number(entry.get("tokensPerMinute"))
    if tpm is not None and tpm > 0:
        burst = _number(entry.get("tokenBurst"))
        yield "tokenBurst", _spread_top(60.0 * (burst if burst is not None else tpm) / tpm)


def _spread_top(wait_s: float) -> float:
    """The longest ``Retry-After`` a rate-limit wait of ``wait_s`` is sent as (whole seconds, spread
    up to :data:`SPREAD_FRACTION` more, at least 1 s more; a rate limit's has no upper bound)."""
    whole = max(1, math.ceil(wait_s))
    return float(whole + max(1, int(whole * SPREAD_FRACTION)))


def _limit_waits(limits: Mapping[str, Any], path: str) -> Iterator[tuple[str, float]]:
    """``(config path, longest Retry-After)`` of a rate-limits block's ``default`` and ``tenants``."""
    for field, wait in rate_limit_waits(limits.get("default")):
        yield f"{path}.default.{field}", wait
    tenants = limits.get("tenants")
    for index, entry in enumerate(tenants if isinstance(tenants, list) else ()):
        for field, wait in rate_limit_waits(entry):
            yield f"{path}.tenants[{index}].{field}", wait


def _gateway_waits(config: Any) -> Iterator[tuple[str, float]]:
    """``(config path, longest Retry-After in seconds)`` for every configured source of one."""
    retry_after = section(config, "extensions", "routing", "retryAfter") or {}
    max_s = _number(retry_after.get("maxSeconds"))
    yield (
        "spec.extensions.routing.retryAfter.maxSeconds",
        max_s if max_s is not None else float(DEFAULT_RETRY_AFTER_MAX_SECONDS),
    )
    yield from _limit_waits(section(config, "extensions", "rateLimits") or {}, "spec.extensions.rateLimits")


def _router_waits(config: Any) -> Iterator[tuple[str, float]]:
    """A GlobalRouterConfig's: its tenant limits (``spec.rateLimits``) and (tenant, model) limits."""
    yield from _limit_waits(section(config, "rateLimits") or {}, "spec.rateLimits")
    entries = spec(config).get("modelRateLimits")
    for index, entry in enumerate(entries if isinstance(entries, list) else ()):
        for field, wait in rate_limit_waits(entry):
            yield f"spec.modelRateLimits[{index}].{field}", wait


_SOURCES: Final[Mapping[str, tuple[Callable[[Any], Iterator[tuple[str, float]]], str]]] = {
    "InferenceGatewayConfig": (_gateway_waits, ""),
    "GlobalRouterConfig": (
        _router_waits,
        f" (no_healthy_cluster's is fixed at {ROUTER_FIXED_RETRY_AFTER_S} s at most)",
    ),
}


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    found_kinds = {kind: ctx.inventory.kube.of(kind) for kind in _SOURCES}
    if all(isinstance(configs, Missing) for configs in found_kinds.values()):
        need(found_kinds["InferenceGatewayConfig"])  # skipped, with the source's reason
    for kind, configs in found_kinds.items():
        waits, fixed = _SOURCES[kind]
        for config in configs if isinstance(configs, list) else ():
            found = False
            for path, wait in waits(config):
                if wait > OPENAI_MAX_RETRY_AFTER_S:
                    found = True
                    yield r.warn(ref(config), f"{path}: a Retry-After of up to {wait:g} s; {_CONSEQUENCE}")
            if not found:
                yield r.passed(
                    ref(config),
                    f"every configured Retry-After is at most {OPENAI_MAX_RETRY_AFTER_S} s{fixed}",
                )


CHECK = FunctionCheck(META, _run)
