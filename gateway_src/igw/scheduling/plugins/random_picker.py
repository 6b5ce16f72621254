"""``random-picker``: a uniformly random order of the candidates, whatever their scores (GIE).

GIE shuffles the candidates and takes the first ``maxNumOfEndpoints``; the rest of the order here are
connect-failure fallbacks, as with the other pickers. Parameters: ``maxNumOfEndpoints`` (default 3:
the pick plus two fallbacks).
"""

from __future__ import annotations

from collections.abc import Sequence

from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.picker_base import CountedPicker, counted_picker_factory

TYPE = "random-picker"


class RandomPicker(CountedPicker):
    type_name = TYPE

    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]:
        n = len(totals)
        return ctx.rng.sample(range(n), min(self.max_endpoints, n))


factory = counted_picker_factory(RandomPicker)
