"""The responses the guard refuses requests with (RFC 6750 challenges, OpenAI-style error bodies).

Authentication failures never say *why* to the client unless debug logging is on for
``igw.security``: the reason is logged and counted instead (``igw_auth_denied_total{reason}``),
because a precise reason helps an attacker probe the validator.
"""

from __future__ import annotations

import logging
import math
import random

from igw.gateway.guards import GuardDenied
from igw.scheduling.retry_spread import spread_retry_after

log = logging.getLogger("igw.security")

INVALID_TOKEN_CHALLENGE = 'Bearer error="invalid_token"'
MISSING_TOKEN_CHALLENGE = "Bearer"


def unauthorized(*, reason: str, token_present: bool) -> GuardDenied:
    """401. Without a token RFC 6750 §3.1 says to send a bare ``Bearer`` challenge; the issue asks for
    ``error="invalid_token"`` on every failure, which is also valid, so we always send it."""
    del token_present  # one challenge for every case keeps missing vs. bad tokens indistinguishable
    debug = log.isEnabledFor(logging.DEBUG)
    message = f"invalid bearer token: {reason}" if debug else "missing or invalid bearer token"
    return GuardDenied(
        status=401,
        message=message,
        error_type="authentication_error",
        code="invalid_token",
        headers={"WWW-Authenticate": INVALID_TOKEN_CHALLENGE},
    )


def forbidden_model(*, model: str, tenant: str | None) -> GuardDenied:
    who = f"tenant {tenant!r}" if tenant else "this caller"
    return GuardDenied(
        status=403,
        message=f"{who} is not allowed to use model {model!r}",
        error_type="permission_error",
        code="model_not_allowed",
        headers={"WWW-Authenticate": 'Bearer error="insufficient_scope"'},
    )


def rate_limited(*, tenant: str, limit: str, retry_after_s: float, rng: random.Random) -> GuardDenied:
    """429 for a tenant over ``limit``: ``Retry-After`` is the wait until its bucket holds enough
    again, spread by ``rng`` (:mod:`igw.scheduling.retry_spread`: a tenant's clients refused at once
    do not come back at once)."""
    seconds = spread_retry_after(max(1, math.ceil(retry_after_s)), rng=rng)
    return GuardDenied(
        status=429,
        message=f"rate limit exceeded for tenant {tenant!r} ({limit}); retry after {seconds} s",
        error_type="rate_limit_error",
        code="rate_limit_exceeded",
        headers={"Retry-After": str(seconds)},
    )


def limiter_unavailable(*, tenant: str, rng: random.Random) -> GuardDenied:
    """Fail-closed rate limiting while Redis is unreachable: 429 with a short retry (1 s, spread by
    ``rng`` as :func:`rate_limited`'s), never a 5xx."""
    return GuardDenied(
        status=429,
        message=f"rate limiter unavailable; request for tenant {tenant!r} refused (fail-closed policy)",
        error_type="rate_limit_error",
        code="rate_limiter_unavailable",
        headers={"Retry-After": str(spread_retry_after(1, rng=rng))},
    )
