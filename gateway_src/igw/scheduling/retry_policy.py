"""Which refusals a request is tried again for on the next-best endpoint
(``spec.extensions.routing.retry``): the conditions, the policy, and a model server's refusal status
mapped to its condition - one table for ``igw serve`` (:mod:`igw.gateway.retries`) and the DES.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

DEFAULT_RETRY_ATTEMPTS: Final = 2
DEFAULT_RETRY_BUDGET_PERCENT: Final = 20
DEFAULT_MIN_RETRY_CONCURRENCY: Final = 3
UNAVAILABLE_STATUSES: Final = frozenset({502, 503, 504})
"""The model server's answers that say "not now" (a sidecar proxy's 502/504, the engine's 503)."""


class RetryCondition(StrEnum):
    """A refusal ``retry.retryOn`` can name (see :mod:`igw.gateway.retries` for how an attempt's
    outcome is classified)."""

    CONNECT_FAILURE = "connect-failure"
    """No connection: the model server never saw the request."""
    UNAVAILABLE = "unavailable"
    """The model server answered 502, 503 or 504 with nothing generated."""
    RATE_LIMITED = "rate-limited"
    """The model server answered 429."""
    MODEL_MISSING = "model-missing"
    """The model server answered 404 for the requested model (an adapter not loaded there)."""
    ANY_5XX = "5xx"
    """Any 5xx answer, and a connection closed before the answer's head."""


DEFAULT_RETRY_ON: Final = frozenset(
    {
        RetryCondition.CONNECT_FAILURE,
        RetryCondition.UNAVAILABLE,
        RetryCondition.RATE_LIMITED,
        RetryCondition.MODEL_MISSING,
    }
)
"""Every condition but ``5xx``: a request that crashes an engine (500, a reset) would crash the next."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """``spec.extensions.routing.retry``: which refusals a request is tried again for, on the
    picker's next-best endpoint, and the budget that bounds those retries (Envoy's retry budget)."""

    attempts: int = DEFAULT_RETRY_ATTEMPTS
    """Tries per request, the first included (1: never retry)."""
    retry_on: frozenset[RetryCondition] = DEFAULT_RETRY_ON
    budget_percent: int = DEFAULT_RETRY_BUDGET_PERCENT
    """A pool's retries of answered requests in flight at once: at most this share of the requests in
    flight at its pods (or ``min_retry_concurrency``, whichever is more; per pool since session s50,
    :mod:`igw.gateway.retries`). Connect failures are not budgeted."""
    min_retry_concurrency: int = DEFAULT_MIN_RETRY_CONCURRENCY


NO_RETRY: Final = RetryPolicy(attempts=1)
"""One try per request: what a policy without a gateway's retries gets."""


def refusal_condition(status: int) -> RetryCondition | None:
    """The condition a model server's own refusal (an error answer with nothing generated) meets, by
    its status; ``None`` for a client error other than 404 and 429 (the request's fault: another pod
    would refuse it too)."""
    if status == 404:
        return RetryCondition.MODEL_MISSING
    if status == 429:
        return RetryCondition.RATE_LIMITED
    if status in UNAVAILABLE_STATUSES:
        return RetryCondition.UNAVAILABLE
    if status >= 500:
        return RetryCondition.ANY_5XX
    return None


def retried_for(condition: RetryCondition, retry_on: frozenset[RetryCondition]) -> bool:
    """Whether ``retryOn`` covers ``condition``: named itself, or (for a 502, 503 or 504 answer)
    through ``5xx``, which covers every 5xx."""
    return condition in retry_on or (
        condition is RetryCondition.UNAVAILABLE and RetryCondition.ANY_5XX in retry_on
    )
