"""``random-picker``: a uniformly random order of the candidates, whatever their scores (GIE).

GIE shuffles the candidates and takes the first ``maxNumOfEndpoints``; the rest of the order here are
connect-failure fallbacks, as with the other pickers. Parameters: ``maxNumOfEndpoints`` (default 3:
the pick plus two fallbacks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader

TYPE = "random-picker"
DEFAULT_MAX_ENDPOINTS = 3


class RandomPicker(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE, max_endpoints: int = DEFAULT_MAX_ENDPOINTS) -> None:
        self.name = name
        self.max_endpoints = max_endpoints

    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]:
        n = len(totals)
        return ctx.rng.sample(range(n), min(self.max_endpoints, n))


def factory(name: str, params: Mapping[str, Any], path: str) -> RandomPicker:
    r = ParamReader(params, path=path)
    plugin = RandomPicker(
        name=name, max_endpoints=r.integer("maxNumOfEndpoints", DEFAULT_MAX_ENDPOINTS, minimum=1)
    )
    r.finish()
    return plugin
