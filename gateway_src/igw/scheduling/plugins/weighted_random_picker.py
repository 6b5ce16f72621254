"""``weighted-random-picker``: draw endpoints with probability proportional to their total score.

A-Res sampling without replacement (GIE): key = ``U ** (1 / score)`` with ``U`` uniform in (0, 1);
scores <= 0 get key 0 (never chosen while a positive score exists); if every score is <= 0 the
draw is uniform. The top ``maxNumOfEndpoints`` keys are returned (default 3), best first.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.picker_base import CountedPicker, counted_picker_factory

TYPE = "weighted-random-picker"
_TINY = 1e-10


class WeightedRandomPicker(CountedPicker):
    type_name = TYPE

    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]:
        n = len(totals)
        rnd = ctx.rng.random
        if all(t <= 0 for t in totals):
            keys = [rnd() for _ in range(n)]
        else:
            keys = [((rnd() or _TINY) ** (1.0 / t)) if t > 0 else 0.0 for t in totals]
        return heapq.nlargest(min(self.max_endpoints, n), range(n), key=keys.__getitem__)


factory = counted_picker_factory(WeightedRandomPicker)
