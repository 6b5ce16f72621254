"""Per-endpoint exponentially weighted means of what the gateway measures on completed requests.

Shared by the plugins and layers that learn an endpoint's speed from ``RequestOutcome`` (time to
first token for :mod:`igw.scheduling.dispatch_ledger` and ``predicted-ttft-scorer``), so they age
samples the same way and forget removed endpoints the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from igw.scheduling.types import EndpointKey


class EndpointEwma:
    """``mean += alpha * (sample - mean)`` per endpoint; the first sample is taken as is."""

    def __init__(self, *, alpha: float) -> None:
        self.alpha = alpha
        self.values: dict[EndpointKey, float] = {}

    def observe(self, key: EndpointKey, sample: float) -> None:
        old = self.values.get(key)
        self.values[key] = sample if old is None else old + self.alpha * (sample - old)

    def get(self, key: EndpointKey) -> float | None:
        return self.values.get(key)

    def forget(self, keys: Sequence[EndpointKey]) -> None:
        for key in keys:
            self.values.pop(key, None)
