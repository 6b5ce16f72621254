"""The seam between the data plane and request security (``igw.security``).

The gateway calls a :class:`RequestGuard` for every inference request, in this order, before any
byte reaches a model server::

    principal = await guard.authenticate(headers)          # 401 on failure
    guard.authorize(principal, model=model)                # 403 on failure
    await guard.admit(principal, model=model, est_tokens=n)  # 429 + Retry-After on failure
    ... route and proxy, adding principal.forward_headers ...
    await guard.account(principal, model=model, prompt_tokens=p, completion_tokens=c)

A failing step raises :class:`GuardDenied`, which carries the exact response to send. The guard
must never raise anything else for bad client input (a bad token is a 401, not a 500).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from igw.errors import IgwGatewayError

if TYPE_CHECKING:
    from igw.config.model import GatewayConfig


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, as far as the gateway knows."""

    subject: str | None = None
    tenant: str | None = None
    claims: Mapping[str, Any] = field(default_factory=dict)
    forward_headers: Mapping[str, str] = field(default_factory=dict)
    """Headers to add to the upstream request (for example ``x-igw-tenant``); the gateway strips any
    client-supplied copy of these header names before adding them."""
    authenticated: bool = False
    cache_salt: str | None = None
    """The salt of this caller's prompts in the model servers' prefix caches
    (``authorization.prefixCacheIsolation: tenant``, :mod:`igw.gateway.cache_salt`); ``None``: the
    caches are shared."""
    engine_fields: frozenset[str] = frozenset()
    """The fields no tenant may send to a shared model server that this caller may send anyway
    (``authorization.allowedEngineFields``, :mod:`igw.gateway.tenant_fields`); empty: none."""


ANONYMOUS = Principal()


def caller_scope(principal: Principal) -> str:
    """Whose a caller's stored responses and cached prompts are: ``tenant:<tenant>`` when its token
    names one (a tenant's callers share theirs, as an OpenAI project's members do), else
    ``subject:<sub>``, else ``""``, the one scope of callers the gateway knows nothing of."""
    if principal.tenant:
        return "tenant:" + principal.tenant
    if principal.authenticated and principal.subject:
        return "subject:" + principal.subject
    return ""


class GuardDenied(IgwGatewayError):
    """A request refused by the guard; carries the full response to send."""

    def __init__(
        self,
        *,
        status: int,
        message: str,
        error_type: str,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.code = code
        self.headers: Mapping[str, str] = dict(headers or {})


@dataclass(frozen=True, slots=True)
class GuardReadiness:
    ready: bool
    detail: str
    rate_limit: Mapping[str, object] | None = None
    """The rate-limit backend's state (``RateLimiter.readiness_detail``; ``None`` without rate
    limits): shown in ``/readyz``, never part of :attr:`ready`. A shared Redis that is down has its
    ``onRedisUnavailable`` policy applied; failing readiness for it would take every replica out of
    its load balancer at once."""

    def as_detail(self) -> dict[str, object]:
        """What ``/readyz`` shows under ``guard``."""
        shown: dict[str, object] = {"ready": self.ready, "detail": self.detail}
        if self.rate_limit is not None:
            shown["rate_limit"] = dict(self.rate_limit)
        return shown


class RequestGuard(Protocol):
    """Authentication, authorization, rate limiting and accounting for one gateway."""

    stripped_request_headers: frozenset[str]
    """Lower-case header names the gateway must remove from every client request before proxying
    (forwarded-identity headers and, unless configured otherwise, ``authorization``)."""

    async def authenticate(self, headers: Mapping[str, str]) -> Principal: ...

    def authorize(self, principal: Principal, *, model: str) -> None: ...

    def may_use(self, principal: Principal, *, model: str) -> bool:
        """Whether ``authorize`` would let ``principal`` use ``model``, nothing counted: which pools
        a search for a stored response (a request that names no model) may ask."""
        ...

    async def admit(self, principal: Principal, *, model: str, est_tokens: int | None) -> None:
        """Raise ``GuardDenied`` (429) when ``principal`` is over a limit. ``est_tokens``: what the
        request may read and generate; ``None`` for one that generates nothing (a stored response's
        retrieval), which the token limit does not hold back."""
        ...

    async def account(
        self,
        principal: Principal,
        *,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
    ) -> None:
        """Count a finished request's tokens against ``principal``'s limits and series;
        ``reserved_tokens``: tokens charged to its limits that no series counts (a background
        response's output bound: generated after the answer, :mod:`igw.gateway.inference`), held
        under ``reservation`` (the stored response's id) until :meth:`settle`."""
        ...

    async def settle(self, *, reservation: str, completion_tokens: int) -> None:
        """A retrieval showed the usage of the response whose output bound is held under
        ``reservation``: its tenant is charged ``completion_tokens`` instead, once."""
        ...

    def readiness(self) -> GuardReadiness: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class OpenGuard:
    """The guard used when ``spec.auth`` is absent: every request passes, anonymously.

    The gateway still reports the missing authentication loudly (startup warning, gauge, /readyz).
    """

    stripped_request_headers: frozenset[str] = frozenset()

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        return ANONYMOUS

    def authorize(self, principal: Principal, *, model: str) -> None:
        return None

    def may_use(self, principal: Principal, *, model: str) -> bool:
        return True

    async def admit(self, principal: Principal, *, model: str, est_tokens: int | None) -> None:
        return None

    async def account(
        self,
        principal: Principal,
        *,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        reserved_tokens: int = 0,
        reservation: str | None = None,
    ) -> None:
        return None

    async def settle(self, *, reservation: str, completion_tokens: int) -> None:
        return None

    def readiness(self) -> GuardReadiness:
        return GuardReadiness(ready=True, detail="authentication disabled: spec.auth is not set")

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


GuardFactory = Callable[["GatewayConfig"], RequestGuard]
"""Builds the guard for a configuration (at start-up and on every hot reload that changes
:func:`guard_inputs`); may raise ``ValueError`` naming the field of a bad setting."""

GUARD_EXTENSIONS = ("authorization", "rateLimits")
"""The ``spec.extensions`` sub-objects request security reads (besides ``spec.auth``)."""


def guard_inputs(config: GatewayConfig) -> tuple[object, ...]:
    """The parts of a configuration a guard is built from: a reload rebuilds it when they change."""
    return (config.auth, *(config.extensions.get(name) for name in GUARD_EXTENSIONS))
