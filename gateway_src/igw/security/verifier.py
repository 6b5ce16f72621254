"""Bearer-token verification: the order of checks and where each one lives.

1. verified-token cache (:meth:`TokenVerifier.cached`, :mod:`igw.security.token_cache`) - a hit
   skips everything below, which is :meth:`TokenVerifier.verify`;
2. strict compact-JWS parsing and header checks (:mod:`igw.security.token`) - no I/O;
3. claims against the provider (:mod:`igw.security.claims`) - still no I/O, so wrong issuers and
   expired tokens never trigger a JWKS fetch;
4. key lookup in the JWKS cache (:mod:`igw.security.jwks`) - may wait for a single-flight fetch;
   a token that names no key and would be tried against more than ``jwks.maxKeysPerToken`` keys
   is refused here, before any signature check;
5. signature verification by PyJWT's algorithm objects (``cryptography``), with the algorithm
   bound to the key (never chosen by the token alone);
6. tenant and forwarded headers from the verified claims (:mod:`igw.security.identity`).

Every refusal raises :class:`~igw.security.token.TokenRejected` with a short reason.

A cache hit is the common case (a client reuses its token) and runs on every authenticated request:
one clock read, the JWKS generation and the cache look-up. The entry's bound already includes the
key set's ``usable_until`` (the verifier and the JWKS cache share one clock, see
:mod:`igw.security.factory`), so a hit does not ask the JWKS cache whether it is ready. This module
and the cache are compiled by the mypyc build (:data:`igw.compiled.COMPILED_MODULES`).
"""

from __future__ import annotations

from typing import Final

from jwt.algorithms import Algorithm, get_default_algorithms

from igw.config.model import JwtProvider
from igw.gateway.guards import Principal
from igw.security.claims import ClaimRules, validate_claims
from igw.security.clock import Clock
from igw.security.identity import build_principal
from igw.security.jwks import JwksCache, JwksUnavailable
from igw.security.metrics import SecurityMetrics
from igw.security.settings import AuthorizationSettings
from igw.security.token import parse_compact_jws, reject
from igw.security.token_cache import VerifiedTokenCache

_FORBIDDEN_ALGORITHMS: Final = frozenset({"none", "HS256", "HS384", "HS512"})


class TokenVerifier:
    def __init__(
        self,
        *,
        provider: JwtProvider,
        settings: AuthorizationSettings,
        jwks: JwksCache,
        clock: Clock,
        metrics: SecurityMetrics | None = None,
    ) -> None:
        library = get_default_algorithms()
        unsupported = [a for a in settings.algorithms if a in _FORBIDDEN_ALGORITHMS or a not in library]
        if unsupported:
            raise ValueError(f"authorization.algorithms: not allowed or not supported: {unsupported}")
        self._algorithms: dict[str, Algorithm] = {name: library[name] for name in settings.algorithms}
        self._settings = settings
        self._rules = ClaimRules.for_provider(
            provider, clock_skew_s=settings.clock_skew_s, max_lifetime_s=settings.max_token_lifetime_s
        )
        self._jwks = jwks
        self._clock = clock
        self.cache = VerifiedTokenCache(
            max_entries=settings.verified_token_cache.max_entries,
            max_age_s=settings.verified_token_cache.max_age_s,
        )
        self._cache_hit = None if metrics is None else metrics.child(metrics.token_cache, "hit")
        self._cache_miss = None if metrics is None else metrics.child(metrics.token_cache, "miss")

    def cached(self, token: str) -> Principal | None:
        """The principal of a token verified before and still reusable (a cache hit, counted), else
        ``None``: then :meth:`verify` decides. A plain call, so the common case (a client
        reusing its token) makes no coroutine."""
        cached = self.cache.get(token, now=self._clock(), generation=self._jwks.generation)
        if cached is not None and self._cache_hit is not None:
            self._cache_hit.inc()
        return cached

    async def verify(self, token: str) -> Principal:
        """Steps 2-6 for a token :meth:`cached` did not answer (the cache is not consulted again);
        a success is cached."""
        now = self._clock()
        if self._cache_miss is not None and self.cache.enabled:
            self._cache_miss.inc()
        parsed = parse_compact_jws(
            token,
            max_bytes=self._settings.max_token_bytes,
            algorithms=self._algorithms.keys(),
            allowed_types=self._settings.allowed_token_types,
        )
        exp = validate_claims(parsed.claims, rules=self._rules, now=now)
        try:
            candidates = await self._jwks.candidates(kid=parsed.kid, alg=parsed.alg)
        except JwksUnavailable:
            reject("jwks_unavailable")
        # The look-up may have waited for a fetch (up to ``jwks.fetchTimeout``, twice with OIDC
        # discovery): a token that expired meanwhile is refused, not accepted on the clock read
        # before the wait (before session s48 it was, and was cached until its expiry bound).
        now = self._clock()
        if now >= exp + self._settings.clock_skew_s:
            reject("expired")
        if not candidates:
            reject("no_matching_key")
        if len(candidates) > self._settings.jwks.max_keys_per_token:
            # a token naming no key of a large set: refused before a signature check per key
            reject("kid_required")
        algorithm = self._algorithms[parsed.alg]
        if not any(
            verify_signature(algorithm, key.key, parsed.signing_input, parsed.signature) for key in candidates
        ):
            reject("bad_signature")
        principal = build_principal(parsed.claims, settings=self._settings)
        self.cache.put(
            token,
            principal,
            now=now,
            expires_at=min(exp + self._settings.clock_skew_s, self._jwks.usable_until()),
            generation=self._jwks.generation,
        )
        return principal


def verify_signature(algorithm: Algorithm, key: object, message: bytes, signature: bytes) -> bool:
    """PyJWT's algorithm object over ``cryptography``; any library complaint is a bad signature."""
    try:
        return bool(algorithm.verify(message, key, signature))
    except (ValueError, TypeError):
        # Wrong signature length or a key/algorithm mismatch inside the library: not a valid signature.
        return False
