"""The ONE registry of rate-limit backends: ``spec.extensions.rateLimits.backend`` names an entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from igw.security.clock import Clock
from igw.security.ratelimit.backend import RateLimitBackend
from igw.security.ratelimit.local import LocalBuckets
from igw.security.ratelimit.redis_backend import RedisBuckets
from igw.security.settings import RateLimitSettings

BackendFactory = Callable[[RateLimitSettings, Clock], RateLimitBackend]


def _local(settings: RateLimitSettings, clock: Clock) -> RateLimitBackend:
    return LocalBuckets(clock=clock)


def _redis(settings: RateLimitSettings, clock: Clock) -> RateLimitBackend:
    return RedisBuckets(settings=settings.redis)


BACKENDS: Final[dict[str, BackendFactory]] = {"local": _local, "redis": _redis}
