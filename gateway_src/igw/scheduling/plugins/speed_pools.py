"""Speed groups of ``backlog-ttft-scorer``: endpoints' own TTFT regressions pooled by slope, kept
sorted between picks.

What it computes (the scorer's docstring has the why): the endpoints whose fit has its own regression
``(intercept, slope)``, sorted by ``(slope, intercept, key)`` and grouped from the fastest: a group
holds every following endpoint whose slope is at most ``pool_ratio`` times the group's first slope;
every member takes the group's mean intercept and mean slope (each summed in sorted order).

How it stays cheap: recomputing every regression and sorting every fit on each pick cost more than
the rest of the scorer. A regression changes only when its endpoint completes a request, so the
sorted lists are kept between picks and the one changed entry is moved by binary search; a group's
end is found by binary search over the slopes, and the pooled mapping is rebuilt only after a change
(:meth:`SpeedPools.pooled` hands out a new dict each time, never changed afterwards, so a caller may
keep the one of its pick).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import repeat

from igw.scheduling.types import EndpointKey

Model = tuple[float, float]
"""``(intercept, slope)`` of ``TTFT = intercept + slope * tokens ahead``."""


class SpeedPools:
    """Own regressions per endpoint and their pooled models (see the module docstring)."""

    def __init__(self, *, pool_ratio: float) -> None:
        self.pool_ratio = pool_ratio
        self._own: dict[EndpointKey, Model] = {}
        # Sorted by (slope, intercept, key); the lists are parallel.
        self._order: list[tuple[float, float, EndpointKey]] = []
        self._slopes: list[float] = []
        self._intercepts: list[float] = []
        self._keys: list[EndpointKey] = []
        self.members_version = 0
        """Counts changes to which endpoints have a regression (not to their models)."""
        self._pooled: dict[EndpointKey, Model] | None = None
        """The pooled models as of the last change; ``None``: recompute on the next request."""

    def set(self, key: EndpointKey, model: Model | None) -> None:
        """The endpoint's own regression is now ``model`` (``None``: it has none)."""
        old = self._own.get(key)
        if old == model:
            return
        if old is not None:
            at = bisect_left(self._order, (old[1], old[0], key))
            for lst in (self._order, self._slopes, self._intercepts, self._keys):
                del lst[at]
            del self._own[key]
            if model is None:
                self.members_version += 1
        if model is not None:
            intercept, slope = model
            item = (slope, intercept, key)
            at = bisect_left(self._order, item)
            self._order.insert(at, item)
            self._slopes.insert(at, slope)
            self._intercepts.insert(at, intercept)
            self._keys.insert(at, key)
            if old is None:
                self.members_version += 1
            self._own[key] = model
        self._pooled = None

    def own(self) -> dict[EndpointKey, Model]:
        """Endpoint -> its own regression (do not modify: the pools' own mapping)."""
        return self._own

    def pooled(self) -> dict[EndpointKey, Model]:
        """Endpoint -> its group's ``(mean intercept, mean slope)``, for every endpoint with its own
        regression. Do not modify the returned dict: it is shared until the next change."""
        if self._pooled is None:
            self._pooled = self._group()
        return self._pooled

    def _group(self) -> dict[EndpointKey, Model]:
        slopes, intercepts, keys = self._slopes, self._intercepts, self._keys
        ratio = self.pool_ratio
        out: dict[EndpointKey, Model] = {}
        start, n = 0, len(slopes)
        while start < n:
            # Members: the following slopes at most ``ratio`` times the first one (sorted ascending,
            # so they are contiguous and end where bisect_right puts that bound).
            end = bisect_right(slopes, slopes[start] * ratio, start + 1)
            size = end - start
            if size == 1:
                # A lone member: ``sum`` of one float is ``0.0 + x`` (a -0.0 becomes 0.0) and
                # dividing by 1 changes nothing, so the same model without the slices and the zip.
                out[keys[start]] = (0.0 + intercepts[start], 0.0 + slopes[start])
                start = end
                continue
            model = (sum(intercepts[start:end]) / size, sum(slopes[start:end]) / size)
            out.update(zip(keys[start:end], repeat(model)))
            start = end
        return out
