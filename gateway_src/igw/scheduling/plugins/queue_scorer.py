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
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores, min_max_inverse
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "queue-scorer"


class QueueScorer(PluginHooks):
    type_name = TYPE
    signal = "waiting"

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        # Scraped values only: computed once per scrape of the candidates, shared between picks,
        # and after a few re-scrapes only their positions are scored again.
        cols = ctx.columns(endpoints)
        return cols.per_scrape(
            self,
            lambda: _scores(cols.waiting, endpoints),
            lambda old, changed: _updated(old, changed, cols.waiting, endpoints),
        )[1]


_Kept = tuple[Present[int] | None, list[float | None]]
"""The waiting column a score list was made from, and the list."""


def _scores(waiting: Present[int] | None, endpoints: Sequence[EndpointView]) -> _Kept:
    if waiting is not None:  # every endpoint publishes it: min-max from the bounds already read
        return waiting, min_max_inverse(waiting.values, bounds=(waiting.lo, waiting.hi))
    return waiting, min_max_inverse(
        [None if e.metrics is None or e.metrics.waiting is None else e.metrics.waiting for e in endpoints]
    )


def _updated(
    old: _Kept, changed: list[int], waiting: Present[int] | None, endpoints: Sequence[EndpointView]
) -> _Kept:
    """:func:`_scores` after the endpoints at ``changed`` were re-scraped: with the same bounds only
    their scores change (each by the same expression as :func:`min_max_inverse`'s); anything else
    is scored in full."""
    before, scores = old
    if waiting is None or before is None or waiting.lo != before.lo or waiting.hi != before.hi:
        return _scores(waiting, endpoints)
    lo, hi = waiting.lo, waiting.hi
    if hi == lo:
        return waiting, scores  # 1.0 everywhere, as before
    span = hi - lo
    values = waiting.values
    fresh = UnitScores(scores)
    for i in changed:
        fresh[i] = (hi - values[i]) / span
    return waiting, fresh


def factory(name: str, params: Mapping[str, Any], path: str) -> QueueScorer:
    ParamReader(params, path=path).finish()
    return QueueScorer(name=name)
