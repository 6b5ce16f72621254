"""Suite-wide fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from igw.gateway.log_throttle import live_throttles


@pytest.fixture(autouse=True)
def _held_log_repeats_stay_in_their_test() -> Iterator[None]:
    """The module-level log throttles (:mod:`igw.gateway.log_throttle`) log a held repeat when its
    window ends, on a timer thread: one test's would land a minute later in another test's captured
    log. Dropped at each test's end instead, with the kinds each throttle has seen: a pod's address
    one test logged, on a port a later test's pod reuses, held that test's first line."""
    yield
    for throttle in live_throttles():
        throttle.forget()
