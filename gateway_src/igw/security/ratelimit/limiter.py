"""What the guard calls for rate limiting: limits per tenant, the unavailable policy, 429s, counters.

When the backend cannot decide (Redis unreachable or slower than its timeouts), the configured
``onRedisUnavailable`` policy applies and Redis is not asked again for ``retryAfterFailureSeconds``
(so an outage adds no per-request latency):

- ``local`` (default): this replica's own buckets decide - limits stay enforced, per replica (with
  ``igw serve --workers N`` each worker's buckets hold 1/N of them);
- ``allow``: fail open - the request is admitted;
- ``deny``: fail closed - 429 with ``Retry-After`` 1 s, spread to 1 or 2 s
  (:mod:`igw.scheduling.retry_spread`; never a 5xx).

Accounting during an outage goes to the local buckets under ``local`` and is dropped otherwise.

Tokens charged ahead of their generation (a background response's output bound) are held under a
key (the response's id) in the backend, and settled once by the tokens the response turns out to
have generated (:meth:`RateLimiter.settle`): in Redis, whichever replica settles them.
Every failure is logged (rate-limited to one line per outage) and counted
(``igw_ratelimit_backend_errors_total``, ``igw_ratelimit_backend_up``).

Each count a charge is made of is taken up to :data:`MAX_CHARGE_TOKENS`: before session s40 a
background response asking for ``max_output_tokens: 2**63`` was held and debited as such, and the
Redis script failed on it (the bucket's expiry past what Redis represents), which took Redis for down
and applied ``onRedisUnavailable`` to every tenant of the replica (``deny``: 429 for all of them).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from igw.gateway.tenant_labels import is_plain
from igw.redaction import redact
from igw.security.clock import Clock
from igw.security.denials import limiter_unavailable, rate_limited
from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.backend import BackendUnavailable, RateLimitBackend
from igw.security.ratelimit.buckets import ALLOW, Decision
from igw.security.ratelimit.keys import reservation_key
from igw.security.ratelimit.keys import tenant_key as tenant_bucket
from igw.security.ratelimit.local import LocalBuckets
from igw.security.settings import RateLimitSettings, TenantLimits

log = logging.getLogger("igw.security.ratelimit")

_T = TypeVar("_T")

MAX_CHARGE_TOKENS: Final = 1 << 30
"""The most tokens one count of a charge (a prompt, an answer, a held bound, a settlement) debits:
about a billion, a hundred times the longest context window served today, and the largest usage
count the gateway believes of a model server (``igw.gateway.upstream.MAX_REPORTED_TOKENS``). A
tenant's bucket owes at most a few of these per request: a debt its limits repay in centuries
at the least, and a number Redis's expiry arithmetic represents."""


def _charged(tokens: int) -> int:
    """``tokens`` as one count of a charge: 0 to :data:`MAX_CHARGE_TOKENS`. Compared, not
    ``min(max(...))``: three counts per request, and the builtins' generic argument handling cost
    more than the rest of this (round 28 in docs/gateway.md)."""
    if tokens < 0:
        return 0
    return tokens if tokens < MAX_CHARGE_TOKENS else MAX_CHARGE_TOKENS


_Plan = tuple[TenantLimits, bool, bool]
"""A tenant's limits, whether any applies (``limited``) and whether tokens count against one."""


_Debit = tuple[str, TenantLimits, int]
"""A backend's ``account_all`` debit: bucket key, limits, tokens (a credit when negative)."""

Charge = tuple[list[_Debit], list[tuple[str, str, int]]]
"""What :meth:`RateLimiter.usage` asks of the backend: the debits and the holds (reservation key,
tenant key, tokens) of one ``account_all`` call."""


def _plan(limits: TenantLimits) -> _Plan:
    """What admitting and accounting a request ask of a tenant's limits, read once per limiter."""
    return (limits, limits.limited, limits.tokens_per_minute is not None)


