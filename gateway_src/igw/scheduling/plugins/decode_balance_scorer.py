"""``decode-balance-scorer``: on one kind of hardware, prefer the pod decoding fewer of our requests.

Why: a request's inter-token latency is its pod's decode step time, which grows with the context
held by the requests decoding beside it and with the prompt tokens prefilled in the same steps.
Least-request, which only evens out the requests in flight, had a lower ITL and E2E p99 than the
gateway on identical pods serving long prompts with little prefix reuse (shared-prefix-8b-low-cache,
burst-235b; docs/benchmark.md, routing round 11): there the gateway's columns (queue, KV use,
prefix, predicted TTFT, prefill collision) leave the number of decoding requests per pod to chance.

Rule, per pick, only when ``backlog-ttft-scorer`` found the candidates to be one kind of hardware
for a request without an adapter (its ``backlog.one-kind`` state; on other fleets the backlog and
admission scorers place requests by speed, and this scorer abstains with ``None`` everywhere, so
routing there is exactly what it would be without it): with ``c_i`` the requests this router has in
flight on candidate ``i`` and ``lo`` the fewest, ``s_i = (lo + 1) / (c_i + 1)``, and the score is
``1 - f x (1 - s_i)`` with ``f = 1 - m``, ``m`` the largest share of the request's prefix blocks any
candidate holds (``prefix.match``): where prefix affinity buys much (a long shared system prompt)
the prefix scorer's pull is left alone, where it buys little the decode load decides between
otherwise equal pods.

Category: balance. Signal: none (gateway state: the in-flight counts least-request uses).
Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointView

TYPE = "decode-balance-scorer"
TABLE_FROM = 32
"""Candidates from which :func:`balance_scores` tries a table of the distinct counts (below, the
set and the table cost about what they save)."""


def match_share(found: object) -> float:
    """The largest matched share in a ``prefix.match`` state (0 without one), clamped to [0, 1].

    The prefix-cache scorer publishes a ``dict``: told apart by its exact type first, a pointer
    comparison, where ``isinstance`` against the ``Mapping`` ABC runs ``ABCMeta.__instancecheck__``,
    interpreted even in the compiled build; any other mapping still counts."""
    if not (type(found) is dict or isinstance(found, Mapping)) or not found:
        return 0.0
    return min(1.0, max(0.0, max(float(v) for v in found.values())))


def balance_scores(inflight: Sequence[int], *, factor: float) -> UnitScores:
    """``1 - factor x (1 - (lo + 1) / (c + 1))`` per in-flight count ``c`` (``lo`` the fewest; counts
    below 0 read as 0). One pass after the minimum, with the same operations in the same order as
    the formula (so the same floats): at 1,000 endpoints the three passes it took before were the
    largest single part of the pick (docs/gateway.md, after the morning merges of 2026-12-03).

    On a large pool the counts take few distinct values (requests in flight per pod): the formula
    is then worked out once per distinct count and each candidate's score looked up in C (``map``
    over the table's ``__getitem__``), the same floats at about half the cost at 1,000 endpoints
    (docs/gateway.md, scheduler decision round 10)."""
    lo1 = max(0, min(inflight, default=0)) + 1  # the minimum of the clamped counts, plus one
    if len(inflight) >= TABLE_FROM:
        counts = set(inflight)
        if len(counts) * 4 <= len(inflight):
            table = {c: 1.0 - factor * (1.0 - lo1 / (c + 1 if c > 0 else 1)) for c in counts}
            return UnitScores(map(table.__getitem__, inflight))
    return UnitScores([1.0 - factor * (1.0 - lo1 / (c + 1 if c > 0 else 1)) for c in inflight])


class DecodeBalanceScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ONE_KIND, STATE_MATCH})

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if ctx.request.adapter is not None or ctx.state.get(STATE_ONE_KIND) is not endpoints:
            return [None] * len(endpoints)
        factor = 1.0 - match_share(ctx.state.get(STATE_MATCH))
        return balance_scores([e.inflight for e in endpoints], factor=factor)


def factory(name: str, params: Mapping[str, Any], path: str) -> DecodeBalanceScorer:
    ParamReader(params, path=path).finish()
    return DecodeBalanceScorer(name=name)
