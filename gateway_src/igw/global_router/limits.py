"""Global rate limits per tenant *and model*, shared by every router replica through Redis.

Tenant-wide limits (``spec.rateLimits``) are enforced by the request guard exactly as in a tier-1
gateway (same settings, same buckets, same 429s). This module adds ``spec.modelRateLimits``: the
most specific entry for (tenant, model) applies - ``tenant+model``, ``tenant+*``, ``*+model``,
``*+*`` - with its own pair of token buckets keyed ``<keyPrefix><tenant>|model=<model>``, each part
escaped (:func:`igw.security.ratelimit.keys.model_key`: no tenant's own bucket, nor another pair's,
is that key; until session s44 tenant ``a|model=m``'s own bucket was tenant ``a``'s for ``m``). The
buckets are the tier-1 ones (:mod:`igw.security.ratelimit`: the same arithmetic in one Lua script
per decision, on Redis's clock), so replicas agree and limits mean the same at both tiers. When
Redis cannot answer, ``spec.rateLimits.onRedisUnavailable`` applies as in tier 1 (local buckets,
allow, deny), and the failure is counted as tier 1 counts its own
(``igw_ratelimit_backend_errors_total``, ``igw_ratelimit_backend_up``). Until session s38 it was
only logged: with ``modelRateLimits`` and no tenant-wide limit (whose limiter alone reported), the
router's per-model limits ran on each replica's local buckets (every replica admitting the whole
limit) while ``igw_ratelimit_backend_up`` said 1. Every limiter here shares one outage state with
the tenant-wide limiter (:class:`~igw.security.ratelimit.limiter.BackendOutage`): Redis failing is
met once per ``retryAfterFailure``, not once per limit (since session s43).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from igw.global_router.config import ModelLimit
from igw.security.clock import Clock
from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.backend import RateLimitBackend
from igw.security.ratelimit.keys import MODEL_PART, model_key, model_key_parts
from igw.security.ratelimit.limiter import BackendOutage, RateLimiter
from igw.security.ratelimit.local import LocalBuckets
from igw.security.ratelimit.registry import BACKENDS
from igw.security.settings import RateLimitSettings, TenantLimits

WILDCARD = "*"

TIER2_RESERVATIONS: Final = ("tier2",)
"""The scope of the router's tenant-wide reservations (:func:`~igw.security.ratelimit.keys.reservation_key`):
a response's id then ``tier2``, apart from the cluster gateway's own reservation of the same
response (the two may share a Redis key prefix)."""

MODEL_RESERVATIONS: Final = (*TIER2_RESERVATIONS, MODEL_PART)
"""The scope of the per-model limits' reservations: apart from the tenant-wide limits' too."""


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
    """Admission and accounting for ``spec.modelRateLimits``.

    Each entry gets a tier-1 :class:`~igw.security.ratelimit.limiter.RateLimiter` whose default limits
    are the entry's; all share one backend, so the unavailable policy, the local fallback and the 429s
    are exactly tier 1's. The bucket key names tenant and model (:meth:`bucket_key`).
    """

    def __init__(
        self,
        entries: Sequence[ModelLimit],
        *,
        settings: RateLimitSettings,
        clock: Clock,
        backend: RateLimitBackend | None = None,
        metrics: SecurityMetrics | None = None,
        outage: BackendOutage | None = None,
        tenant_limiter: RateLimiter | None = None,
    ) -> None:
        """``metrics``: the request guard's, where a shared backend's failures are counted (none
        where the backend is this replica's local buckets); ``outage``: the tenant-wide limiter's
        state of the same server (:class:`~igw.security.ratelimit.limiter.BackendOutage`, which
        then reports the failures), so that an outage costs a request one timeout, not one per
        limit, and is logged once. Without it the entries still share one among themselves.
        ``tenant_limiter``: the tenant-wide limiter (the router's request guard's), whose backend,
        fallback buckets and outage every entry then shares (``backend`` and ``outage`` unused), so
        that :meth:`admit` decides both limits in one step (:meth:`RateLimiter.admit_with`)."""
        self._entries = tuple(entries)
        self._tenant_limiter = tenant_limiter
        self._limiters: dict[tuple[str, str], RateLimiter]
        if tenant_limiter is not None:
            self._backend: RateLimitBackend | None = None  # the tenant-wide limiter's, closed with it
            self._limiters = {
                (e.tenant, e.model): tenant_limiter.sharing(
                    settings=replace(settings, default=_limits(e), tenants={}),
                    keys_encoded=True,
                    reservation_scope=MODEL_RESERVATIONS,
                )
                for e in self._entries
            }
            return
        own = backend if backend is not None else BACKENDS[settings.backend](settings, clock)
        self._backend = own
        if outage is None:
            reported = None if isinstance(own, LocalBuckets) else metrics
            outage = BackendOutage(name=own.name, settings=settings, clock=clock, metrics=reported)
        self._limiters = {
            (e.tenant, e.model): RateLimiter(
                settings=replace(settings, default=_limits(e), tenants={}),
                backend=own,
                clock=clock,
                outage=outage,
                keys_encoded=True,
                reservation_scope=MODEL_RESERVATIONS,
            )
            for e in self._entries
        }

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @staticmethod
    def bucket_key(tenant: str, model: str) -> str:
        """The (tenant, model) buckets' key, one to one (:func:`~igw.security.ratelimit.keys.model_key`)."""
        return model_key(tenant, model)

    def _limiter(self, tenant: str, model: str) -> RateLimiter | None:
        entry = resolve(self._entries, tenant=tenant, model=model)
        return None if entry is None else self._limiters[(entry.tenant, entry.model)]

    @property
    def decides_tenant_limits(self) -> bool:
        """Whether :meth:`admit` decides the tenant-wide limits too (built with ``tenant_limiter``)."""
        return self._tenant_limiter is not None

    async def admit(self, *, tenant: str, model: str, est_tokens: int) -> None:
        """Raise :class:`GuardDenied` (429 + ``Retry-After``) when over the (tenant, model) limit,
        or (:attr:`decides_tenant_limits`) the tenant-wide one, both decided in one step."""
        limiter = self._limiter(tenant, model)
        if self._tenant_limiter is not None:
            if limiter is None:
                await self._tenant_limiter.admit(tenant=tenant, est_tokens=est_tokens)
            else:
                await self._tenant_limiter.admit_with(
                    tenant=tenant,
                    est_tokens=est_tokens,
                    also=limiter,
                    also_key=self.bucket_key(tenant, model),
                )
        elif limiter is not None:
            await limiter.admit(tenant=self.bucket_key(tenant, model), est_tokens=est_tokens)

    async def account(
        self,
        *,
        tenant: str,
        model: str,
        tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
    ) -> None:
        """Debit ``tokens`` and ``reserved_tokens`` from the (tenant, model) buckets, the reserved
        ones held under ``reservation`` for :meth:`settle` (as tier 1's limiter holds them)."""
        limiter = self._limiter(tenant, model)
        if limiter is not None:
            await limiter.account(
                tenant=self.bucket_key(tenant, model),
                prompt_tokens=tokens,
                completion_tokens=0,
                reserved_tokens=reserved_tokens,
                reservation=reservation,
            )

    async def account_both(
        self,
        *,
        tenant: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
    ) -> None:
        """The tenant-wide limits' debit (the request guard's ``account``) and :meth:`account`'s, in
        one backend call (:meth:`RateLimiter.account_with`), where :attr:`decides_tenant_limits`."""
        if self._tenant_limiter is None:
            raise ValueError("account_both: built without the tenant-wide limiter")
        limiter = self._limiter(tenant, model)
        await self._tenant_limiter.account_with(
            tenant=tenant,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reserved_tokens=reserved_tokens,
            reservation=reservation,
            also=limiter,
            also_key=self.bucket_key(tenant, model),
        )

    async def settle(self, *, reservation: str, completion_tokens: int) -> None:
        """Settle what :meth:`account` held under ``reservation`` by ``completion_tokens``, with the
        limits of the (tenant, model) entry that held it (read back from its bucket key: a retrieval
        names no model)."""
        if not self._limiters:
            return
        first = next(iter(self._limiters.values()))  # all share the backend that holds it
        held = await first.release(reservation)
        if held is None:
            return
        limiter = self._settled_by(held[0])
        if limiter is not None:
            await limiter.settle_held(held, completion_tokens=completion_tokens)

    async def settle_both(self, *, reservation: str, completion_tokens: int) -> None:
        """The tenant-wide limits' settlement (the request guard's ``settle``) and :meth:`settle`'s,
        in two backend calls (:meth:`RateLimiter.settle_with`: both holds released in one, both
        settled in the other), where :attr:`decides_tenant_limits`."""
        if self._tenant_limiter is None:
            raise ValueError("settle_both: built without the tenant-wide limiter")
        await self._tenant_limiter.settle_with(
            reservation=reservation,
            completion_tokens=completion_tokens,
            also=next(iter(self._limiters.values()), None),  # all share the backend that holds it
            settled_by=self._settled_by,
        )

    def _settled_by(self, held_key: str) -> RateLimiter | None:
        """The limiter of the entry whose (tenant, model) bucket key is ``held_key``."""
        parts = model_key_parts(held_key)
        return None if parts is None else self._limiter(*parts)

    async def close(self) -> None:
        if self._backend is not None:
            await self._backend.close()
