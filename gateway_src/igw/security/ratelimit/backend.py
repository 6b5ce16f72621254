"""The rate-limit backend interface and its one registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from igw.security.clock import Clock
from igw.security.ratelimit.buckets import Decision
from igw.security.settings import RateLimitSettings, TenantLimits


class BackendUnavailable(Exception):
    """The backend could not decide (Redis down or slow); the limiter applies its unavailable policy."""


class RateLimitBackend(Protocol):
    name: str

    async def admit(self, *, tenant: str, limits: TenantLimits, est_tokens: int) -> Decision: ...

    async def account(self, *, tenant: str, limits: TenantLimits, tokens: int) -> None: ...

    async def close(self) -> None: ...


BackendFactory = Callable[[RateLimitSettings, Clock], RateLimitBackend]


def _local(settings: RateLimitSettings, clock: Clock) -> RateLimitBackend:
    from igw.security.ratelimit.local import LocalBuckets

    return LocalBuckets(clock=clock)


def _redis(settings: RateLimitSettings, clock: Clock) -> RateLimitBackend:
    from igw.security.ratelimit.redis_backend import RedisBuckets

    return RedisBuckets(settings=settings.redis)


BACKENDS: Final[dict[str, BackendFactory]] = {"local": _local, "redis": _redis}