class BackendOutage:
    """Whether a shared backend (Redis) is taken for down, and until when; its log lines and gauge.

    One per backend *server*, shared by every limiter that asks it (the global router's tenant-wide
    limiter and each of its ``modelRateLimits`` entries' limiters), so that an outage costs one
    timeout per ``retryAfterFailureSeconds`` and is logged once, whichever limiter meets it first.
    Until session s43 each limiter kept its own: with Redis frozen, a router request paid the
    timeout once for the tenant-wide limit and again for its model's (0.51 s for the first, 0.25 s
    more for the first request of each other model), and one outage logged one ERROR and one
    WARNING per limiter."""

    def __init__(
        self,
        *,
        name: str,
        settings: RateLimitSettings,
        clock: Clock,
        metrics: SecurityMetrics | None = None,
    ) -> None:
        """``name``: the backend's (``igw_ratelimit_backend_up{backend}``); ``metrics``: where the
        failures are counted (none: another part reports them)."""
        self._name = name
        self._retry_after_s = settings.redis.retry_after_failure_s
        self._policy = settings.on_redis_unavailable
        self._clock = clock
        self._metrics = metrics
        self._down_until = float("-inf")
        self._down_logged = False
        self._probe_s = settings.redis.connect_timeout_s + settings.redis.command_timeout_s
        self._probe_until = float("-inf")
        self._down_since: float | None = None
        """When the outage under way began (its first failure); ``None`` while the backend answers."""
        self._reason = ""
        """Why the backend last failed, shown (redacted) in ``/readyz`` while the outage lasts."""
        if metrics is not None:
            metrics.ratelimit_backend_up.labels(backend=name).set(1)

    def usable(self) -> bool:
        """Whether the backend may be asked now: not within ``retryAfterFailure`` of a failure, and
        past it, by one call at a time (the probe) until one answers and ends the outage.

        The calls made while a probe is in flight (for up to ``connectTimeout`` + ``commandTimeout``,
        its deadline, so that a probe cancelled with its request is not waited on past it) keep the
        policy. Until session s44 every call made once ``retryAfterFailure`` had passed asked Redis:
        with Redis still frozen, each request arriving within the timeout of the window's end waited
        the whole timeout and took a connection (and counted an error), and a Redis coming back met
        every waiting decision at once."""
        now = self._clock()
        if now < self._down_until:
            return False
        if not self._down_logged:
            return True
        if now < self._probe_until:
            return False
        self._probe_until = now + self._probe_s
        return True

    def ok(self) -> None:
        """The backend answered: the end of an outage is logged once.

        Only an answer to a call made after ``retryAfterFailure`` ends an outage: a call in flight
        when another failed may answer just after (a slow Redis, near ``commandTimeout``), which
        says nothing of Redis now, and the policy stays applied until then anyway. Until session
        s43 such an answer logged "answering again" and set ``igw_ratelimit_backend_up`` to 1
        while every request met ``onRedisUnavailable``, and the next call in flight to fail logged
        the outage again: one ERROR and one WARNING per call in flight, in one outage."""
        if self._down_logged and self._clock() >= self._down_until:
            log.warning("rate-limit backend %s is answering again", self._name)
            self._down_logged = False
            self._probe_until = float("-inf")
            self._down_since = None
            if self._metrics is not None:
                self._metrics.ratelimit_backend_up.labels(backend=self._name).set(1)

    def failed(self, reason: str) -> None:
        """The backend failed: not asked again for ``retryAfterFailure``; counted, logged once."""
        now = self._clock()
        self._down_until = now + self._retry_after_s
        self._reason = reason
        if self._down_since is None:
            self._down_since = now
        if self._metrics is not None:
            self._metrics.ratelimit_backend_errors.labels(backend=self._name).inc()
            self._metrics.ratelimit_backend_up.labels(backend=self._name).set(0)
        if not self._down_logged:
            log.error(
                "rate-limit backend %s unavailable (%s); policy onRedisUnavailable=%s for %.1f s",
                self._name,
                reason,
                self._policy,
                self._retry_after_s,
            )
            self._down_logged = True

    def readiness_detail(self) -> dict[str, object]:
        """The backend's state for ``/readyz`` (as ``igw_ratelimit_backend_up``): answering, or down
        since when, why, and the ``onRedisUnavailable`` policy applied meanwhile. Shown, never
        failing readiness (:class:`~igw.gateway.guards.GuardReadiness`); before session s44
        ``/readyz`` said nothing of an outage. Known from the decisions only: a backend that failed
        shows down until an answer to a call made after ``retryAfterFailure``."""
        detail: dict[str, object] = {"backend": self._name, "up": self._down_since is None}
        detail["on_unavailable"] = self._policy
        if self._down_since is not None:
            detail["down_for_s"] = round(max(0.0, self._clock() - self._down_since), 3)
            detail["error"] = redact(self._reason[:300])
        return detail


