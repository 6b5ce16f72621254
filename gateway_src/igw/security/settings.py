"""Typed readers for our security extensions, with their documented defaults.

``spec.extensions.authorization``, ``spec.extensions.rateLimits`` and ``spec.extensions.tlsTermination``
arrive as raw mappings that already passed their JSON Schemas (``schemas/extensions/*.schema.json``).
Durations are Gateway API durations (``10s``, ``5m``, ``250ms``), as everywhere else in the
configuration. This module is the one place their defaults are applied;
``tests/security/test_settings.py`` checks that every ``default`` stated in a schema equals the
default here, so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import ceil
from typing import Any, Final, Literal

from igw.config.durations import parse_duration
from igw.config.rules import MIN_TLS_RELOAD_INTERVAL_S, MIN_UNKNOWN_KID_COOLDOWN_S
from igw.gateway.tenant_labels import ANONYMOUS_TENANT

DEFAULT_ALGORITHMS: Final[tuple[str, ...]] = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""Asymmetric algorithms only: a gateway verifying an issuer's tokens never holds an HMAC secret."""


@dataclass(frozen=True, slots=True)
class JwksSettings:
    ttl_s: float = 300.0
    """Keys are refreshed in the background this long after the last successful fetch."""
    max_stale_s: float = 86_400.0
    """While the issuer is down, the last good keys are used for at most this long; then fail closed."""
    unknown_kid_cooldown_s: float = 30.0
    """An unknown ``kid`` triggers at most one refetch per this many seconds (never below 10 s)."""
    fetch_timeout_s: float = 5.0
    max_bytes: int = 524_288
    max_keys: int = 100
    max_keys_per_token: int = 4
    """A token that names no key of the set (no ``kid``, or a ``kid`` no key carries) may be checked
    against every key bound to its algorithm (and published without ``kid``, for the second); when
    those are more than this, it is refused (``kid_required``) without any signature check. Each check
    costs 60-130 µs of CPU, so an unauthenticated flood of forged kid-less tokens cost up to
    ``maxKeys`` (1,000) of them per token before session s40: 26 ms (RS256) to 105 ms (EdDSA)."""


@dataclass(frozen=True, slots=True)
class ClaimHeader:
    claim: str
    """Claim name; nested claims with dots, for example ``org.id``."""
    header: str
    """Header name set on the upstream request (client copies are always stripped)."""


@dataclass(frozen=True, slots=True)
class ModelAccessRule:
    """Callers whose ``claim`` holds any of ``values`` may use ``models`` (exact names or ``*`` globs)."""

    claim: str
    values: tuple[str, ...]
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VerifiedTokenCacheSettings:
    max_entries: int = 10_000
    """0 disables the cache; every request then pays a signature verification."""
    max_age_s: float = 60.0
    """A cached verdict is reused for at most this long, and never past the token's ``exp``."""


