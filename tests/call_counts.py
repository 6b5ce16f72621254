"""Calls counted with ``sys.setprofile``: the tests that pin work a hot path no longer does (issue 16)
count what ran instead of timing it, so they fail when the cut work comes back, whatever the load."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """Python calls by code name and C calls by function name (``c:<name>``), in this thread."""
    calls: Counter[str] = Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls[frame.f_code.co_name] += 1
        elif event == "c_call":
            calls[f"c:{getattr(arg, '__name__', '?')}"] += 1

    sys.setprofile(hook)
    try:
        yield calls
    finally:
        sys.setprofile(None)
