"""The gateway's :class:`~igw.gateway.guards.RequestGuard`: authentication, authorization, rate limits.

One class serves both modes so behaviour that does not depend on authentication (stripping
spoofed identity headers, rate limits for the anonymous tenant) is the same in both:

- **authenticated** (``spec.auth`` set): every inference request needs exactly one
  ``Authorization: Bearer <JWT>`` header, or, without ``Authorization``, exactly one ``x-api-key:
  <JWT>`` header (the Anthropic API's credential header, which the Anthropic SDK sends; since
  session s32). The scheme name is matched case-insensitively
  (RFC 9110 §11.1) and must be followed by exactly one space and the token; tokens in the query
  string (``?access_token=``) are never read. Any failure is a 401 with
  ``WWW-Authenticate: Bearer error="invalid_token"``; nothing else escapes (an unexpected error in
  verification is logged and still answered 401, never 5xx). ``Authorization`` and ``x-api-key``
  are stripped before proxying unless ``forwardAuthorization`` is set.
- **open** (``spec.auth`` absent, AWS-compatible): every request passes as the anonymous
  principal. It is said loudly: a startup warning, ``igw_auth_enabled 0``, and the readiness detail.
  ``Authorization`` is passed through untouched (the model server may check it itself).

In both modes client copies of every forwarded identity header (``tenantHeader``,
``forwardClaims``) are stripped, so an identity header reaching a model server always came from us.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Final

from multidict import CIMultiDictProxy
from mypy_extensions import mypyc_attr

from igw.gateway.guards import ANONYMOUS, GuardReadiness, Principal
from igw.security.authorization import ModelAccessPolicy
from igw.security.denials import forbidden_model, unauthorized
from igw.security.jwks import JwksCache
from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.limiter import RateLimiter
from igw.security.settings import AuthorizationSettings
from igw.security.token import TokenRejected
from igw.security.verifier import TokenVerifier

log = logging.getLogger("igw.security")

API_KEY_HEADER: Final = "x-api-key"
"""Read for the token when a request has no ``Authorization`` (:meth:`SecurityGuard._api_key`)."""

AUTH_DISABLED_DETAIL = (
    "authentication DISABLED: spec.auth is not set, inference requests are not authenticated "
    "(network controls only)"
)


# mypyc (igw.compiled): the auth gauge's previous owner is held by weakref.ref, which a native class
# does not support ("cannot create weak reference"), so it stays a Python class; its methods compile.
@mypyc_attr(native_class=False)
class SecurityGuard:
    def __init__(
        self,
        *,
        settings: AuthorizationSettings,
        verifier: TokenVerifier | None,
        jwks: JwksCache | None,
        limiter: RateLimiter | None,
        metrics: SecurityMetrics,
    ) -> None:
        self._settings = settings
        self._verifier = verifier
        self._jwks = jwks
        self._limiter = limiter
        self._metrics = metrics
        self._model_access = ModelAccessPolicy(settings.model_access)
        stripped = set(settings.forwarded_header_names)
        if verifier is not None and not settings.forward_authorization:
            stripped.update(("authorization", API_KEY_HEADER))
        self.stripped_request_headers: frozenset[str] = frozenset(stripped)
        self._previous_owner: weakref.ref[SecurityGuard] | None = None

    @property
    def limiter(self) -> RateLimiter | None:
        """The tenant-wide rate limiter (``None`` when rate limiting is off), whose backend outage
        state the global router's per-model limits share."""
        return self._limiter

    @property
    def auth_enabled(self) -> bool:
        return self._verifier is not None

    @property
    def jwks(self) -> JwksCache | None:
        """The JWKS cache (``None`` when authentication is off), for diagnostics and tests."""
        return self._jwks

    # -- RequestGuard --------------------------------------------------------------------------

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        if self._verifier is None:
            return ANONYMOUS
        values = header_values(headers, "authorization")
        if len(values) > 1:
            raise self._deny("multiple_authorization_headers", token_present=True)
        if values:
            token = bearer_token(values[0])
            if token is None:
                raise self._deny("not_bearer", token_present=True)
        else:
            token = self._api_key(headers)
        try:
            principal = self._verifier.cached(token)
            if principal is None:
                principal = await self._verifier.verify(token)
        except TokenRejected as exc:
            raise self._deny(exc.reason, token_present=True) from None
        except Exception:
            log.exception("unexpected error while verifying a bearer token; answering 401")
            raise self._deny("internal_error", token_present=True) from None
        self._metrics.allowed.inc()
        return principal

    def authorize(self, principal: Principal, *, model: str) -> None:
        if self._model_access.allows(principal.claims, model=model):
            return
        if self._limiter is not None:
            self._limiter.count_forbidden(principal.tenant)
        raise forbidden_model(model=model, tenant=principal.tenant)

    def may_use(self, principal: Principal, *, model: str) -> bool:
        return self._model_access.allows(principal.claims, model=model)

    async def admit(self, principal: Principal, *, model: str, est_tokens: int | None) -> None:
        limiter = self._limiter
        if limiter is not None:
            limited = limiter.admission(principal.tenant)  # a plain call: a coroutine only when limited
            if limited is not None:
                await limiter.admit_limited(*limited, est_tokens)

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
        limiter = self._limiter
        if limiter is None:
            return
        charge = limiter.usage(  # a plain call: a coroutine only when a token limit applies
            tenant=principal.tenant,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reserved_tokens=reserved_tokens,
            reservation=reservation,
        )
        if charge is not None:
            await limiter.debit(charge)

    async def settle(self, *, reservation: str, completion_tokens: int) -> None:
        if self._limiter is not None:
            await self._limiter.settle(reservation=reservation, completion_tokens=completion_tokens)

    def readiness(self) -> GuardReadiness:
        limiter = None if self._limiter is None else self._limiter.readiness_detail()
        if self._jwks is None:
            return GuardReadiness(ready=True, detail=AUTH_DISABLED_DETAIL, rate_limit=limiter)
        return GuardReadiness(
            ready=self._jwks.ready(), detail=self._jwks.readiness_detail(), rate_limit=limiter
        )

    async def start(self) -> None:
        self._claim_auth_gauge()
        if self._jwks is None:
            log.warning("%s; set spec.auth.jwt.provider to require a verified JWT", AUTH_DISABLED_DETAIL)
            if self._settings.isolate_prefix_caches:
                log.warning(
                    "spec.extensions.authorization.prefixCacheIsolation: tenant has no effect while "
                    "spec.auth is not set: no caller has a tenant, so every prompt shares the model "
                    "servers' prefix caches"
                )
            return
        await self._jwks.start()

    async def close(self) -> None:
        self._release_auth_gauge()
        if self._jwks is not None:
            await self._jwks.close()
        if self._limiter is not None:
            await self._limiter.close()

    # -- helpers -------------------------------------------------------------------------------

    def _claim_auth_gauge(self) -> None:
        """``igw_auth_enabled`` shows the most recently started guard's mode."""
        owner = self._metrics.auth_enabled_owner
        self._previous_owner = None
        if isinstance(owner, SecurityGuard) and owner is not self:
            self._previous_owner = weakref.ref(owner)
        self._metrics.auth_enabled_owner = self
        self._metrics.auth_enabled.set(1 if self.auth_enabled else 0)

    def _release_auth_gauge(self) -> None:
        """A started guard closed without replacing its predecessor (a rejected hot reload) hands
        the gauge back, so it never claims authentication the serving guard does not enforce."""
        previous = self._previous_owner() if self._previous_owner is not None else None
        self._previous_owner = None
        if self._metrics.auth_enabled_owner is self and previous is not None:
            self._metrics.auth_enabled_owner = previous
            self._metrics.auth_enabled.set(1 if previous.auth_enabled else 0)

    def _api_key(self, headers: Mapping[str, str]) -> str:
        """The token of a request without ``Authorization``: its one ``x-api-key`` header, the
        credential header of the Anthropic API, which the Anthropic SDK and the agents on it (Claude
        Code's ``ANTHROPIC_API_KEY``) send instead of a bearer token. The value is the token itself,
        no scheme; it is verified exactly as a bearer token is."""
        values = header_values(headers, API_KEY_HEADER)
        if not values:
            raise self._deny("missing_token", token_present=False)
        if len(values) > 1:
            raise self._deny("multiple_api_key_headers", token_present=True)
        token = values[0]
        if not token or token != token.strip() or " " in token:
            raise self._deny("malformed_api_key", token_present=True)
        return token

    def _deny(self, reason: str, *, token_present: bool) -> Exception:
        self._metrics.auth_denied.labels(reason=reason).inc()
        log.debug("bearer token refused: %s", reason)
        return unauthorized(reason=reason, token_present=token_present)


def header_values(headers: Mapping[str, str], name: str) -> Sequence[str]:
    """Every value of header ``name`` (case-insensitive), from a multidict or a plain mapping.

    A request's headers (the lean server's and aiohttp's) are a ``CIMultiDictProxy``, asked
    directly: its ``getall`` list is new, so it is answered as it is, without ``getattr`` and a
    copy (round 28 in docs/gateway.md)."""
    if type(headers) is CIMultiDictProxy:
        found: Sequence[str] = headers.getall(name, ())
        return found
    getall: Any = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, ()))
    return [value for key, value in headers.items() if key.lower() == name]


def bearer_token(value: str) -> str | None:
    """The token of ``Bearer <token>``; ``None`` for other schemes or malformed values."""
    scheme, sep, token = value.partition(" ")
    if not sep or scheme.lower() != "bearer" or not token or token != token.strip() or " " in token:
        return None
    return token
