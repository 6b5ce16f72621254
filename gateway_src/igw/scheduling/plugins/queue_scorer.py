"""``queue-scorer``: prefer endpoints with fewer queued requests.

Formula (GIE ``queue-scorer``): with ``q`` = waiting requests (``vllm:num_requests_waiting``,
``sglang:num_queue_reqs``), min-max over the candidates ``(max - q) / (max - min)``; all equal -> 1.0.
Category: distribution. Signal: ``waiting``; an endpoint without it scores ``None`` (imputed by the
framework and reported as a missing signal). Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.columns import Present
from igw.scheduling.framework import CycleContext, PluginHooks, min_max_inverse
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "queue-scorer"


class QueueScorer(PluginHooks):
    type_name = TYPE
    signal = "waiting"

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        # Scraped values only: computed once per scrape of the candidates, shared between picks.
        cols = ctx.columns(endpoints)
        return cols.per_scrape(self, lambda: self._scores(cols.waiting, endpoints))

    @staticmethod
    def _scores(waiting: Present[int] | None, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if waiting is not None:  # every endpoint publishes it: min-max from the bounds already read
            return min_max_inverse(waiting.values, bounds=(waiting.lo, waiting.hi))
        return min_max_inverse(
            [None if e.metrics is None or e.metrics.waiting is None else e.metrics.waiting for e in endpoints]
        )


def factory(name: str, params: Mapping[str, Any], path: str) -> QueueScorer:
    ParamReader(params, path=path).finish()
    return QueueScorer(name=name)
