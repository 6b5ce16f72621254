"""Global rate limits per tenant *and model*, shared by every router replica through Redis.

Tenant-wide limits (``spec.rateLimits``) are enforced by the request guard exactly as in a tier-1
gateway (same settings, same buckets, same 429s). This module adds ``spec.modelRateLimits``: the
most specific entry for (tenant, model) applies - ``tenant+model``, ``tenant+*``, ``*+model``,
``*+*`` - with its own pair of token buckets keyed ``<keyPrefix>m:<tenant>|<model>``. The buckets are
the tier-1 ones (:mod:`igw.security.ratelimit`: the same arithmetic in one Lua script per decision,
on Redis's clock), so replicas agree and limits mean the same at both tiers. When Redis cannot
answer, ``spec.rateLimits.onRedisUnavailable`` applies as in tier 1 (local buckets, allow, deny).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from igw.gateway.guards import GuardDenied
from igw.global_router.config import ModelLimit
from igw.security.clock import Clock
from igw.security.denials import limiter_unavailable, rate_limited
from igw.security.ratelimit.backend import BACKENDS, BackendUnavailable, RateLimitBackend
from igw.security.ratelimit.buckets import Decision
from igw.security.ratelimit.local import LocalBuckets
from igw.security.settings import RateLimitSettings, TenantLimits

log = logging.getLogger("igw.global_router")

WILDCARD = "*"


def resolve(entries: Sequence[ModelLimit], *, tenant: str, model: str) -> ModelLimit | None:
    """The most specific entry for (tenant, model), or ``None``."""
    table = {(e.tenant, e.model): e for e in entries}
    for key in ((tenant, model), (tenant, WILDCARD), (WILDCARD, model), (WILDCARD, WILDCARD)):
        if key in table:
            return table[key]
    return None


def _limits(entry: ModelLimit) -> TenantLimits:
    return TenantLimits(
        requests_per_second=entry.requests_per_second,
        burst=entry.burst,
        tokens_per_minute=entry.tokens_per_minute,
        token_burst=entry.token_burst,
    )


class ModelRateLimits:
    """Admission and accounting for ``spec.modelRateLimits``."""

    def __init__(
        self,
        entries: Sequence[ModelLimit],
        *,
        settings: RateLimitSettings,
        clock: Clock,
        backend: RateLimitBackend | None = None,
    ) -> None:
        self._entries = tuple(entries)
        self._settings = settings
        self._clock = clock
        self._backend = backend if backend is not None else BACKENDS[settings.backend](settings, clock)
        self._fallback = LocalBuckets(clock=clock)
        self._down_until = float("-inf")

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @staticmethod
    def bucket_key(tenant: str, model: str) -> str:
        return f"m:{tenant}|{model}"

    async def admit(self, *, tenant: str, model: str, est_tokens: int) -> None:
        """Raise :class:`GuardDenied` (429 + ``Retry-After``) when over the (tenant, model) limit."""
        entry = resolve(self._entries, tenant=tenant, model=model)
        if entry is None:
            return
        limits = _limits(entry)
        if not limits.limited:
            return
        decision = await self._decide(self.bucket_key(tenant, model), limits, est_tokens)
        if decision is None:
            raise limiter_unavailable(tenant=tenant)
        if not decision.allowed:
            assert decision.limit is not None
            denied = rate_limited(tenant=tenant, limit=decision.limit, retry_after_s=decision.retry_after_s)
            raise GuardDenied(
                status=denied.status,
                message=f"{denied.message} on model {model!r}",
                error_type=denied.error_type,
                code=denied.code,
                headers=denied.headers,
            )

    async def account(self, *, tenant: str, model: str, tokens: int) -> None:
        entry = resolve(self._entries, tenant=tenant, model=model)
        if entry is None or entry.tokens_per_minute is None or tokens <= 0:
            return
        key, limits = self.bucket_key(tenant, model), _limits(entry)
        if self._clock() >= self._down_until:
            try:
                await self._backend.account(tenant=key, limits=limits, tokens=tokens)
                return
            except BackendUnavailable as exc:
                self._failed(exc)
        if self._settings.on_redis_unavailable == "local":
            await self._fallback.account(tenant=key, limits=limits, tokens=tokens)

    async def _decide(self, key: str, limits: TenantLimits, est_tokens: int) -> Decision | None:
        if self._clock() >= self._down_until:
            try:
                return await self._backend.admit(tenant=key, limits=limits, est_tokens=est_tokens)
            except BackendUnavailable as exc:
                self._failed(exc)
        policy = self._settings.on_redis_unavailable
        if policy == "allow":
            return Decision(allowed=True)
        if policy == "deny":
            return None
        return await self._fallback.admit(tenant=key, limits=limits, est_tokens=est_tokens)

    def _failed(self, exc: BackendUnavailable) -> None:
        if self._clock() >= self._down_until:
            log.error("model rate-limit backend unavailable (%s); onRedisUnavailable applies", exc)
        self._down_until = self._clock() + self._settings.redis.retry_after_failure_s

    async def close(self) -> None:
        await self._backend.close()
