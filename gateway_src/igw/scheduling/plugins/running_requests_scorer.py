"""``running-requests-size-scorer``: prefer endpoints with smaller running batches.

Formula (GIE v1.5): min-max over candidates of ``r`` = running requests (``vllm:num_requests_running``,
``sglang:num_running_reqs``): ``(max - r) / (max - min)``; all equal -> 1.0.
Category: distribution. Signal: ``running``. Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks, min_max_inverse
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "running-requests-size-scorer"


class RunningRequestsScorer(PluginHooks):
    type_name = TYPE
    signal = "running"

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        return min_max_inverse(
            [None if e.metrics is None or e.metrics.running is None else e.metrics.running for e in endpoints]
        )


def factory(name: str, params: Mapping[str, Any], path: str) -> RunningRequestsScorer:
    ParamReader(params, path=path).finish()
    return RunningRequestsScorer(name=name)