@dataclass(frozen=True, slots=True)
class AuthorizationSettings:
    tenant_claim: str = "tenant"
    tenant_header: str | None = "x-igw-tenant"
    """Header carrying the tenant to model servers; ``None`` (``tenantHeader: ""``) to not forward it."""
    require_tenant: bool = False
    """When true, a verified token without the tenant claim is refused (401)."""
    anonymous_tenant: str | None = None
    """``rateLimits.anonymousTenant`` (set by the guard's builder, not read from this extension): a
    verified token naming it as its tenant is refused (401 ``tenant_reserved``), since it would
    otherwise share the anonymous callers' bucket, limits and metric series."""
    isolate_prefix_caches: bool = False
    """``prefixCacheIsolation: tenant``: each caller scope's prompts are cached under a salt of its
    own in the model servers (:mod:`igw.gateway.cache_salt`); ``shared`` (false): one cache."""
    model_access: tuple[ModelAccessRule, ...] = ()
    """Empty: every authenticated caller may use every model. Non-empty: default deny."""
    forward_claims: tuple[ClaimHeader, ...] = ()
    forward_authorization: bool = False
    max_forwarded_header_bytes: int = 1024
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    clock_skew_s: float = 60.0
    max_token_lifetime_s: float | None = None
    """When set, tokens whose ``exp`` lies further than this in the future are refused (RFC 8725 advice)."""
    max_token_bytes: int = 8192
    allowed_token_types: tuple[str, ...] = ()
    """When non-empty, the JOSE ``typ`` header must be one of these (case-insensitive,
    ``application/`` optional)."""
    oidc_discovery: bool = False
    jwks: JwksSettings = field(default_factory=JwksSettings)
    verified_token_cache: VerifiedTokenCacheSettings = field(default_factory=VerifiedTokenCacheSettings)
    allowed_engine_fields: frozenset[str] = frozenset()
    """``allowedEngineFields``: the engine fields authenticated callers may send although no tenant
    of a shared model server should (:data:`igw.gateway.tenant_fields.TENANT_REFUSED_FIELDS`, the
    schema's enum); empty: every one is refused."""

    @property
    def forwarded_header_names(self) -> frozenset[str]:
        names = {ch.header.lower() for ch in self.forward_claims}
        if self.tenant_header:
            names.add(self.tenant_header.lower())
        return frozenset(names)

    @staticmethod
    def from_mapping(raw: Mapping[str, Any] | None) -> AuthorizationSettings:
        raw = raw or {}
        jwks_raw: Mapping[str, Any] = raw.get("jwks", {})
        jwks_defaults = JwksSettings()
        jwks = JwksSettings(
            ttl_s=_duration(jwks_raw, "ttl", jwks_defaults.ttl_s),
            max_stale_s=_duration(jwks_raw, "maxStale", jwks_defaults.max_stale_s),
            unknown_kid_cooldown_s=_duration(
                jwks_raw, "unknownKidCooldown", jwks_defaults.unknown_kid_cooldown_s
            ),
            fetch_timeout_s=_duration(jwks_raw, "fetchTimeout", jwks_defaults.fetch_timeout_s),
            max_bytes=int(jwks_raw.get("maxBytes", jwks_defaults.max_bytes)),
            max_keys=int(jwks_raw.get("maxKeys", jwks_defaults.max_keys)),
            max_keys_per_token=int(jwks_raw.get("maxKeysPerToken", jwks_defaults.max_keys_per_token)),
        )
        if jwks.unknown_kid_cooldown_s < MIN_UNKNOWN_KID_COOLDOWN_S:
            raise ValueError(
                "spec.extensions.authorization.jwks.unknownKidCooldown: must be at least 10s "
                f"(got {jwks.unknown_kid_cooldown_s:g} s); "
                "a shorter cooldown lets unknown-kid floods hammer the issuer"
            )
        for name, value in (("ttl", jwks.ttl_s), ("fetchTimeout", jwks.fetch_timeout_s)):
            if value <= 0:
                raise ValueError(f"spec.extensions.authorization.jwks.{name}: must be greater than 0s")
        if jwks.max_stale_s < jwks.ttl_s:
            raise ValueError(
                f"spec.extensions.authorization.jwks.maxStale: must be at least ttl ({jwks.ttl_s:g} s, "
                f"got {jwks.max_stale_s:g} s); the keys would go unusable before their refresh"
            )
        cache_raw: Mapping[str, Any] = raw.get("verifiedTokenCache", {})
        cache_defaults = VerifiedTokenCacheSettings()
        cache = VerifiedTokenCacheSettings(
            max_entries=int(cache_raw.get("maxEntries", cache_defaults.max_entries)),
            max_age_s=_duration(cache_raw, "maxAge", cache_defaults.max_age_s),
        )
        defaults = AuthorizationSettings()
        lifetime = raw.get("maxTokenLifetime")
        return AuthorizationSettings(
            tenant_claim=str(raw.get("tenantClaim", defaults.tenant_claim)),
            isolate_prefix_caches=raw.get("prefixCacheIsolation", "shared") == "tenant",
            tenant_header=str(raw.get("tenantHeader", defaults.tenant_header)) or None,
            require_tenant=bool(raw.get("requireTenant", defaults.require_tenant)),
            model_access=tuple(
                ModelAccessRule(
                    claim=str(rule["claim"]),
                    values=_strings(rule["values"]),
                    models=_strings(rule["models"]),
                )
                for rule in raw.get("modelAccess", ())
            ),
            forward_claims=tuple(
                ClaimHeader(claim=str(item["claim"]), header=str(item["header"]))
                for item in raw.get("forwardClaims", ())
            ),
            forward_authorization=bool(raw.get("forwardAuthorization", defaults.forward_authorization)),
            max_forwarded_header_bytes=int(
                raw.get("maxForwardedHeaderBytes", defaults.max_forwarded_header_bytes)
            ),
            algorithms=_strings(raw.get("algorithms", defaults.algorithms)),
            clock_skew_s=_duration(raw, "clockSkew", defaults.clock_skew_s),
            max_token_lifetime_s=None if lifetime is None else parse_duration(lifetime),
            max_token_bytes=int(raw.get("maxTokenBytes", defaults.max_token_bytes)),
            allowed_token_types=_strings(raw.get("allowedTokenTypes", defaults.allowed_token_types)),
            oidc_discovery=bool(raw.get("oidcDiscovery", defaults.oidc_discovery)),
            jwks=jwks,
            verified_token_cache=cache,
            allowed_engine_fields=frozenset(_strings(raw.get("allowedEngineFields", ()))),
        )


