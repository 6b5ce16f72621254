"""Tokens per stream event, learnt per pool: what a stream that ends before its usage is counted.

A stream reports its usage in its last chunk (:mod:`igw.gateway.stream_usage`). One that ends
before it - its client left, ``routeTimeout`` or a shutdown cut it - is charged what was relayed
(:func:`igw.gateway.inference._charge_relayed`), and without a usage that was one token per event.
Under speculative decoding an event carries every token a step accepted (two to four with EAGLE), so
a client that read each answer to its last event and closed the connection there was charged a
third of it (before session s36): three times ``tokensPerMinute``.

Each pool's ratio of reported output tokens to relayed events is learnt from its streams that
reported usage, of :data:`MIN_EVENTS` events or more (the role, usage and ``[DONE]`` events, carrying
no tokens, then weigh little, and the ratio errs low, in the tenant's favour): the first such stream
sets it, later ones move it by :data:`WEIGHT`. A stream cut short is counted its events times the
ratio, and never less than one token per event. The ratio is per process (its streams): no state
to share, and each process learns it within its first long stream.
"""

from __future__ import annotations

from typing import Final

MIN_EVENTS: Final = 16
"""Fewest events a stream needs to teach the ratio."""
WEIGHT: Final = 0.1
"""How far each later stream moves the ratio towards its own (an exponential moving average)."""
MAX_TOKENS_PER_EVENT: Final = 64.0
"""The largest ratio kept: far above any speculative decoding's accepted tokens per step, so an
engine whose usage makes no sense cannot make every cut stream of its pool cost without bound."""


class TokensPerEvent:
    """One pool's output tokens per stream event (see the module docstring)."""

    __slots__ = ("ratio",)

    def __init__(self) -> None:
        self.ratio: float | None = None
        """``None`` until a stream of :data:`MIN_EVENTS` events reported its usage."""

    def learn(self, completion_tokens: int, events: int) -> None:
        """A stream of ``events`` events whose usage reported ``completion_tokens``."""
        if events < MIN_EVENTS or completion_tokens < 0:
            return
        sample = min(completion_tokens / events, MAX_TOKENS_PER_EVENT)
        ratio = self.ratio
        self.ratio = sample if ratio is None else ratio + WEIGHT * (sample - ratio)

    def tokens(self, events: int) -> int:
        """Output tokens of a stream cut after ``events`` events, its usage unknown."""
        ratio = self.ratio
        if ratio is None or ratio <= 1.0:
            return events
        return round(events * ratio)
