"""The rate-limit backend interface (the registry of implementations is :mod:`.registry`)."""

from __future__ import annotations

from typing import Protocol

from igw.errors import IgwSecurityError
from igw.security.ratelimit.buckets import Decision
from igw.security.settings import TenantLimits


class BackendUnavailable(IgwSecurityError):
    """The backend could not decide (Redis down or slow); the limiter applies its unavailable policy."""


class RateLimitBackend(Protocol):
    name: str

    async def admit(self, *, tenant: str, limits: TenantLimits, est_tokens: int) -> Decision: ...

    async def account(self, *, tenant: str, limits: TenantLimits, tokens: int) -> None: ...

    async def close(self) -> None: ...
