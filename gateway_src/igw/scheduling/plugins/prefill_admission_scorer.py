"""``prefill-admission-scorer``: keep a long prompt off an endpoint whose predicted prefill is far worse.

Why: on a mixed fleet a long prompt (thousands of tokens) sent to a slow GPU pays that GPU's
prefill for every one of its tokens; when a burst has queued work on the fast pods, the weighted
sum of the balance scorers can still favour an idle slow pod (its queue, KV and collision scores
are perfect), and ``backlog-ttft-scorer``'s own column, weighted like the others, is outvoted.
For a short prompt that is right (the slow pod's prefill is short too); for a long one it put the
slowest requests of the benchmark's long-prompt draws on A10Gs and single-GPU pods beside faster
ones (docs/benchmark.md, routing rounds 5 and 6).

Rule, per pick: when the request has at least ``minPromptTokens`` prompt tokens and
``backlog-ttft-scorer`` predicted a time to first token per candidate in this pick (its
``backlog.predicted`` state: prompt work queued there plus this prompt's uncached tokens, at the
endpoint's measured or guessed prefill speed), a candidate is rejected (scores 0) when it is both
**slow hardware for this prompt** (its idle prefill of the whole prompt more than ``slowRatio``
times the fastest candidate's) and **predicted far worse** (more than ``ratio`` times the best
prediction) and **measured** (at least the backlog scorer's ``MIN_FIT_SAMPLES`` samples of its
own: a guessed speed, the KV-based prior, another pod's model standing in or the mean of a few
samples, is not judged, so the backlog scorer's probing of unmeasured pods goes on as before; the
mean of a few short prompts took H200s for slow hardware beside 2xH100 pods in routing round 7's
random-1-05); every other candidate scores 1. Pods of one speed are never
rejected against each other: between them, queues and cached prefixes are the balance scorers'
business (judging them here tied shared-prefix groups to the pod holding their prefix,
docs/benchmark.md). If it rejects no candidate it returns no score at all (``None`` for every
candidate), which the scheduler leaves out of the totals, so routing is then exactly what it would
be without this plugin: short prompts, adapter requests and fleets of one kind of hardware (where
the backlog scorer publishes nothing) are never affected.

It is an admission rule expressed as a scorer because it needs the prefix scorer's matched shares
and the backlog scorer's predictions, both produced in the scoring stage, after the filters have
run. With a weight above the sum of the other scorers' weights (the default profile's), a candidate
it rejects loses to every candidate it admits; with a smaller weight it is a strong preference.

Category: admission. Signal: none of its own (it reads ``backlog.predicted``).

Parameters: ``ratio`` (a candidate predicted within this factor of the best is admitted, default
1.3), ``slowRatio`` (a candidate whose idle prefill is within this factor of the fastest one's is
admitted, default 2.5), ``minPromptTokens`` (shorter prompts are never judged, default 512). Chosen
on the benchmark's random family (docs/benchmark.md, routing round 6): a ratio of 2, or judging only
prompts of at least 1,024 tokens and twice the mean, left most long-prompt tails as they were; a
``slowRatio`` of 1.3 also judged single-GPU H200s beside 2xH100 pods serving 32B (about twice the
idle prefill) and overloaded the 2xH100s where the H200s were most of the fleet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_PREDICTED, Predictions
from igw.scheduling.types import EndpointView

TYPE = "prefill-admission-scorer"
DEFAULT_RATIO = 1.3
DEFAULT_SLOW_RATIO = 2.5
DEFAULT_MIN_PROMPT_TOKENS = 512


def admitted(
    predicted: Sequence[float],
    idle: Sequence[float],
    measured: Sequence[bool],
    *,
    ratio: float,
    slow_ratio: float,
) -> list[bool]:
    """Per candidate, whether it is admitted: its speed not measured yet (a guess is not judged),
    its predicted TTFT within ``ratio`` times the best (smallest) positive prediction, or its idle
    prefill time within ``slow_ratio`` times the fastest positive one. Every candidate is admitted when
    either list has no positive value."""
    positive = [p for p in predicted if p > 0]
    fast = [t for t in idle if t > 0]
    if not positive or not fast:
        return [True] * len(predicted)
    limit, slow = min(positive) * ratio, min(fast) * slow_ratio
    return [not m or p <= limit or t <= slow for p, t, m in zip(predicted, idle, measured, strict=True)]


class PrefillAdmissionScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_PREDICTED})

    def __init__(
        self,
        *,
        name: str = TYPE,
        ratio: float = DEFAULT_RATIO,
        slow_ratio: float = DEFAULT_SLOW_RATIO,
        min_prompt_tokens: int = DEFAULT_MIN_PROMPT_TOKENS,
    ) -> None:
        self.name = name
        self.ratio = ratio
        self.slow_ratio = slow_ratio
        self.min_prompt_tokens = min_prompt_tokens

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        none: list[float | None] = [None] * len(endpoints)
        tokens = ctx.request.prompt_tokens
        if tokens < self.min_prompt_tokens:
            return none
        found = ctx.state.get(STATE_PREDICTED)
        if not isinstance(found, Predictions) or found.endpoints is not endpoints:
            return none
        verdicts = admitted(
            found.seconds, found.idle, found.measured, ratio=self.ratio, slow_ratio=self.slow_ratio
        )
        if all(verdicts):
            return none
        return [1.0 if ok else 0.0 for ok in verdicts]


def factory(name: str, params: Mapping[str, Any], path: str) -> PrefillAdmissionScorer:
    r = ParamReader(params, path=path)
    plugin = PrefillAdmissionScorer(
        name=name,
        ratio=r.number("ratio", DEFAULT_RATIO, minimum=1.0),
        slow_ratio=r.number("slowRatio", DEFAULT_SLOW_RATIO, minimum=1.0),
        min_prompt_tokens=r.integer("minPromptTokens", DEFAULT_MIN_PROMPT_TOKENS, minimum=0),
    )
    r.finish()
    return plugin
