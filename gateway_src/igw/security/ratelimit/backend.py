"""The rate-limit backend interface (the registry of implementations is :mod:`.registry`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from igw.errors import IgwSecurityError
from igw.security.ratelimit.buckets import Decision
from igw.security.settings import TenantLimits


class BackendUnavailable(IgwSecurityError):
    """The backend could not decide (Redis down or slow); the limiter applies its unavailable policy."""


HOLD_TTL_S: Final = 86_400.0
"""How long a reservation is kept for its settlement (a day: a background response is polled
within minutes to hours; one never polled keeps its whole charge)."""


class RateLimitBackend(Protocol):
    name: str

    async def admit(self, *, tenant: str, limits: TenantLimits, est_tokens: int | None) -> Decision:
        """Whether the tenant may send a request now, taking one from its request bucket if so;
        ``est_tokens`` ``None``: a request that generates nothing, the token bucket not read."""
        ...

    async def admit_all(
        self, checks: Sequence[tuple[str, TenantLimits]], *, est_tokens: int | None
    ) -> tuple[int, Decision]:
        """:meth:`admit` against several limits at once (``(bucket key, limits)`` each, such as the
        global router's tenant-wide and per-model ones), in one step: a request token is taken from
        each only when every one admits the request; refused, nothing is taken. The answer is the
        index of the first check that refused (``len(checks)`` when admitted) and its decision."""
        ...

    async def account(self, *, tenant: str, limits: TenantLimits, tokens: int) -> None:
        """Debit ``tokens`` from the tenant's token bucket; a negative amount credits it (a settled
        reservation's unused part), up to its capacity (every read of a bucket caps it there)."""
        ...

    async def account_all(
        self,
        debits: Sequence[tuple[str, TenantLimits, int]],
        *,
        holds: Sequence[tuple[str, str, int]] = (),
    ) -> None:
        """:meth:`account` for several ``(bucket key, limits, tokens)`` at once, and :meth:`hold`
        for each ``(key, tenant, tokens)`` of ``holds``, in one step (the global router's
        tenant-wide and per-model debits after a response, and a background response's two held
        charges: one Redis round trip)."""
        ...

    async def hold(self, *, key: str, tenant: str, tokens: int) -> None:
        """Remember that ``tokens`` were charged to ``tenant`` ahead of their generation under
        ``key`` (a stored response's id), for :data:`HOLD_TTL_S`. A key held already keeps its
        first holder: a response whose id repeated another's (an engine that lets the client choose
        it) would otherwise have its settlement credit the second tenant."""
        ...

    async def release(self, key: str) -> tuple[str, int] | None:
        """The tenant and tokens held under ``key``, forgotten in the same step (so that only one
        caller, of any replica sharing the backend, settles them), or ``None``."""
        ...

    async def release_all(self, keys: Sequence[str]) -> list[tuple[str, int] | None]:
        """:meth:`release` of each of ``keys``, in one step (the global router's tenant-wide and
        per-model holds of one response: one Redis round trip)."""
        ...

    async def close(self) -> None: ...
