"""Builds the gateway's RequestGuard from a validated :class:`~igw.config.model.GatewayConfig`.

Reads ``spec.auth.jwt.provider`` and our extensions ``spec.extensions.authorization`` and
``spec.extensions.rateLimits``. The result must be started (``await guard.start()``: begins the
JWKS fetch) and closed by the gateway. With ``spec.auth`` absent the guard still serves, openly,
and says so (see :mod:`igw.security.guard`).
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from igw.config.model import AuthSpec, GatewayConfig
from igw.security.clock import SYSTEM_CLOCK, Clock, system_random
from igw.security.guard import SecurityGuard
from igw.security.jwks import JwksCache
from igw.security.metrics import SecurityMetrics
from igw.security.ratelimit.limiter import RateLimiter
from igw.security.ratelimit.registry import BACKENDS
from igw.security.settings import AuthorizationSettings, RateLimitSettings
from igw.security.verifier import TokenVerifier


class RequestGuardFactory:
    """Builds successive guards for one gateway (start-up, then each hot reload), sharing metrics.

    Prometheus refuses to register a metric name twice in one registry, so every guard built here
    reports through the same :class:`SecurityMetrics`. Satisfies ``igw.gateway.guards.GuardFactory``.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        jwks_ssl_context: ssl.SSLContext | None = None,
        processes: int = 1,
    ) -> None:
        """``processes``: how many gateway processes of one pod enforce the local rate limits, each
        its share (``igw serve --workers N``; :meth:`RateLimitSettings.shared_by`)."""
        self._metrics = SecurityMetrics(registry=registry if registry is not None else REGISTRY)
        self._clock = clock
        self._rng = rng
        self._jwks_ssl_context = jwks_ssl_context
        self._processes = processes

    @property
    def holds_refused(self) -> Counter:
        """The counter of held token bounds the guards' local buckets refused
        (``igw_ratelimit_holds_refused``), registered here: ``igw serve`` hands it to the gateway's
        EMF reporter (``RateLimitHoldsRefused``), which does not import this package."""
        return self._metrics.ratelimit_holds_refused

    def __call__(self, config: GatewayConfig) -> SecurityGuard:
        return build_request_guard(
            config,
            clock=self._clock,
            rng=self._rng,
            metrics=self._metrics,
            jwks_ssl_context=self._jwks_ssl_context,
            processes=self._processes,
        )


def build_request_guard(
    config: GatewayConfig,
    *,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
    registry: CollectorRegistry | None = None,
    metrics: SecurityMetrics | None = None,
    jwks_ssl_context: ssl.SSLContext | None = None,
    processes: int = 1,
) -> SecurityGuard:
    """The guard enforcing ``config``; raises ``ValueError`` naming the field for a bad setting.

    ``registry``: where the security metrics are registered (default: prometheus_client's global
    registry; pass a fresh one when several guards live in one process, as in tests).
    ``metrics``: already registered metrics to report through instead (see :class:`RequestGuardFactory`).
    ``jwks_ssl_context``: trust for the issuer's HTTPS endpoints (default: the system trust store).
    ``processes``: the pod's gateway processes that share the local rate limits (see
    :class:`RequestGuardFactory`).
    """
    return build_guard(
        config.auth,
        authorization=config.extensions.get("authorization"),
        rate_limits=config.extensions.get("rateLimits"),
        clock=clock,
        rng=rng,
        registry=registry,
        metrics=metrics,
        jwks_ssl_context=jwks_ssl_context,
        processes=processes,
    )


def build_guard(
    auth: AuthSpec | None,
    *,
    authorization: Mapping[str, Any] | None,
    rate_limits: Mapping[str, Any] | None,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
    registry: CollectorRegistry | None = None,
    metrics: SecurityMetrics | None = None,
    jwks_ssl_context: ssl.SSLContext | None = None,
    processes: int = 1,
    reservation_scope: tuple[str, ...] = (),
) -> SecurityGuard:
    """The guard for an ``auth`` spec and the raw ``authorization``/``rateLimits`` settings.

    Shared by a tier-1 gateway (:func:`build_request_guard`) and the global router, whose
    configuration holds the same three parts at other paths; ``reservation_scope``: its limiter's
    (the router's keeps its reservations apart from the gateways', :class:`RateLimiter`).
    """
    limits = RateLimitSettings.from_mapping(rate_limits).shared_by(processes)
    settings = replace(
        AuthorizationSettings.from_mapping(authorization), anonymous_tenant=limits.anonymous_tenant
    )
    if metrics is None:
        metrics = SecurityMetrics(registry=registry if registry is not None else REGISTRY)
    limiter = RateLimiter(
        settings=limits,
        backend=BACKENDS[limits.backend](limits, clock),
        clock=clock,
        metrics=metrics,
        processes=processes,
        reservation_scope=reservation_scope,
    )
    if auth is None:
        return SecurityGuard(settings=settings, verifier=None, jwks=None, limiter=limiter, metrics=metrics)
    provider = auth.jwt_provider
    jwks = JwksCache(
        jwks_uri=provider.jwks_uri,
        issuer=provider.issuer,
        settings=settings.jwks,
        algorithms=settings.algorithms,
        oidc_discovery=settings.oidc_discovery,
        clock=clock,
        rng=rng if rng is not None else system_random(),
        ssl_context=jwks_ssl_context,
        metrics=metrics,
    )
    verifier = TokenVerifier(provider=provider, settings=settings, jwks=jwks, clock=clock, metrics=metrics)
    return SecurityGuard(settings=settings, verifier=verifier, jwks=jwks, limiter=limiter, metrics=metrics)
