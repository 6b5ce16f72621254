"""Token-bucket arithmetic and the admission rule, in one place so both backends agree.

Two buckets per tenant:

- **requests**: capacity ``burst``, refilled at ``requestsPerSecond``; each admitted request takes 1.
- **tokens**: capacity ``tokenBurst`` (default one minute's worth), refilled at ``tokensPerMinute / 60``
  per second. Admission does not take tokens (the real count is only known from the response's
  ``usage``); it requires the bucket to hold at least ``max(1, min(estimate, capacity))``. After
  the response, the actual prompt + completion tokens are debited, which may drive the bucket
  negative: the tenant then waits until it refills (the debt is paid, not forgotten).

When the token bucket refuses, the request bucket is left untouched. ``Retry-After`` is the time
until the refusing bucket holds what was asked, at its refill rate.

The Redis backend implements exactly this in Lua (``igw.security.ratelimit.redis_backend``); the tests run
the same cases against both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from igw.security.settings import TenantLimits

LimitName = Literal["requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: LimitName | None = None
    retry_after_s: float = 0.0


ALLOW = Decision(allowed=True)


@dataclass(slots=True)
class Bucket:
    level: float
    updated_at: float

    def refill(self, *, now: float, rate: float, capacity: float) -> None:
        """Refill to ``now``: ``min(capacity, level + max(0, now - updated_at) * rate)``, and
        ``updated_at`` to ``max(updated_at, now)``. Written as comparisons that pick what ``min``
        and ``max`` pick (the first argument unless the other is smaller, or larger): the
        builtins' generic argument handling cost more than the arithmetic, on every admitted and
        accounted request (round 28 in docs/gateway.md)."""
        updated_at = self.updated_at
        elapsed = now - updated_at
        level = self.level + (elapsed if elapsed > 0.0 else 0.0) * rate
        self.level = level if level < capacity else capacity
        if now > updated_at:
            self.updated_at = now


def token_rate(limits: TenantLimits) -> float:
    return 0.0 if limits.tokens_per_minute is None else limits.tokens_per_minute / 60.0


def tokens_needed(limits: TenantLimits, est_tokens: int) -> float:
    """``max(1, min(max(0, est_tokens), int(token_capacity)))`` as a float, compared as
    :meth:`Bucket.refill` is."""
    capacity = int(limits.token_capacity)
    need = est_tokens if est_tokens > 0 else 0
    if capacity < need:
        need = capacity
    return float(need if need > 1 else 1)


def decide(
    *,
    limits: TenantLimits,
    requests: Bucket | None,
    tokens: Bucket | None,
    est_tokens: int,
    take: bool = True,
) -> Decision:
    """Apply the admission rule to already-refilled buckets, taking one request token if admitted
    (``take``; else the caller takes it, once every limit a request meets has admitted it)."""
    if tokens is not None:
        need = tokens_needed(limits, est_tokens)
        if tokens.level < need:
            return Decision(
                allowed=False, limit="tokens", retry_after_s=(need - tokens.level) / token_rate(limits)
            )
    if requests is not None:
        assert limits.requests_per_second is not None
        if requests.level < 1.0:
            return Decision(
                allowed=False,
                limit="requests",
                retry_after_s=(1.0 - requests.level) / limits.requests_per_second,
            )
        if take:
            requests.level -= 1.0
    return ALLOW
