"""The clock and random source of security code, injectable so expiry, TTLs and jitter are testable."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Final

Clock = Callable[[], float]
"""Seconds since the epoch (wall clock): token times (``exp``/``nbf``/``iat``) are wall-clock times."""

SYSTEM_CLOCK: Final[Clock] = time.time


def system_random() -> random.Random:
    """A fresh random source for jitter; tests pass ``random.Random(seed)`` instead."""
    return random.Random()
