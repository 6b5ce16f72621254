"""``max-score-picker``: the highest total wins; ties are broken uniformly at random (GIE).

Returns up to ``maxNumOfEndpoints`` indices (default 3: the pick plus two fallbacks for a
connect-failure retry), best first. Parameters: ``maxNumOfEndpoints``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.picker_base import CountedPicker, counted_picker_factory

TYPE = "max-score-picker"


class MaxScorePicker(CountedPicker):
    type_name = TYPE

    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]:
        n = len(totals)
        if n == 0:
            return []
        rnd = ctx.rng.random
        if self.max_endpoints == 1 or n == 1:
            best = max(totals)
            ties = [i for i, t in enumerate(totals) if t == best]
            return [ties[0] if len(ties) == 1 else ties[int(rnd() * len(ties))]]
        tiebreak = [rnd() for _ in range(n)]
        # Tuples compare in C (no Python key call per candidate): order by total, then the random
        # tie-break; the index only rides along (a full tie on both is impossible in practice).
        top = heapq.nlargest(self.max_endpoints, zip(totals, tiebreak, range(n), strict=True))
        return [i for _, _, i in top]


factory = counted_picker_factory(MaxScorePicker)
