"""Request security for the gateway: JWT authentication, per-model authorization, tenant identity,
per-tenant rate limits and TLS termination.

The gateway sees only :class:`igw.gateway.guards.RequestGuard`;
:func:`igw.security.factory.build_request_guard` builds the one that enforces ``spec.auth`` and
our ``spec.extensions.authorization`` / ``spec.extensions.rateLimits``. TLS termination
(``spec.extensions.tlsTermination``) lives in :mod:`igw.security.tls`.

One concern per module:

- ``settings``        typed readers (with the documented defaults) for our three extensions
- ``token``           cheap, strict parsing of a compact JWS before any key lookup
- ``claims``          registered-claim and ``requiredClaims`` validation (injected clock)
- ``jwk``             JWK -> verification key, bound to exactly the algorithms its type allows
- ``fetch``           bounded HTTPS GET (timeouts, body cap, same-host redirects only)
- ``jwks``            the asynchronous JWKS cache (TTL, single flight, kid cooldown, max stale)
- ``verifier``        the token verifier that ties the above together
- ``token_cache``     the verified-token cache (bounded by exp, max age and the JWKS generation)
- ``identity``        tenant and forwarded-claim headers (CR/LF and size checked)
- ``authorization``   claim -> allowed models
- ``ratelimit``       per-tenant token buckets, local and Redis backends, the unavailable policy
- ``denials``         the 401/403/429 responses; ``metrics`` the Prometheus series
- ``guard``           the RequestGuard implementation; ``factory`` builds it from a GatewayConfig
- ``tls``             the server SSL context and certificate reload
- ``clock``           the injectable clock and random source
"""
