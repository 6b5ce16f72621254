"""``no-hit-lru-scorer``: spread *cold* requests (no prefix hit anywhere) over the least recently used
endpoints, so new prefixes do not all pile onto one pod (llm-d PR #493).

Formula: if the prefix scorer found a hit on any candidate -> 0.5 for every candidate (no opinion).
Cold request -> endpoints never given a cold request score 1.0; the others, ordered from least to
most recently given one (``p`` = 0 .. k-1 among the k such candidates), score ``(k - 1 - p) / k``.
On a cold pick the chosen endpoint becomes the most recent. Reads (declares it ``consumes``)
``prefix.any_hit`` from the cycle state, so the framework runs it after ``prefix-cache-scorer``
whatever the configured order; without a prefix scorer in the profile every request counts as cold.
Category: distribution. Parameters: ``lruSize`` (default 1024).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.prefix_cache_scorer import STATE_ANY_HIT
from igw.scheduling.types import EndpointKey, EndpointView

TYPE = "no-hit-lru-scorer"
DEFAULT_LRU_SIZE = 1024
WARM_SCORE = 0.5


class NoHitLruScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ANY_HIT})

    def __init__(self, *, name: str = TYPE, lru_size: int = DEFAULT_LRU_SIZE) -> None:
        self.name = name
        self.lru_size = lru_size
        self._recent: OrderedDict[EndpointKey, None] = OrderedDict()
        """Endpoints given a cold request, least recent first."""

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if ctx.state.get(STATE_ANY_HIT, False):
            return [WARM_SCORE] * len(endpoints)
        order = {key: i for i, key in enumerate(self._recent)}
        used = sorted((order[e.key], idx) for idx, e in enumerate(endpoints) if e.key in order)
        scores: list[float | None] = [1.0] * len(endpoints)
        k = len(used)
        for p, (_, idx) in enumerate(used):
            scores[idx] = (k - 1 - p) / k
        return scores

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        if ctx.state.get(STATE_ANY_HIT, False):
            return
        self._remember(endpoint.key)

    def _remember(self, key: EndpointKey) -> None:
        self._recent.pop(key, None)
        self._recent[key] = None
        while len(self._recent) > self.lru_size:
            self._recent.popitem(last=False)

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """``True`` for a cold pick (``SharesPicks``): the other workers move the pod to the back of
        their order too; warm picks leave the order alone and send nothing."""
        return None if ctx.state.get(STATE_ANY_HIT, False) else True

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Another worker gave ``endpoint`` a cold request: as :meth:`on_picked` for our own."""
        if note is not True:
            raise ValueError(f"{self.name}: a pick note is true (got {note!r})")
        self._remember(endpoint)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        for key in keys:
            self._recent.pop(key, None)


def factory(name: str, params: Mapping[str, Any], path: str) -> NoHitLruScorer:
    r = ParamReader(params, path=path)
    plugin = NoHitLruScorer(name=name, lru_size=r.integer("lruSize", DEFAULT_LRU_SIZE, minimum=1))
    r.finish()
    return plugin