class RateLimiter:
    def __init__(
        self,
        *,
        settings: RateLimitSettings,
        backend: RateLimitBackend,
        clock: Clock,
        metrics: SecurityMetrics | None = None,
        processes: int = 1,
        rng: random.Random | None = None,
        outage: BackendOutage | None = None,
        fallback: LocalBuckets | None = None,
        keys_encoded: bool = False,
        reservation_scope: tuple[str, ...] = (),
    ) -> None:
        """``processes``: the gateway processes of one pod (``igw serve --workers N``), each of whose
        fallback buckets (``onRedisUnavailable: local``) enforces its share of the limits, so that
        the pod enforces them once during an outage, as the ``local`` backend does; ``rng``: what
        spreads the refusals' ``Retry-After`` (:mod:`igw.scheduling.retry_spread`); ``outage``: the
        backend's state shared with other limiters asking the same server (:class:`BackendOutage`;
        by default this limiter's own, reported in ``metrics``); ``fallback``: the local buckets
        that decide under ``onRedisUnavailable: local`` (another limiter's, :meth:`sharing`);
        ``keys_encoded``: the tenant keys it is given are bucket keys already, used as they are
        (the global router's per-model keys, :func:`~igw.security.ratelimit.keys.model_key`), where
        by default a tenant's is :func:`~igw.security.ratelimit.keys.tenant_key` of its name;
        ``reservation_scope``: what follows a response's id in the key its reservations are held at
        (:func:`~igw.security.ratelimit.keys.reservation_key`: none for a cluster gateway, ``tier2``
        for the global router's tenant-wide limits), so holders sharing a Redis never meet."""
        self._keys_encoded = keys_encoded
        self._reservation_scope = reservation_scope
        self._rng = rng if rng is not None else random.Random()
        self._settings = settings
        self._anonymous = settings.anonymous_tenant
        self._default_plan = _plan(settings.default)
        self._plans: dict[str, _Plan] = {tenant: _plan(limits) for tenant, limits in settings.tenants.items()}
        """Tenant -> :func:`_plan` of its limits, read once here: ``settings`` is frozen and a reload
        builds a new limiter, and ``RateLimitSettings.limits_for`` and ``TenantLimits.limited`` are
        interpreted calls (three per request) in the compiled build, where this module is native."""
        self._backend = backend
        if fallback is None:
            fallback = (
                backend
                if isinstance(backend, LocalBuckets)
                else LocalBuckets(clock=clock, processes=processes)
            )
        self._fallback = fallback
        if metrics is not None:  # the limiter that owns its buckets (sharing() passes none)
            for buckets in (backend, fallback):
                if isinstance(buckets, LocalBuckets):
                    buckets.on_hold_refused = metrics.ratelimit_holds_refused.inc
        self._clock = clock
        self._metrics = metrics
        self._outage = (
            outage
            if outage is not None
            else BackendOutage(name=backend.name, settings=settings, clock=clock, metrics=metrics)
        )
        self._labelled = settings.labelled_tenants
        self._admitted: dict[str, Any] = {}
        """Tenant label -> its ``tenant_requests{outcome="admitted"}`` child (updated on every
        request); keyed by label, not tenant, so it holds at most as many entries as there are labels."""
        self._tokens: dict[str, tuple[Any, Any]] = {}
        """Tenant label -> its prompt and completion ``tenant_tokens`` children (likewise)."""
        if metrics is not None:
            metrics.tenant_labels.name(self._labelled)  # other families label them by name at once

    @property
    def outage(self) -> BackendOutage:
        """The backend's outage state, for limiters that ask the same server to share."""
        return self._outage

    def readiness_detail(self) -> dict[str, object]:
        """The backend's state for ``/readyz`` (:meth:`BackendOutage.readiness_detail`)."""
        return self._outage.readiness_detail()

    @property
    def backend_name(self) -> str:
        return self._backend.name

    def tenant_key(self, tenant: str | None) -> str:
        return tenant if tenant else self._anonymous

    def _bucket(self, key: str) -> str:
        """The backend's key for the buckets of tenant key ``key``: one no other tenant's, nor any
        (tenant, model) pair's, can be (:mod:`igw.security.ratelimit.keys`)."""
        return key if self._keys_encoded else tenant_bucket(key)

    def _held_at(self, reservation: str) -> str:
        """The backend's key for this limiter's reservation for response ``reservation``."""
        return reservation_key(reservation, *self._reservation_scope)

    async def admit(self, *, tenant: str | None, est_tokens: int | None) -> None:
        """Raise ``GuardDenied`` (429) when the tenant is over a limit; count the outcome.
        ``est_tokens`` ``None``: a request that generates nothing (a stored response's retrieval)
        is held back by the request limit alone. Before session s37 it needed a token too, so a
        tenant in debt for a background response's bound could not poll for that response."""
        limited = self.admission(tenant)
        if limited is None:
            return
        key, limits = limited  # admit_limited's body, without a second coroutine
        index, decision = await self._decide([(self._bucket(key), limits)], est_tokens)
        self._raise_refused(key, [key], index, decision)
        self._count_admitted(key)

    def admission(self, tenant: str | None) -> tuple[str, TenantLimits] | None:
        """:meth:`admit`'s first half, a plain call: ``None`` when no limit applies to the tenant
        (its request counted admitted), else its key and limits, for :meth:`admit_limited` to
        decide. The guard calls the two itself, so a request no limit holds back makes no coroutine
        here (round 28 in docs/gateway.md)."""
        key = self.tenant_key(tenant)
        limits, limited, _ = self._plans.get(key, self._default_plan)
        if not limited:
            self._count_admitted(key)
            return None
        return key, limits

    async def admit_limited(self, key: str, limits: TenantLimits, est_tokens: int | None) -> None:
        """:meth:`admit`'s second half: :meth:`admission`'s ``key`` and ``limits`` decided."""
        index, decision = await self._decide([(self._bucket(key), limits)], est_tokens)
        self._raise_refused(key, [key], index, decision)
        self._count_admitted(key)

    async def admit_with(
        self, *, tenant: str | None, est_tokens: int | None, also: RateLimiter, also_key: str
    ) -> None:
        """:meth:`admit` against this limiter's limits and ``also``'s for ``also_key`` (the global
        router's per-model limit for the tenant and model) in one decision, one Redis round trip:
        a request either limit refuses takes nothing from the other. ``also`` must share this
        limiter's backend, fallback and outage (:meth:`sharing`). The outcome is counted here, for
        ``tenant``. Until session s44 the router asked the two limiters in turn: a request its model
        limit refused waited two round trips, and had spent a tenant-wide request token, so a client
        retrying a model over its limit refused the tenant's requests to every other model too."""
        if also._backend is not self._backend or also._fallback is not self._fallback:
            raise ValueError("admit_with: the other limiter must share this one's backend (sharing())")
        key = self.tenant_key(tenant)
        limits, limited, _ = self._plans.get(key, self._default_plan)
        other_limits, other_limited, _ = also._plans.get(also_key, also._default_plan)
        checks = [(self._bucket(key), limits)] if limited else []
        names = [key] if limited else []
        if other_limited:
            checks.append((also._bucket(also_key), other_limits))
            names.append(also_key)
        if checks:
            index, decision = await self._decide(checks, est_tokens)
            self._raise_refused(key, names, index, decision)
        self._count_admitted(key)

    def sharing(
        self,
        *,
        settings: RateLimitSettings,
        keys_encoded: bool = False,
        reservation_scope: tuple[str, ...] = (),
    ) -> RateLimiter:
        """A limiter of ``settings``'s limits on this one's backend, fallback buckets and outage
        state (for :meth:`admit_with` and :meth:`account_with`); closing it closes nothing."""
        return RateLimiter(
            settings=settings,
            backend=self._backend,
            clock=self._clock,
            rng=self._rng,
            outage=self._outage,
            fallback=self._fallback,
            keys_encoded=keys_encoded,
            reservation_scope=reservation_scope,
        )

    def _raise_refused(self, key: str, names: list[str], index: int, decision: Decision | None) -> None:
        """Count and raise the refusal of the check named ``names[index]`` (``decision`` ``None``:
        the backend is down under policy ``deny``); nothing when admitted."""
        if decision is None:
            self._count(key, "limiter_unavailable")
            raise limiter_unavailable(tenant=key, rng=self._rng)
        if not decision.allowed:
            assert decision.limit is not None
            self._count(key, f"limited_{decision.limit}")
            raise rate_limited(
                tenant=names[index],
                limit=decision.limit,
                retry_after_s=decision.retry_after_s,
                rng=self._rng,
            )

    async def account(
        self,
        *,
        tenant: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
    ) -> None:
        """Debit the tenant's token bucket by the tokens a request used, and count them in its
        series; ``reserved_tokens`` are debited, not counted (a bound, not a measurement), and held
        under ``reservation`` (when given: the response's id) for :meth:`settle`."""
        await self.account_with(
            tenant=tenant,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reserved_tokens=reserved_tokens,
            reservation=reservation,
        )

    async def account_with(
        self,
        *,
        tenant: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
        also: RateLimiter | None = None,
        also_key: str = "",
    ) -> None:
        """:meth:`account`, and the same tokens debited from ``also``'s buckets for ``also_key``
        (the global router's per-model limit for the tenant and model; its reserved ones held under
        ``reservation`` in ``also``'s scope), both debits in one backend call, one Redis round trip.
        ``also`` must share this limiter's backend (:meth:`sharing`). Until session s44 the router debited the
        tenant-wide and the per-model buckets in two round trips after every response, and held a
        background response's two charges in two more (one ``SET`` each): the holds now go in the
        debit's call."""
        charge = self.usage(
            tenant=tenant,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reserved_tokens=reserved_tokens,
            reservation=reservation,
            also=also,
            also_key=also_key,
        )
        if charge is not None:
            await self.debit(charge)

    def usage(
        self,
        *,
        tenant: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
        also: RateLimiter | None = None,
        also_key: str = "",
    ) -> Charge | None:
        """:meth:`account_with`'s first half, a plain call: the tokens counted in the tenant's
        series now, and the backend call its limits (and ``also``'s) ask for, ``None`` when none
        (no token limit applies, or nothing was used): then no coroutine is made at all. The guard
        calls it and :meth:`debit` itself (one coroutine fewer per request, two when no token limit
        applies: round 28 in docs/gateway.md)."""
        key = self.tenant_key(tenant)
        prompt_tokens, completion_tokens = _charged(prompt_tokens), _charged(completion_tokens)
        reserved_tokens = _charged(reserved_tokens)
        self._count_tokens(key, prompt_tokens, completion_tokens)
        total = prompt_tokens + completion_tokens + reserved_tokens
        if total == 0:
            return None
        debits: list[_Debit] = []
        holds: list[tuple[str, str, int]] = []
        limits, _, counts_tokens = self._plans.get(key, self._default_plan)
        if counts_tokens:
            debits.append((self._bucket(key), limits, total))
            if reservation is not None and reserved_tokens > 0:
                holds.append((self._held_at(reservation), key, reserved_tokens))
        if also is not None:
            if also._backend is not self._backend or also._fallback is not self._fallback:
                raise ValueError("account_with: the other limiter must share this one's backend (sharing())")
            other_key = also.tenant_key(also_key)
            other_limits, _, other_counts = also._plans.get(other_key, also._default_plan)
            if other_counts:
                debits.append((also._bucket(other_key), other_limits, total))
                if reservation is not None and reserved_tokens > 0:
                    holds.append((also._held_at(reservation), other_key, reserved_tokens))
        return (debits, holds) if debits else None

    async def debit(self, charge: Charge) -> None:
        """:meth:`account_with`'s second half: :meth:`usage`'s answer sent to the backend (else, it
        being down, to the policy's buckets), in one call."""
        debits, holds = charge
        await self._on_backend(lambda b: b.account_all(debits, holds=holds))

    async def settle(self, *, reservation: str, completion_tokens: int) -> None:
        """The tokens held under ``reservation`` are settled, once, by ``completion_tokens``: those
        are counted in the tenant's series, and its bucket is credited what was held beyond them
        (debited what was generated beyond it). Nothing held there (settled already, by this or
        another replica sharing the backend, expired, or never held): nothing happens."""
        held = await self.release(reservation)
        if held is not None:
            await self.settle_held(held, completion_tokens=completion_tokens)

    async def release(self, reservation: str) -> tuple[str, int] | None:
        """The tenant key and tokens held under ``reservation``, forgotten (:meth:`settle`'s first
        half, for callers that pick the limiter by the tenant key: the global router's per-model
        limits)."""
        held_at = self._held_at(reservation)
        return await self._on_backend(lambda b: b.release(held_at))

    async def settle_held(self, held: tuple[str, int], *, completion_tokens: int) -> None:
        """:meth:`settle`'s second half: ``held`` (:meth:`release`'s answer) settled by
        ``completion_tokens`` with this limiter's limits for its tenant key."""
        debits = self._settlement(held, completion_tokens)
        if debits:
            await self._on_backend(lambda b: b.account_all(debits))

    def _settlement(self, held: tuple[str, int], completion_tokens: int) -> list[_Debit]:
        """The debit (a credit when negative) settling ``held`` by ``completion_tokens``, with this
        limiter's limits for its tenant key (none when they are equal); the tokens are counted."""
        key, tokens = held
        tokens, completion_tokens = _charged(tokens), _charged(completion_tokens)
        self._count_tokens(key, 0, completion_tokens)
        limits = self._plans.get(key, self._default_plan)[0]
        difference = completion_tokens - tokens
        return [(self._bucket(key), limits, difference)] if difference else []

    async def settle_with(
        self,
        *,
        reservation: str,
        completion_tokens: int,
        also: RateLimiter | None,
        settled_by: Callable[[str], RateLimiter | None],
    ) -> None:
        """:meth:`settle`, and the same response's hold in ``also``'s scope (the global router's
        per-model limits), settled with the limits of ``settled_by(its tenant key)``: both holds
        released in one backend call, both settlements in one more. ``also`` and the limiters
        ``settled_by`` answers must share this limiter's backend (:meth:`sharing`). Until session s44
        the router settled them in four Redis round trips (a release and a debit each)."""
        limiters = [self] if also is None else [self, also]
        if any(x._backend is not self._backend or x._fallback is not self._fallback for x in limiters):
            raise ValueError("settle_with: the other limiter must share this one's backend (sharing())")
        held_at = [x._held_at(reservation) for x in limiters]
        found = await self._on_backend(lambda b: b.release_all(held_at))
        if found is None:
            return
        debits: list[_Debit] = []
        for index, held in enumerate(found):
            settler = self if index == 0 else None if held is None else settled_by(held[0])
            if held is not None and settler is not None:
                if settler._backend is not self._backend:
                    raise ValueError("settle_with: the settling limiter must share this one's backend")
                debits += settler._settlement(held, completion_tokens)
        if debits:
            await self._on_backend(lambda b: b.account_all(debits))

    async def _on_backend(self, call: Callable[[RateLimitBackend], Awaitable[_T]]) -> _T | None:
        """``call`` on the backend, else (it is down, under ``onRedisUnavailable: local``) on this
        replica's own buckets; ``None`` when neither may be asked (policy ``allow`` or ``deny``)."""
        if self._backend_usable():
            try:
                result = await call(self._backend)
                self._backend_ok()
                return result
            except BackendUnavailable as exc:
                self._backend_failed(str(exc))
        if self._settings.on_redis_unavailable == "local":
            return await call(self._fallback)
        return None

    def _label(self, metrics: SecurityMetrics, key: str) -> str:
        """The ``tenant`` label of a tenant key (bounded: :mod:`igw.gateway.tenant_labels`)."""
        return metrics.tenant_labels.label(key, named=self._labelled, limit=self._settings.max_tenant_labels)

    def _count_tokens(self, key: str, prompt_tokens: int, completion_tokens: int) -> None:
        """Count charged tokens (:func:`_charged`, 0 or more) in ``key``'s series."""
        m = self._metrics
        if m is not None:
            children = self._tokens.get(key) if is_plain(key) else None  # keyed by label
            if children is None:  # looked up per label here: SecurityMetrics.child costs more per call
                label = self._label(m, key)
                children = self._tokens.get(label)
                if children is None:
                    children = self._tokens[label] = (
                        m.child(m.tenant_tokens, label, "prompt"),
                        m.child(m.tenant_tokens, label, "completion"),
                    )
            children[0].inc(prompt_tokens)  # charged counts (_charged): never negative
            children[1].inc(completion_tokens)

    async def close(self) -> None:
        await self._backend.close()

    def count_forbidden(self, tenant: str | None) -> None:
        self._count(self.tenant_key(tenant), "forbidden")

    # -- internals -----------------------------------------------------------------------------

    async def _decide(
        self, checks: list[tuple[str, TenantLimits]], est_tokens: int | None
    ) -> tuple[int, Decision | None]:
        """The backend's :meth:`~RateLimitBackend.admit_all` answer, or ``None`` for its decision
        when the request must be refused because the backend is down (policy deny)."""
        if self._backend_usable():
            try:
                answer = await self._backend.admit_all(checks, est_tokens=est_tokens)
                self._backend_ok()
                return answer
            except BackendUnavailable as exc:
                self._backend_failed(str(exc))
        policy = self._settings.on_redis_unavailable
        if policy == "allow":
            return len(checks), ALLOW
        if policy == "deny":
            return 0, None
        return await self._fallback.admit_all(checks, est_tokens=est_tokens)

    def _backend_usable(self) -> bool:
        return self._backend is self._fallback or self._outage.usable()

    def _backend_ok(self) -> None:
        self._outage.ok()

    def _backend_failed(self, reason: str) -> None:
        self._outage.failed(reason)

    def _count_admitted(self, tenant: str) -> None:
        """``_count(tenant, "admitted")``, its child looked up per tenant (every request's outcome)."""
        m = self._metrics
        if m is None:
            return
        child = self._admitted.get(tenant) if is_plain(tenant) else None  # keyed by label
        if child is None:
            label = self._label(m, tenant)
            child = self._admitted.get(label)
            if child is None:
                child = self._admitted[label] = m.child(m.tenant_requests, label, "admitted")
        child.inc()

    def _count(self, tenant: str, outcome: str) -> None:
        m = self._metrics
        if m is not None:
            m.child(m.tenant_requests, self._label(m, tenant), outcome).inc()
