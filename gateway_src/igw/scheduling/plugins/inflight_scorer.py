"""``active-request-scorer``: prefer endpoints this gateway has sent fewer unfinished requests to.

Formula (llm-d ``active-request-scorer``): with ``c`` = the gateway's own in-flight count for the
endpoint and ``m`` = the largest count among candidates, ``(m - c) / m``; ``m == 0`` -> 1.0 for all.
It needs no model-server signal, which is why the scheduler falls back to it alone when every
endpoint's metrics are stale. Category: distribution. Signal: none (gateway state). Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "active-request-scorer"


class InflightScorer(PluginHooks):
    type_name = TYPE
    signal = ""

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        peak = max((e.inflight for e in endpoints), default=0)
        if peak <= 0:
            return [1.0] * len(endpoints)
        return [(peak - e.inflight) / peak for e in endpoints]


def factory(name: str, params: Mapping[str, Any], path: str) -> InflightScorer:
    ParamReader(params, path=path).finish()
    return InflightScorer(name=name)
