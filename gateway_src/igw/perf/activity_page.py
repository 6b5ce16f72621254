"""A benchmark backend's ``/metrics`` page whose activity counters move with the requests it served.

A live vLLM or SGLang server's prompt and generation token counters grow with every request, and
the gateway relies on that: a page that stays byte-identical while requests are dispatched to the
pod is judged *frozen* and the pod stale (see :mod:`igw.gateway.scraper`). The benchmark backends
used to serve one fixed page, so after ``staleThreshold`` of load every endpoint was stale and every
measured decision took the all-stale fallback instead of the full scoring the benchmark claims to
measure. The page here keeps the realistic page's bytes and rewrites only the counters' values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

ACTIVITY_COUNTERS: Final = ("prompt_tokens_total", "generation_tokens_total")
"""Counter families (after the engine's ``vllm:`` / ``sglang:`` prefix) moved per request served."""

_VALUE = re.compile(
    rb"^((?:vllm|sglang):(?:" + b"|".join(c.encode() for c in ACTIVITY_COUNTERS) + rb")\{[^}]*\} )\S+$",
    re.M,
)


@dataclass(slots=True)
class ActivityPage:
    """``page`` with its activity counters' values replaced by ``served × tokens_per_request``."""

    page: bytes
    tokens_per_request: int = 4
    served: int = 0
    _pieces: list[bytes] = field(init=False)

    def __post_init__(self) -> None:
        pieces: list[bytes] = []
        start = 0
        for match in _VALUE.finditer(self.page):
            pieces.append(self.page[start : match.end(1)])
            start = match.end()
        pieces.append(self.page[start:])
        self._pieces = pieces

    @property
    def counters(self) -> int:
        """How many counter values move (0: the page has none, and stays fixed)."""
        return len(self._pieces) - 1

    def render(self) -> bytes:
        value = b"%d.0" % (self.served * self.tokens_per_request)
        return value.join(self._pieces)
