"""Gateway API durations (``GEP-2257``): ``10s``, ``1h30m``, ``500ms``, ``0s``.

The grammar is deliberately small - one to four ``<1-5 digits><unit>`` groups with units ``h``,
``m``, ``s``, ``ms`` - so that every implementation parses a value the same way. We accept exactly
that, nothing looser (no fractions, no ``us``, no spaces), because a value the gateway accepts but
Kubernetes' own Gateway API validation rejects would make the same file behave differently.
Groups add up, as in Go's ``time.ParseDuration`` (``1m30s`` = 90 s).
"""

from __future__ import annotations

import re
from typing import Final

DURATION_PATTERN: Final = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
"""The GEP-2257 regular expression; the JSON Schema uses the same string."""

_WHOLE = re.compile(DURATION_PATTERN)
_GROUP = re.compile(r"([0-9]{1,5})(ms|h|m|s)")
_UNIT_SECONDS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """Return the duration in seconds; ``ValueError`` naming the accepted form otherwise."""
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise ValueError(
            f"invalid duration {text!r}: expected 1-4 groups of up to 5 digits followed by "
            "h, m, s or ms, like '10s', '1h30m', '500ms' or '0s'"
        )
    return sum(int(digits) * _UNIT_SECONDS[unit] for digits, unit in _GROUP.findall(text))


def format_duration(seconds: float) -> str:
    """The shortest Gateway API duration for ``seconds`` (rounded to milliseconds)."""
    millis = round(seconds * 1000)
    if millis < 0:
        raise ValueError(f"a duration cannot be negative: {seconds}")
    if millis == 0:
        return "0s"
    parts: list[str] = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
