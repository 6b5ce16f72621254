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

**Long prompts, while no queue** (routing round 13): a prompt is prefilled in chunks that share the
pod's steps with every request decoding there, so a long prompt slows the steps of the requests
beside it for as many steps as its chunks take, and the harm of placing it grows with its length
times the requests decoding there. So the balance ratio is raised to the power ``g``, the request's
prompt tokens over the median prompt this scorer has seen (:class:`RunningMedian`, learned online
from every pick: no length of any workload is built in), ``s_i ** g``: ``g`` = 1 is the rule above,
a prompt twice the median pulls about twice as hard toward the pods decoding fewest, a short one
less. ``g`` is capped at :data:`STRETCH_CAP` while no candidate reports requests waiting, and at 1
when one does (or a count is missing): with a queue the steps are already filled with waiting
prompts' chunks, a long prompt lengthens the queue (the TTFT scorers' business) more than it slows
a step, and an uncapped pull there put long prompts behind queues (burst-70b's TTFT tail,
docs/benchmark.md, routing rounds 12 and 13). A power of a ratio in (0, 1] stays in (0, 1], so the
scores keep the [0, 1] every scorer promises at any ``g``.

Category: balance. Signal: none of its own (gateway state: the in-flight counts least-request uses;
the scraped ``waiting`` counts only gate the cap). Parameters: none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointView

TYPE = "decode-balance-scorer"
STRETCH_CAP: Final = 2.0
"""The largest power the balance ratio is raised to (a prompt twice the median or longer, while no
candidate has requests waiting): a bound on how far the prompt's length may outweigh the TTFT
scorers' columns, which a pull growing without bound with the prompt would silence."""
MEDIAN_STEP: Final = 1.0 / 64
"""The settled step of :class:`RunningMedian` on the log scale (about 1.6 % per value)."""


class RunningMedian:
    """An online estimate of the median of a stream of positive numbers: O(1) per value, no sample kept.

    Each value moves the estimate by a factor ``exp(step)`` up when it is larger, down when it is
    smaller (the sign rule of stochastic approximation, on the log scale, so the estimate's relative
    precision is the same for short and long values): it rests where as many values lie above it as
    below, the median, and follows a workload that changes. The step is ``1 / n`` for the ``n``-th
    value until that reaches ``step``, so the first tens of values carry it from the first value to a
    typical one; then it stays at ``step``."""

    __slots__ = ("_down", "_up", "count", "step", "value")

    def __init__(self, step: float = MEDIAN_STEP) -> None:
        if not 0.0 < step <= 1.0:
            raise ValueError(f"step must be in (0, 1], got {step}")
        self.step = step
        self._up = math.exp(step)
        self._down = math.exp(-step)
        self.count = 0
        self.value: float | None = None
        """The estimate; ``None`` before the first value."""

    def add(self, x: float) -> None:
        """Take in one value (values below 1 count as 1: a prompt has at least one token)."""
        x = max(1.0, x)
        value = self.value
        self.count = n = self.count + 1
        if value is None:
            self.value = x
        elif n * self.step < 1.0:  # still moving by 1 / n
            if x != value:
                self.value = value * math.exp(1.0 / n if x > value else -1.0 / n)
        elif x > value:
            self.value = value * self._up
        elif x < value:
            self.value = value * self._down


def match_share(found: object) -> float:
    """The largest matched share in a ``prefix.match`` state (0 without one), clamped to [0, 1]."""
    if not isinstance(found, Mapping) or not found:
        return 0.0
    return min(1.0, max(0.0, max(float(v) for v in found.values())))


def balance_scores(inflight: Sequence[int], *, factor: float, stretch: float = 1.0) -> UnitScores:
    """``1 - factor x (1 - ((lo + 1) / (c + 1)) ** stretch)`` per in-flight count ``c`` (``lo`` the
    fewest; counts below 0 read as 0). One pass after the minimum, with the same operations in the
    same order as the formula (so the same floats; with ``stretch`` 1 the power is left out, as
    ``x ** 1 == x``): at 1,000 endpoints the three passes it took before were the largest single part
    of the pick (docs/gateway.md, after the morning merges of 2026-12-03). In [0, 1] for ``factor``
    in [0, 1] and any ``stretch`` >= 0: the ratio is in (0, 1], and so is its power."""
    lo1 = max(0, min(inflight, default=0)) + 1  # the minimum of the clamped counts, plus one
    if stretch == 1.0:
        return UnitScores([1.0 - factor * (1.0 - lo1 / (c + 1 if c > 0 else 1)) for c in inflight])
    return UnitScores([1.0 - factor * (1.0 - (lo1 / (c + 1 if c > 0 else 1)) ** stretch) for c in inflight])


def stretch_for(prompt_tokens: int, median: float | None, *, queued: bool) -> float:
    """The power of the balance ratio for a prompt: its length over the ``median`` prompt, at most
    :data:`STRETCH_CAP`, or at most 1 while ``queued`` (some candidate has requests waiting, or its
    count is unknown); 1 before any median is known."""
    if median is None:
        return 1.0
    g = max(0, prompt_tokens) / median
    cap = 1.0 if queued else STRETCH_CAP
    return cap if g > cap else g


class DecodeBalanceScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ONE_KIND, STATE_MATCH})

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name
        self.prompts = RunningMedian()
        """The median prompt length of this scheduler's picks (each worker of ``igw serve --workers
        N`` learns its own from its own picks: a median needs no other worker's)."""

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if ctx.request.adapter is not None or ctx.state.get(STATE_ONE_KIND) is not endpoints:
            return [None] * len(endpoints)
        factor = 1.0 - match_share(ctx.state.get(STATE_MATCH))
        median = self.prompts.value
        prompt = ctx.request.prompt_tokens
        if median is None:
            stretch = 1.0
        elif prompt <= median:  # never above 1: the queue gate cannot change it
            stretch = stretch_for(prompt, median, queued=True)
        else:
            waiting = ctx.columns(endpoints).waiting
            stretch = stretch_for(prompt, median, queued=waiting is None or waiting.hi > 0)
        return balance_scores([e.inflight for e in endpoints], factor=factor, stretch=stretch)

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """Every pick's prompt enters the median (also where the scorer abstained: the median is of
        the prompts this gateway sees, whatever fleet they went to)."""
        self.prompts.add(ctx.request.prompt_tokens)


def factory(name: str, params: Mapping[str, Any], path: str) -> DecodeBalanceScorer:
    ParamReader(params, path=path).finish()
    return DecodeBalanceScorer(name=name)
