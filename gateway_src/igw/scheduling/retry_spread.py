"""The ``Retry-After`` a refusal sends: its computed wait, spread so that refused clients do not all
come back in the same second.

A burst refused at once (a pool saturated, a tenant over its rate, the rate limiter's Redis down, no
healthy cluster at tier 2) all had the same computed wait: until session s43 every client told
``Retry-After: 3`` came back in the same second and met the same wall (a thundering herd), the
fleet's capacity idle in between. :func:`spread_retry_after` draws the value sent uniformly from the
whole seconds between the computed wait and a tenth more (at least one second more), never below
the computed wait (a client told to wait longer than needed loses little; one told too little is
refused again) and never above the configured upper bound (``retryAfter.maxSeconds``): a wait at
that bound is sent as it is. The value stays delta-seconds, a whole number (RFC 9110 10.2.3).
"""

from __future__ import annotations

import random
from typing import Final

SPREAD_FRACTION: Final = 0.1
"""How much longer than the computed wait a refused client may be told to wait (at least 1 s more)."""


def spread_retry_after(wait_s: int, *, rng: random.Random, max_s: int | None = None) -> int:
    """A whole number of seconds drawn by ``rng`` from ``wait_s`` (the computed wait) to ``wait_s``
    plus :data:`SPREAD_FRACTION` of it (at least one more), bounded by ``max_s`` (the configured
    upper bound, when there is one; never below ``wait_s``)."""
    top = wait_s + max(1, int(wait_s * SPREAD_FRACTION))
    if max_s is not None:
        top = min(top, max_s)
    if top <= wait_s:
        return wait_s
    return rng.randint(wait_s, top)
