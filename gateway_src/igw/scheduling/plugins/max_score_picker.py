"""``max-score-picker``: the highest total wins; ties are broken uniformly at random (GIE).

Returns up to ``maxNumOfEndpoints`` indices (default 3: the pick plus two fallbacks for a
connect-failure retry), best first. Parameters: ``maxNumOfEndpoints``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader

TYPE = "max-score-picker"
DEFAULT_MAX_ENDPOINTS = 3


class MaxScorePicker(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE, max_endpoints: int = DEFAULT_MAX_ENDPOINTS) -> None:
        self.name = name
        self.max_endpoints = max_endpoints

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


def factory(name: str, params: Mapping[str, Any], path: str) -> MaxScorePicker:
    r = ParamReader(params, path=path)
    plugin = MaxScorePicker(
        name=name, max_endpoints=r.integer("maxNumOfEndpoints", DEFAULT_MAX_ENDPOINTS, minimum=1)
    )
    r.finish()
    return plugin
