"""Prometheus metrics of request security, registered on an injected registry.

Names (all prefixed ``igw_``): ``auth_enabled`` (gauge, 0 when ``spec.auth`` is absent),
``auth_allowed_total``, ``auth_denied_total{reason}``, ``auth_token_cache_total{result}``,
``jwks_fetch_total{result}``, ``jwks_keys``, ``jwks_age_seconds``, ``jwks_ready``,
``tenant_requests_total{tenant,outcome}``, ``tenant_tokens_total{tenant,kind}``,
``ratelimit_backend_errors_total{backend}``, ``ratelimit_backend_up{backend}``,
``ratelimit_holds_refused_total`` (the global router passes its own, ``igw_global_...``).

``tenant`` values come from verified tokens (or the configured anonymous tenant), which bounds
them by the issuer, not by clients - but not by much when the tenant claim is per user
(``tenantClaim: sub``). So the label is bounded as flow control's is (:mod:`igw.gateway.tenant_labels`,
one :class:`~igw.gateway.tenant_labels.TenantLabels` per registry, shared with flow control's
``igw_flow_rejections`` and kept across reloads): the tenants ``rateLimits.tenants`` names and the
anonymous tenant keep their name, then the first ``rateLimits.metrics.maxTenantLabels`` (32) others;
every later tenant is counted as ``other``, and a real tenant named ``other`` as ``~other``.
Before session s39 10,000 users made 10,000 series per outcome (a 4.6 MB ``/metrics`` page).

The counters an admitted request touches (``auth_allowed``, ``auth_token_cache``, ``tenant_requests``,
``tenant_tokens``) are batched as the gateway's request metrics are (:mod:`igw.gateway.metric_batch`):
the request path adds to a plain number, folded into prometheus_client when the family is collected.
Reach them through :meth:`SecurityMetrics.child` (or :attr:`SecurityMetrics.allowed`).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics import MetricWrapperBase

from igw.gateway.metric_batch import FoldingCounter, MetricBatch, PendingCount
from igw.gateway.tenant_labels import TenantLabels

HOLDS_REFUSED_HELP = (
    "Token bounds held for a background response that the local rate-limit buckets did not keep "
    "(their table full of other tenants' holds, one each): never settled, the tenant stays charged "
    "the whole bound (the WARNING igw.security.ratelimit.holds_refused is logged once a minute)."
)


class SecurityMetrics:
    def __init__(self, *, registry: CollectorRegistry, holds_refused: Counter | None = None) -> None:
        """``holds_refused``: the counter of reservations the local buckets did not keep, when the
        caller declares it (the global router's ``igw_global_ratelimit_holds_refused``); by default
        ``igw_ratelimit_holds_refused`` is registered here."""
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._batch = MetricBatch()
        self.tenant_labels = TenantLabels.of(registry)
        """The ``tenant`` label of ``tenant_requests`` and ``tenant_tokens`` (module docstring), shared
        with flow control's ``igw_flow_rejections`` on the same registry."""
        self.auth_enabled_owner: object | None = None
        """The started guard whose mode ``auth_enabled`` shows (guards are swapped on hot reload)."""
        self.auth_enabled = Gauge(
            "igw_auth_enabled",
            "1 when spec.auth is set and every inference request needs a verified JWT; 0 when open.",
            registry=registry,
        )
        self.auth_allowed = FoldingCounter(
            "igw_auth_allowed", "Requests whose bearer token verified.", registry=registry
        )
        self.auth_denied = Counter(
            "igw_auth_denied", "Requests refused with 401, by reason.", ["reason"], registry=registry
        )
        self.token_cache = FoldingCounter(
            "igw_auth_token_cache",
            "Verified-token cache lookups (hit skips signature verification).",
            ["result"],
            registry=registry,
        )
        self.jwks_fetch = Counter(
            "igw_jwks_fetch", "JWKS fetch attempts, by result.", ["result"], registry=registry
        )
        self.jwks_keys = Gauge("igw_jwks_keys", "Usable keys in the cached JWKS.", registry=registry)
        self.jwks_age = Gauge(
            "igw_jwks_age_seconds",
            "Seconds since the JWKS was last fetched successfully (-1 before the first).",
            registry=registry,
        )
        self.jwks_ready = Gauge(
            "igw_jwks_ready", "1 when usable (not too stale) keys are loaded.", registry=registry
        )
        self.tenant_requests = FoldingCounter(
            "igw_tenant_requests",
            "Inference requests per tenant by outcome (admitted, forbidden, limited_requests, "
            "limited_tokens, limiter_unavailable).",
            ["tenant", "outcome"],
            registry=registry,
        )
        self.tenant_tokens = FoldingCounter(
            "igw_tenant_tokens",
            "Tokens accounted per tenant (from the model server's usage), by kind.",
            ["tenant", "kind"],
            registry=registry,
        )
        for batched in (self.auth_allowed, self.token_cache, self.tenant_requests, self.tenant_tokens):
            batched.folds = self._batch.fold
        allowed = self._batch.pending(self.auth_allowed, self.auth_allowed)
        assert isinstance(allowed, PendingCount)
        self.allowed: PendingCount = allowed
        """``auth_allowed``'s batched increments (the request path's)."""
        self.ratelimit_backend_errors = Counter(
            "igw_ratelimit_backend_errors",
            "Rate-limit backend failures (the unavailable policy was applied).",
            ["backend"],
            registry=registry,
        )
        self.ratelimit_backend_up = Gauge(
            "igw_ratelimit_backend_up",
            "1 while the rate-limit backend answers.",
            ["backend"],
            registry=registry,
        )
        self.ratelimit_holds_refused = (
            holds_refused
            if holds_refused is not None
            else Counter("igw_ratelimit_holds_refused", HOLDS_REFUSED_HELP, registry=registry)
        )

    def child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)`` (positional, in declaration order), cached - the lookup costs
        several µs and per-tenant counters are touched on every request - and batched when
        ``metric`` is one of the batched counters (module docstring). Callers pass a tenant through
        :attr:`tenant_labels` first, so the cache is bounded like the label set."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = metric.labels(*labels)
            if isinstance(metric, FoldingCounter):
                found = self._batch.pending(metric, found)
            self._children[key] = found
        return found
