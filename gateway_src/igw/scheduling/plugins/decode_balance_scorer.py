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

**A prompt's own wait against the harm it does** (routing round 14): a prompt is prefilled in
chunks that share the pod's steps with every request decoding there, so placing ``P`` prompt tokens
on a pod where ``d`` requests decode delays each of them by about ``P / B`` steps (``B`` the engine's
token budget per step; on a pod whose steps are already full its chunks make more steps full, which
delays them the same): ``d x P / B`` request-steps. Its own wait there is the prompt tokens queued
ahead of it, ``w x P_mean / B`` steps for ``w`` requests waiting (``P_mean`` their mean prompt). The
sum over ``B / P_mean`` is ``w + g x d`` with ``g = P / P_mean``: the budget cancels, and no length of
any workload is built in (``P_mean`` is learned online from the picks, :class:`RunningMean`). So the
count ``c`` above becomes the cost ``w + g x d`` = ``c + (g - 1) x d`` (``d = c - w``; ``w`` the
pod's scraped waiting count plus this router's dispatches the scrape has not seen, at most ``c``):
a prompt of the mean length is placed as by ``c`` (``g = 1``: the same floats), a longer one is
pulled harder toward the pods decoding fewest, a shorter one toward the shortest queue. Before a
mean is known, or while a candidate's waiting count is missing, ``g`` is 1.

Category: balance. Signal: the scraped ``waiting`` count (and the in-flight counts least-request
uses). Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointView

TYPE = "decode-balance-scorer"
MEAN_STEP: Final = 1.0 / 64
"""The settled weight of a new value in :class:`RunningMean` (about the last 64 picks' prompts)."""


class RunningMean:
    """An exponentially weighted mean of a stream of prompt lengths: O(1) per value, nothing kept.

    The ``n``-th value enters with weight ``1 / n`` until that falls to ``step`` (so the first values
    give their plain mean), then with ``step``: the estimate follows a workload that changes."""

    __slots__ = ("count", "step", "value")

    def __init__(self, step: float = MEAN_STEP) -> None:
        if not 0.0 < step <= 1.0:
            raise ValueError(f"step must be in (0, 1], got {step}")
        self.step = step
        self.count = 0
        self.value: float | None = None
        """The estimate; ``None`` before the first value."""

    def add(self, x: float) -> None:
        """Take in one value (below 1 counts as 1: a prompt costs at least one token)."""
        x = max(1.0, x)
        self.count = n = self.count + 1
        value = self.value
        self.value = x if value is None else value + max(self.step, 1.0 / n) * (x - value)


def match_share(found: object) -> float:
    """The largest matched share in a ``prefix.match`` state (0 without one), clamped to [0, 1]."""
    if not isinstance(found, Mapping) or not found:
        return 0.0
    return min(1.0, max(0.0, max(float(v) for v in found.values())))


def balance_scores(inflight: Sequence[int], *, factor: float) -> UnitScores:
    """``1 - factor x (1 - (lo + 1) / (c + 1))`` per in-flight count ``c`` (``lo`` the fewest; counts
    below 0 read as 0). One pass after the minimum, with the same operations in the same order as
    the formula (so the same floats): at 1,000 endpoints the three passes it took before were the
    largest single part of the pick (docs/gateway.md, after the morning merges of 2026-12-03)."""
    lo1 = max(0, min(inflight, default=0)) + 1  # the minimum of the clamped counts, plus one
    return UnitScores([1.0 - factor * (1.0 - lo1 / (c + 1 if c > 0 else 1)) for c in inflight])


def harm_scores(
    inflight: Sequence[int], waiting: Sequence[int], *, factor: float, stretch: float
) -> UnitScores:
    """:func:`balance_scores` on the cost ``c + (stretch - 1) x d`` instead of ``c``, ``d = c -
    min(c, w)`` the requests decoding (``c`` in flight, ``w`` waiting; negatives read as 0): a
    request's own wait ``w`` plus ``stretch`` (its prompt over the mean) times the requests its
    prefill slows. ``stretch`` 1 is :func:`balance_scores` itself. In [0, 1] for ``factor`` in
    [0, 1] and ``stretch`` >= 0 (every cost >= 0, so the ratio is in (0, 1])."""
    if stretch == 1.0:
        return balance_scores(inflight, factor=factor)
    k = stretch - 1.0
    costs = [
        (c if c > 0 else 0) + k * ((c if c > 0 else 0) - min(c if c > 0 else 0, w if w > 0 else 0))
        for c, w in zip(inflight, waiting, strict=True)
    ]
    lo1 = min(costs, default=0.0) + 1.0
    return UnitScores([1.0 - factor * (1.0 - lo1 / (x + 1.0)) for x in costs])


class DecodeBalanceScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ONE_KIND, STATE_MATCH})

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name
        self.prompts = RunningMean()
        """The mean prompt length of this scheduler's picks (each worker of ``igw serve --workers N``
        learns its own from its own picks, a sample of the same traffic)."""

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if ctx.request.adapter is not None or ctx.state.get(STATE_ONE_KIND) is not endpoints:
            return [None] * len(endpoints)
        factor = 1.0 - match_share(ctx.state.get(STATE_MATCH))
        inflight = [e.inflight for e in endpoints]
        mean = self.prompts.value
        if mean is None or (scraped := ctx.columns(endpoints).waiting) is None:
            return balance_scores(inflight, factor=factor)
        waiting = [w + e.unreflected_dispatches for w, e in zip(scraped.values, endpoints, strict=True)]
        return harm_scores(inflight, waiting, factor=factor, stretch=max(1, ctx.request.prompt_tokens) / mean)

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """Every pick's prompt enters the mean (also where the scorer abstained: the mean is of the
        prompts this gateway sees)."""
        self.prompts.add(ctx.request.prompt_tokens)


def factory(name: str, params: Mapping[str, Any], path: str) -> DecodeBalanceScorer:
    ParamReader(params, path=path).finish()
    return DecodeBalanceScorer(name=name)
