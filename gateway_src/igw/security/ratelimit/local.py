"""In-process token buckets: the default backend, and the fallback while Redis is unreachable.

Limits are per gateway replica: with N replicas a tenant gets up to N times its limit. Use the
Redis backend for limits shared across replicas.
"""

from __future__ import annotations

from typing import Final

from igw.security.clock import Clock
from igw.security.ratelimit.backend import HOLD_TTL_S
from igw.security.ratelimit.buckets import Bucket, Decision, decide, token_rate
from igw.security.settings import TenantLimits

MAX_HELD: Final = 10_000
"""Most reservations one process keeps (about 240 bytes each with a minted id: 2.4 MB at the bound,
by ``tracemalloc``); past it the oldest is forgotten and keeps its whole charge. A settled one is
dropped at once, so only responses nobody polls accumulate."""


class LocalBuckets:
    name = "local"

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._requests: dict[str, Bucket] = {}
        self._tokens: dict[str, Bucket] = {}
        self._held: dict[str, tuple[str, int, float]] = {}
        """Reservation key -> tenant, tokens, expiry (:meth:`hold`), oldest first."""

    def _bucket(self, table: dict[str, Bucket], tenant: str, *, rate: float, capacity: float) -> Bucket:
        now = self._clock()
        bucket = table.get(tenant)
        if bucket is None:
            bucket = table[tenant] = Bucket(level=capacity, updated_at=now)
        else:
            bucket.refill(now=now, rate=rate, capacity=capacity)
        return bucket

    async def admit(self, *, tenant: str, limits: TenantLimits, est_tokens: int | None) -> Decision:
        requests = tokens = None
        if limits.requests_per_second is not None:
            requests = self._bucket(
                self._requests, tenant, rate=limits.requests_per_second, capacity=limits.request_capacity
            )
        if limits.tokens_per_minute is not None and est_tokens is not None:
            tokens = self._bucket(
                self._tokens, tenant, rate=token_rate(limits), capacity=limits.token_capacity
            )
        return decide(limits=limits, requests=requests, tokens=tokens, est_tokens=est_tokens or 0)

    async def account(self, *, tenant: str, limits: TenantLimits, tokens: int) -> None:
        if limits.tokens_per_minute is None or tokens == 0:
            return
        bucket = self._bucket(self._tokens, tenant, rate=token_rate(limits), capacity=limits.token_capacity)
        bucket.level -= tokens  # a credit (negative) fills it at most to capacity: refill caps it

    async def hold(self, *, key: str, tenant: str, tokens: int) -> None:
        held = self._held
        if key in held:  # the first holds (see RateLimitBackend.hold)
            return
        while len(held) >= MAX_HELD:
            del held[next(iter(held))]
        held[key] = (tenant, tokens, self._clock() + HOLD_TTL_S)

    async def release(self, key: str) -> tuple[str, int] | None:
        found = self._held.pop(key, None)
        if found is None or found[2] < self._clock():
            return None
        return found[0], found[1]

    async def close(self) -> None:
        return None
