"""``kv-cache-utilization-scorer``: prefer endpoints with free KV-cache.

Formula (GIE): ``1 - kv`` with ``kv`` the KV-cache utilisation fraction (``vllm:kv_cache_usage_perc``,
falling back to the pre-0.9.2 ``vllm:gpu_cache_usage_perc``; ``sglang:token_usage``). Absolute, not
normalised across candidates. Category: distribution. Signal: ``kv_usage``. Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.columns import Present
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "kv-cache-utilization-scorer"


class KvCacheScorer(PluginHooks):
    type_name = TYPE
    signal = "kv_usage"

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        # Scraped values only: computed once per scrape of the candidates, shared between picks,
        # and after a few re-scrapes only their positions are scored again.
        cols = ctx.columns(endpoints)
        return cols.per_scrape(
            self,
            lambda: _scores(cols.kv_usage, endpoints),
            lambda old, changed: _updated(old, changed, cols.kv_usage, endpoints),
        )[1]


_Kept = tuple[Present[float] | None, list[float | None]]
"""The KV column a score list was made from, and the list."""


def _scores(kv: Present[float] | None, endpoints: Sequence[EndpointView]) -> _Kept:
    if kv is not None:
        scores: list[float | None] = [1.0 - v for v in kv.values]
        # Use within [0, 1] gives scores within [0, 1]: vouched, so the scheduler skips its check.
        return kv, UnitScores(scores) if kv.lo >= 0.0 and kv.hi <= 1.0 else scores
    return kv, [
        None if e.metrics is None or e.metrics.kv_usage is None else 1.0 - e.metrics.kv_usage
        for e in endpoints
    ]


def _updated(
    old: _Kept, changed: list[int], kv: Present[float] | None, endpoints: Sequence[EndpointView]
) -> _Kept:
    """:func:`_scores` after the endpoints at ``changed`` were re-scraped: only their scores are
    computed again (a score reads its own endpoint only); vouched again from the new bounds."""
    before, scores = old
    if kv is None or before is None:
        return _scores(kv, endpoints)
    fresh: list[float | None] = UnitScores(scores) if kv.lo >= 0.0 and kv.hi <= 1.0 else list(scores)
    values = kv.values
    for i in changed:
        fresh[i] = 1.0 - values[i]
    return kv, fresh


def factory(name: str, params: Mapping[str, Any], path: str) -> KvCacheScorer:
    ParamReader(params, path=path).finish()
    return KvCacheScorer(name=name)