RedisUnavailablePolicy = Literal["local", "allow", "deny"]


@dataclass(frozen=True, slots=True)
class TenantLimits:
    requests_per_second: float | None = None
    """``None``: no request-rate limit."""
    burst: int | None = None
    """Request bucket capacity; defaults to ``max(1, ceil(requests_per_second))``."""
    tokens_per_minute: float | None = None
    """``None``: no token limit. Tokens are ``usage.prompt_tokens + usage.completion_tokens``."""
    token_burst: int | None = None
    """Token bucket capacity; defaults to ``tokens_per_minute`` (one minute's worth)."""

    @property
    def request_capacity(self) -> float:
        if self.requests_per_second is None:
            return 0.0
        if self.burst is not None:
            return float(self.burst)
        return float(max(1, -(-self.requests_per_second // 1)))

    @property
    def token_capacity(self) -> float:
        if self.tokens_per_minute is None:
            return 0.0
        return float(self.token_burst if self.token_burst is not None else self.tokens_per_minute)

    @property
    def limited(self) -> bool:
        return self.requests_per_second is not None or self.tokens_per_minute is not None

    def shared_by(self, processes: int) -> TenantLimits:
        """The share of these limits that each of ``processes`` processes enforces on its own buckets
        so that together they enforce the whole (``igw serve --workers N``, local backend): rates
        divided, bucket sizes divided and rounded up, a request bucket never under one request (a
        worker must be able to admit one)."""
        if processes <= 1:
            return self
        rps, tpm = self.requests_per_second, self.tokens_per_minute
        return TenantLimits(
            requests_per_second=None if rps is None else rps / processes,
            burst=None if rps is None else max(1, ceil(self.request_capacity / processes)),
            tokens_per_minute=None if tpm is None else tpm / processes,
            token_burst=None if tpm is None else max(1, ceil(self.token_capacity / processes)),
        )


@dataclass(frozen=True, slots=True)
class RedisSettings:
    url: str = "redis://127.0.0.1:6379/0"
    password_env: str | None = None
    """The environment variable holding the password (:mod:`igw.config.redis_password`)."""
    key_prefix: str = "igw:rl:"
    connect_timeout_s: float = 0.25
    command_timeout_s: float = 0.25
    retry_after_failure_s: float = 5.0
    """After Redis fails, it is not asked again for this long (the unavailable policy applies meanwhile)."""


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    backend: Literal["local", "redis"] = "local"
    redis: RedisSettings = field(default_factory=RedisSettings)
    on_redis_unavailable: RedisUnavailablePolicy = "local"
    """``local``: this replica's own buckets decide; ``allow``: fail open; ``deny``: fail closed (429)."""
    default: TenantLimits = field(default_factory=TenantLimits)
    tenants: Mapping[str, TenantLimits] = field(default_factory=dict)
    anonymous_tenant: str = ANONYMOUS_TENANT
    """Bucket key for callers without a tenant (no ``spec.auth``, or a token without the tenant claim)."""
    max_tenant_labels: int = 32
    """``metrics.maxTenantLabels``: how many tenants beyond the named ones (``tenants``,
    ``anonymous_tenant``) get their own ``tenant`` label in ``igw_tenant_*`` (the first seen by the
    process; later ones are ``other``: :mod:`igw.gateway.tenant_labels`)."""

    @property
    def labelled_tenants(self) -> frozenset[str]:
        """Tenants that always get their own ``tenant`` label: those the configuration names."""
        return frozenset((*self.tenants, self.anonymous_tenant))

    def limits_for(self, tenant: str) -> TenantLimits:
        return self.tenants.get(tenant, self.default)

    def shared_by(self, processes: int) -> RateLimitSettings:
        """These settings for one of ``processes`` worker processes that each keep their own local
        buckets (:meth:`TenantLimits.shared_by`): with the ``local`` backend a tenant then gets its
        limits per pod, as configured, not once per worker. The ``redis`` backend is shared by every
        process already and is left as it is (its ``onRedisUnavailable: local`` fallback included)."""
        if processes <= 1 or self.backend != "local":
            return self
        return replace(
            self,
            default=self.default.shared_by(processes),
            tenants={tenant: limits.shared_by(processes) for tenant, limits in self.tenants.items()},
        )

    @property
    def enabled(self) -> bool:
        return self.default.limited or any(t.limited for t in self.tenants.values())

    @staticmethod
    def from_mapping(raw: Mapping[str, Any] | None) -> RateLimitSettings:
        raw = raw or {}
        defaults = RateLimitSettings()
        redis_raw: Mapping[str, Any] = raw.get("redis", {})
        rd = RedisSettings()
        redis = RedisSettings(
            url=str(redis_raw.get("url", rd.url)),
            password_env=redis_raw.get("passwordEnv"),
            key_prefix=str(redis_raw.get("keyPrefix", rd.key_prefix)),
            connect_timeout_s=_duration(redis_raw, "connectTimeout", rd.connect_timeout_s),
            command_timeout_s=_duration(redis_raw, "commandTimeout", rd.command_timeout_s),
            retry_after_failure_s=_duration(redis_raw, "retryAfterFailure", rd.retry_after_failure_s),
        )
        return RateLimitSettings(
            backend=raw.get("backend", defaults.backend),
            redis=redis,
            on_redis_unavailable=raw.get("onRedisUnavailable", defaults.on_redis_unavailable),
            default=_tenant_limits(raw.get("default", {})),
            tenants=_tenant_overrides(raw.get("tenants", ())),
            anonymous_tenant=str(raw.get("anonymousTenant", defaults.anonymous_tenant)),
            max_tenant_labels=int(
                (raw.get("metrics") or {}).get("maxTenantLabels", defaults.max_tenant_labels)
            ),
        )


@dataclass(frozen=True, slots=True)
class TlsTerminationSettings:
    cert_file: str
    key_file: str
    min_version: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2"
    reload_interval_s: float = 10.0
    """How often the certificate and key files are checked for changes (cert-manager rewrites them)."""

    @staticmethod
    def from_mapping(raw: Mapping[str, Any] | None) -> TlsTerminationSettings | None:
        if not raw:
            return None
        defaults_min: Literal["TLSv1.2", "TLSv1.3"] = "TLSv1.2"
        reload_interval_s = _duration(raw, "reloadInterval", 10.0)
        if reload_interval_s < MIN_TLS_RELOAD_INTERVAL_S:  # rule tls-reload-interval-minimum
            raise ValueError(
                f"spec.extensions.tlsTermination.reloadInterval: must be at least 100ms, got "
                f"{reload_interval_s:g}s (the files would be re-read without pause)"
            )
        return TlsTerminationSettings(
            cert_file=str(raw["certFile"]),
            key_file=str(raw["keyFile"]),
            min_version=raw.get("minVersion", defaults_min),
            reload_interval_s=reload_interval_s,
        )


def _tenant_overrides(items: Sequence[Mapping[str, Any]]) -> dict[str, TenantLimits]:
    overrides: dict[str, TenantLimits] = {}
    for index, item in enumerate(items):
        tenant = str(item["tenant"])
        if tenant in overrides:
            raise ValueError(
                f"spec.extensions.rateLimits.tenants[{index}].tenant: {tenant!r} is listed more than once"
            )
        overrides[tenant] = _tenant_limits(item)
    return overrides


def _tenant_limits(raw: Mapping[str, Any]) -> TenantLimits:
    def opt_float(name: str) -> float | None:
        value = raw.get(name)
        return None if value is None else float(value)

    def opt_int(name: str) -> int | None:
        value = raw.get(name)
        return None if value is None else int(value)

    return TenantLimits(
        requests_per_second=opt_float("requestsPerSecond"),
        burst=opt_int("burst"),
        tokens_per_minute=opt_float("tokensPerMinute"),
        token_burst=opt_int("tokenBurst"),
    )


def _duration(raw: Mapping[str, Any], name: str, default: float) -> float:
    value = raw.get(name)
    return default if value is None else parse_duration(value)


def _strings(values: Sequence[Any]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)
