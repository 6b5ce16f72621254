"""In-process token buckets: the default backend, and the fallback while Redis is unreachable.

Limits are per gateway replica: with N replicas a tenant gets up to N times its limit. Use the
Redis backend for limits shared across replicas.

Memory follows the tenants *in debt*, not every tenant ever seen. A bucket that has refilled to its
capacity decides exactly as a missing one (which starts full), so full buckets are dropped, as the
Redis backend lets its keys expire when full: each table is swept when it has doubled since the
last sweep (amortised O(1) per request, never below :data:`SWEEP_FLOOR` entries) and every
:data:`SWEEP_INTERVAL_S`. With the
tenant claim ``sub`` (a bucket per user) 200,000 users each sending one request kept 200,000
buckets per table before session s39.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from igw.gateway.log_throttle import RepeatThrottle
from igw.security.clock import Clock
from igw.security.ratelimit.backend import HOLD_TTL_S
from igw.security.ratelimit.buckets import ALLOW, Bucket, Decision, decide, token_rate
from igw.security.settings import TenantLimits

MAX_HELD: Final = 10_000
"""Most reservations one process keeps; past it one is forgotten, or the new one is not kept, and
keeps its whole charge (:class:`_Holds`: an expired one first, else the oldest of the tenant
holding the most if it holds at least two more than the new one's tenant, else that tenant's own
oldest, else none). A settled one is dropped at once, so only responses nobody polls accumulate."""

refused_log = logging.getLogger("igw.security.ratelimit.holds_refused")
"""The WARNING of a hold :class:`_Holds` did not keep: one line a minute, the rest counted on the
next (:class:`~igw.gateway.log_throttle.RepeatThrottle`); the metric counts every one."""
refused_log.addFilter(RepeatThrottle())

SWEEP_FLOOR: Final = 1024
"""A table is not swept for its size below this many buckets (a sweep costs one pass over the table)."""

SWEEP_INTERVAL_S: Final = 30.0
"""A table is also swept when this long has passed since its last sweep, so what a burst of new
tenants left behind goes once they have refilled, even if no further tenant arrives."""


@dataclass(slots=True)
class _KeptBucket(Bucket):
    """A bucket with the rate and capacity it was last refilled at, so a sweep can tell it is full."""

    rate: float = 0.0
    capacity: float = 0.0

    def full(self, now: float) -> bool:
        """Whether :meth:`Bucket.refill` at ``now`` would leave it at its capacity (the same
        arithmetic: ``min(capacity, level + elapsed * rate) == capacity``), so dropping it changes
        no decision; a bucket last touched after ``now`` (a clock stepped back) is kept."""
        return self.updated_at <= now and self.level + (now - self.updated_at) * self.rate >= self.capacity


class _Table:
    """One kind of bucket (requests or tokens) per tenant, its full buckets swept (module docstring)."""

    __slots__ = ("buckets", "sweep_at", "sweep_due")

    def __init__(self) -> None:
        self.buckets: dict[str, _KeptBucket] = {}
        self.sweep_at = SWEEP_FLOOR
        self.sweep_due = float("-inf")

    def get(self, tenant: str, *, now: float, rate: float, capacity: float) -> Bucket:
        if now >= self.sweep_due:
            self.sweep(now)
        bucket = self.buckets.get(tenant)
        if bucket is not None:
            bucket.refill(now=now, rate=rate, capacity=capacity)
            bucket.rate, bucket.capacity = rate, capacity
            return bucket
        if len(self.buckets) >= self.sweep_at:
            self.sweep(now)
        bucket = self.buckets[tenant] = _KeptBucket(
            level=capacity, updated_at=now, rate=rate, capacity=capacity
        )
        return bucket

    def sweep(self, now: float) -> None:
        """Drop the full buckets; the next sweep waits until the table has doubled again or
        :data:`SWEEP_INTERVAL_S` has passed."""
        self.buckets = {tenant: b for tenant, b in self.buckets.items() if not b.full(now)}
        self.sweep_at = max(SWEEP_FLOOR, 2 * len(self.buckets))
        self.sweep_due = now + SWEEP_INTERVAL_S


class _Holds:
    """The reservations :meth:`LocalBuckets.hold` keeps, at most :data:`MAX_HELD`, each step O(1).

    When full, a new hold makes room by dropping, in this order: the oldest hold if it has expired
    (it settles nothing any more); the oldest hold of a tenant holding the most, if that is at
    least two more than the new hold's tenant holds; that tenant's own oldest hold; and when the
    tenant holds none, nothing: the new hold is not kept (its tenant keeps the whole charge, as an
    evicted one would). So a tenant's hold goes to another tenant's only when the other holds at
    least two fewer, and no tenant's last hold ever goes to another's: however many tenant ids an
    attacker has, each of its tenants holding one takes no other tenant's hold, and a full table
    of them refuses new tenants until their holds settle or expire (:data:`HOLD_TTL_S`), instead of
    forgetting those already held. Until session s44 the oldest hold of any tenant went (one
    tenant's 10,000 one-token holds forgot another's 100,000-token one, which then stayed charged
    its whole bound); until session s45 the oldest of the tenant holding the most went even when
    every tenant held one (10,000 tenant ids of one hold each forgot every other tenant's)."""

    __slots__ = ("by_count", "by_tenant", "held", "most")

    def __init__(self) -> None:
        self.held: OrderedDict[str, tuple[str, int, float]] = OrderedDict()
        """Reservation key -> tenant, tokens, expiry, oldest first (``OrderedDict``: dropping the
        oldest is O(1), where a ``dict``'s first key is found past the holes its deletions left)."""
        self.by_tenant: dict[str, OrderedDict[str, None]] = {}
        """Tenant -> its reservation keys, oldest first (no empty entry)."""
        self.by_count: dict[int, dict[str, None]] = {}
        """How many holds -> the tenants holding that many (no empty entry)."""
        self.most = 0
        """The most holds one tenant has (0 when none)."""

    def __len__(self) -> int:
        return len(self.held)

    def _recount(self, tenant: str, before: int, after: int) -> None:
        tenants = self.by_count[before] if before else None
        if tenants is not None:
            del tenants[tenant]
            if not tenants:
                del self.by_count[before]
                if self.most == before:
                    self.most = after  # counts move by one: the tenant is now the most, or none is
        if after:
            self.by_count.setdefault(after, {})[tenant] = None
            self.most = max(self.most, after)

    def add(self, key: str, tenant: str, tokens: int, expiry: float, *, now: float) -> bool:
        """Keep ``key``'s hold, making room if full (class docstring); False when it is not kept."""
        while len(self.held) >= MAX_HELD:
            if not self._evict(tenant, now):
                return False
        self.held[key] = (tenant, tokens, expiry)
        keys = self.by_tenant.setdefault(tenant, OrderedDict())
        keys[key] = None
        self._recount(tenant, len(keys) - 1, len(keys))
        return True

    def pop(self, key: str) -> tuple[str, int, float] | None:
        found = self.held.pop(key, None)
        if found is not None:
            keys = self.by_tenant[found[0]]
            del keys[key]
            if not keys:
                del self.by_tenant[found[0]]
            self._recount(found[0], len(keys) + 1, len(keys))
        return found

    def _evict(self, tenant: str, now: float) -> bool:
        """Drop one hold to make room for one of ``tenant``'s (class docstring); False when none
        may go."""
        oldest, (_, _, expiry) = next(iter(self.held.items()))
        if expiry < now:
            self.pop(oldest)
            return True
        own = self.by_tenant.get(tenant)
        holding = len(own) if own is not None else 0
        if self.most >= holding + 2:
            victim = next(iter(self.by_tenant[next(iter(self.by_count[self.most]))]))
        elif own is not None:
            victim = next(iter(own))
        else:
            return False
        self.pop(victim)
        return True


class LocalBuckets:
    name = "local"

    def __init__(self, *, clock: Clock, processes: int = 1) -> None:
        """``processes``: how many processes of one pod keep buckets like these for limits given per
        pod, each enforcing its share (:meth:`TenantLimits.shared_by`): the Redis backend's fallback
        under ``igw serve --workers N`` (``onRedisUnavailable: local``), whose limits are the whole
        ones Redis enforces. Before session s40 each worker's fallback held the whole limit, and a
        pod admitted N times it during an outage. The ``local`` backend gets its share in its
        settings already (:meth:`RateLimitSettings.shared_by`) and keeps 1."""
        self._clock = clock
        self._processes = processes
        self._shares: dict[TenantLimits, TenantLimits] = {}
        """Limits -> this process's share of them (as many entries as the configuration has limits)."""
        self._requests = _Table()
        self._tokens = _Table()
        self._held = _Holds()
        """The reservations :meth:`hold` keeps, fairly bounded (:class:`_Holds`)."""
        self.on_hold_refused: Callable[[], None] | None = None
        """Called once for each hold :class:`_Holds` does not keep (the limiter with metrics sets it:
        ``igw_ratelimit_holds_refused_total``, tier 2 ``igw_global_ratelimit_holds_refused_total``);
        a plain callable so this package needs no metrics library. Until session s45 a refused hold
        was silent: its tenant stayed charged the whole bound and nothing said why."""

    def _bucket(self, table: _Table, tenant: str, *, rate: float, capacity: float) -> Bucket:
        return table.get(tenant, now=self._clock(), rate=rate, capacity=capacity)

    def bucket_count(self) -> int:
        """Buckets kept (both tables), for tests and memory measurements."""
        return len(self._requests.buckets) + len(self._tokens.buckets)

    def _share(self, limits: TenantLimits) -> TenantLimits:
        if self._processes <= 1:
            return limits
        share = self._shares.get(limits)
        if share is None:
            share = self._shares[limits] = limits.shared_by(self._processes)
        return share

    async def admit(self, *, tenant: str, limits: TenantLimits, est_tokens: int | None) -> Decision:
        return self._decide(tenant, limits, est_tokens, take=True)[0]

    async def admit_all(
        self, checks: Sequence[tuple[str, TenantLimits]], *, est_tokens: int | None
    ) -> tuple[int, Decision]:
        taken: list[Bucket] = []
        for index, (tenant, limits) in enumerate(checks):
            decision, requests = self._decide(tenant, limits, est_tokens, take=False)
            if not decision.allowed:
                return index, decision
            if requests is not None:
                taken.append(requests)
        for requests in taken:
            requests.level -= 1.0
        return len(checks), ALLOW

    def _decide(
        self, tenant: str, limits: TenantLimits, est_tokens: int | None, *, take: bool
    ) -> tuple[Decision, Bucket | None]:
        """The decision on ``tenant``'s buckets and its request bucket (to take from when not ``take``)."""
        limits = self._share(limits)
        requests = tokens = None
        if limits.requests_per_second is not None:
            requests = self._bucket(
                self._requests, tenant, rate=limits.requests_per_second, capacity=limits.request_capacity
            )
        if limits.tokens_per_minute is not None and est_tokens is not None:
            tokens = self._bucket(
                self._tokens, tenant, rate=token_rate(limits), capacity=limits.token_capacity
            )
        decision = decide(
            limits=limits, requests=requests, tokens=tokens, est_tokens=est_tokens or 0, take=take
        )
        return decision, requests

    async def account(self, *, tenant: str, limits: TenantLimits, tokens: int) -> None:
        self._debit(tenant, limits, tokens)

    def _debit(self, tenant: str, limits: TenantLimits, tokens: int) -> None:
        """:meth:`account`'s work, a plain call: :meth:`account_all` debits a request's tokens
        without a coroutine per debit (round 28 in docs/gateway.md)."""
        limits = self._share(limits)
        if limits.tokens_per_minute is None or tokens == 0:
            return
        bucket = self._bucket(self._tokens, tenant, rate=token_rate(limits), capacity=limits.token_capacity)
        bucket.level -= tokens  # a credit (negative) fills it at most to capacity: refill caps it

    async def account_all(
        self,
        debits: Sequence[tuple[str, TenantLimits, int]],
        *,
        holds: Sequence[tuple[str, str, int]] = (),
    ) -> None:
        for tenant, limits, tokens in debits:
            self._debit(tenant, limits, tokens)
        for key, tenant, tokens in holds:
            await self.hold(key=key, tenant=tenant, tokens=tokens)

    async def hold(self, *, key: str, tenant: str, tokens: int) -> None:
        if key in self._held.held:  # the first holds (see RateLimitBackend.hold)
            return
        now = self._clock()
        if self._held.add(key, tenant, tokens, now + HOLD_TTL_S, now=now):
            return
        if self.on_hold_refused is not None:
            self.on_hold_refused()
        refused_log.warning(
            "rate-limit hold table full (%d tenants holding one each, none expired): a new tenant's "
            "hold of %d tokens was not kept; its whole bound stays charged (not settled by its usage)",
            len(self._held),
            tokens,
        )

    async def release(self, key: str) -> tuple[str, int] | None:
        found = self._held.pop(key)
        if found is None or found[2] < self._clock():
            return None
        return found[0], found[1]

    async def release_all(self, keys: Sequence[str]) -> list[tuple[str, int] | None]:
        return [await self.release(key) for key in keys]

    async def close(self) -> None:
        return None
