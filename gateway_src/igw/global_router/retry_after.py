"""The ``Retry-After`` of an answer relayed after several clusters refused a request.

When every cluster the router tried answered 429 (or a 503 it retries), the client gets the last
cluster's answer. Its ``Retry-After`` alone is the wrong advice: the request could go anywhere the
router would send it, so the client may come back when the *soonest* of the clusters tried expects
room. :func:`soonest_retry_after` reads each answer's value (delta-seconds or an HTTP date,
RFC 9110 10.2.3), takes the smallest, and bounds it to what a tier-1 gateway can send
(``retryAfter.maxSeconds`` allows up to :data:`MAX_RETRY_AFTER_S`): a broken or hostile gateway's
``999999999`` or a date in 2099 cannot tell clients to stay away for years. A value that cannot be
read is ignored (RFC 9110: a recipient ignores an invalid field). Until session s39 the last
cluster's value was relayed as it came: three clusters answering ``30``, ``2`` and ``999999999``
told the client to wait 999999999 s, although one of them expected room in 2.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Iterable
from typing import Final

MIN_RETRY_AFTER_S: Final = 1
"""The least wait relayed (a tier-1 gateway's ``retryAfter.minSeconds`` floor)."""
MAX_RETRY_AFTER_S: Final = 3600
"""The longest wait relayed: the most a tier-1 gateway's ``retryAfter.maxSeconds`` may be."""


def retry_after_seconds(value: str, *, now: float) -> float | None:
    """Seconds ``value`` (a ``Retry-After`` field) asks to wait at wall-clock time ``now`` (seconds since
    the epoch), or ``None`` when it is neither a delta-seconds nor an HTTP date."""
    text = value.strip()
    if not text.isascii():
        return None
    if text.isdigit():  # RFC 9110 delta-seconds: ASCII digits, no sign, no fraction
        return float(text)  # inf for a number past a float's range: bounded by the caller
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": a date without a zone (HTTP dates are always GMT)
        return None
    return max(0.0, when.timestamp() - now)


def soonest_retry_after(values: Iterable[str], *, now: float) -> int | None:
    """The smallest wait among ``values`` (the ``Retry-After`` fields of the answers tried) in whole
    seconds within [:data:`MIN_RETRY_AFTER_S`, :data:`MAX_RETRY_AFTER_S`], or ``None`` when none
    can be read."""
    waits = [s for s in (retry_after_seconds(v, now=now) for v in values) if s is not None]
    if not waits:
        return None
    return max(MIN_RETRY_AFTER_S, math.ceil(min(MAX_RETRY_AFTER_S, *waits)))
