"""``decode-harm-gate``: on one kind of hardware, keep a long prompt off pods where its prefill would
slow many requests, unless that buys its own wait back.

Why: a prompt's prefill chunks share the engine's steps with every request decoding on its pod, so
placing ``P`` prompt tokens on a pod delays each request decoding there by about ``P / B`` steps
(``B`` the engine's token budget per step). On burst-235b (eight identical 8xH100 pods, long code
prompts, bursts at 150 %) the ITL and E2E tails are such requests. Routing round 14
(docs/benchmark.md) weighed that harm against the prompt's own wait as one more score and was
outvoted: the columns that predict time to first token (queue, predicted TTFT, backlog) pull a long
prompt to the pod whose queue has drained, which is the pod decoding many requests. Here the harm
is a gate on those columns: a candidate the gate rejects scores 0, one it admits 1, and with a
weight above the sum of the other default weights the other columns choose among the admitted only.

Units: the prompt's own wait on pod ``i`` is the prompt tokens queued ahead of it there, ``T_i / B``
steps (``T_i`` the prompt tokens of this router's requests there that have not seen a first token);
its harm is ``c_i x P / B`` request-steps, ``c_i`` this router's requests in flight there: those
decoding now and those queued ahead of it, which will be decoding when its chunks run. Divided by
``P_mean / B`` (``P_mean`` the mean prompt, learned from every pick: weight ``1 / n`` for the first
64, then 1/64) the two add up to ``W_i + g x c_i`` with ``W_i = T_i / P_mean`` and ``g = P /
P_mean`` (the prefix factor of ``decode-balance-scorer`` applied to ``P``: cached tokens are not
prefilled); the budget cancels, so no engine setting is read.

Forms (``form``):

* ``cost``: a candidate with more requests in flight than the fewest (``c_i > c_lo``) is admitted
  only if the wait it saves over the least-loaded candidates pays for the extra harm: ``W_i + g x
  c_i <= W_ref + g x c_lo``, ``W_ref`` the smallest wait among the candidates at ``c_lo``, which
  are always admitted (so the gate never rejects on queue length alone).
* ``bounded``: the same test among the candidates whose wait is at most ``g`` above the smallest
  (the prompt accepts at most its own prefill's length of extra wait); every other candidate is
  rejected.
* ``tolerance``: the candidates whose queued tokens are within one decode step's worth of prefill
  of the fewest count as equal for the prompt's own wait, and among them only those with the fewest
  requests in flight are admitted. One step's worth is the mean measured ITL times the mean prefill
  rate this router's requests saw (tokens queued ahead at dispatch plus their own, over their TTFT).

It acts only for a request without an adapter whose prompt is longer than the mean (``g > 1``),
when ``backlog-ttft-scorer`` found the candidates to be one kind of hardware (its
``backlog.one-kind`` verdict), when their in-flight counts differ and when the gate rejects at least
one candidate; otherwise it answers ``None`` for every candidate and the scheduler leaves it out of
the totals, so the pick is exactly what it would be without it.

Measured in routing round 15 (docs/benchmark.md), not a default: ``cost`` lowered burst-235b's ITL
and E2E tails and raised its SLO goodput, but lengthened the TTFT tail of the long prompts it holds
back (burst-70b's beyond its target); ``bounded`` and ``tolerance`` stayed within the seeds' spread.

Category: admission (a gate expressed as a scorer, as ``prefill-admission-scorer``: it needs the
prefix match and the one-kind verdict, which the scoring stage produces). Signal: none (this
router's own dispatches, first tokens and outcomes). Parameters: ``form`` (default ``cost``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.decode_balance_scorer import match_share
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "decode-harm-gate"
FORM_COST = "cost"
FORM_BOUNDED = "bounded"
FORM_TOLERANCE = "tolerance"
FORMS = (FORM_COST, FORM_BOUNDED, FORM_TOLERANCE)
DEFAULT_FORM = FORM_COST
MEAN_WINDOW = 64
"""Samples after which a running mean weighs a new one by ``1 / MEAN_WINDOW`` (before: ``1 / n``)."""


class RunningMean:
    """Mean of the samples seen, then an exponentially weighted one (weight ``1 / MEAN_WINDOW``)."""

    __slots__ = ("count", "value")

    def __init__(self) -> None:
        self.count = 0
        self.value = 0.0

    def observe(self, x: float) -> None:
        if self.count < MEAN_WINDOW:
            self.count += 1
        self.value += (x - self.value) / self.count


def cost_gate(waits: Sequence[float], loads: Sequence[int], stretch: float) -> list[bool]:
    """``cost`` form: per candidate, whether it is admitted. Every candidate at the fewest in flight
    (``c_lo``) is; any other only if ``W + stretch x c <= W_ref + stretch x c_lo``, ``W_ref`` the
    smallest wait among those at ``c_lo``."""
    lo = min(loads, default=0)
    ref = min((w for w, c in zip(waits, loads, strict=True) if c == lo), default=0.0)
    bound = ref + stretch * lo
    return [c == lo or w + stretch * c <= bound for w, c in zip(waits, loads, strict=True)]


def bounded_gate(waits: Sequence[float], loads: Sequence[int], stretch: float) -> list[bool]:
    """``bounded`` form: :func:`cost_gate` among the candidates waiting at most ``stretch`` more than
    the least; the others are rejected."""
    limit = min(waits, default=0.0) + stretch
    near = [i for i, w in enumerate(waits) if w <= limit]
    inner = cost_gate([waits[i] for i in near], [loads[i] for i in near], stretch)
    admitted = [False] * len(waits)
    for i, ok in zip(near, inner, strict=True):
        admitted[i] = ok
    return admitted


def tolerance_gate(queued: Sequence[float], loads: Sequence[int], tolerance: float) -> list[bool]:
    """``tolerance`` form: among the candidates with queued tokens within ``tolerance`` of the fewest,
    those with the fewest in flight are admitted; every other candidate is rejected."""
    best = min(queued, default=0.0)
    near = [q - best <= tolerance for q in queued]
    lo = min((c for c, n in zip(loads, near, strict=True) if n), default=0)
    return [n and c == lo for c, n in zip(loads, near, strict=True)]


class DecodeHarmGate(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ONE_KIND, STATE_MATCH})

    def __init__(self, *, name: str = TYPE, form: str = DEFAULT_FORM) -> None:
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.name = name
        self.form = form
        self.prompt_mean = RunningMean()
        """Mean prompt tokens of every pick (``P_mean``)."""
        self.itl_mean = RunningMean()
        """Mean measured inter-token latency: the decode step (``tolerance`` form)."""
        self.rate_mean = RunningMean()
        """Mean prefill rate this router's requests saw, tokens per second (``tolerance`` form)."""
        self.queued: dict[EndpointKey, float] = {}
        """Prompt tokens of this router's requests per endpoint that have not seen a first token."""
        self._open: dict[str, tuple[EndpointKey, float, float]] = {}
        """Request id -> (endpoint, prompt tokens, tokens queued ahead at dispatch) until its first
        token (or its completion without one)."""

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        request = ctx.request
        mean = self.prompt_mean.value
        if request.adapter is not None or mean <= 0 or ctx.state.get(STATE_ONE_KIND) is not endpoints:
            return [None] * len(endpoints)
        stretch = request.prompt_tokens * (1.0 - match_share(ctx.state.get(STATE_MATCH))) / mean
        loads = [max(0, e.inflight) for e in endpoints]
        if stretch <= 1.0 or min(loads) == max(loads):
            return [None] * len(endpoints)
        get = self.queued.get
        queued = [max(0.0, get(e.key, 0.0)) for e in endpoints]
        if self.form == FORM_TOLERANCE:
            if self.itl_mean.count == 0 or self.rate_mean.count == 0:
                return [None] * len(endpoints)
            admitted = tolerance_gate(queued, loads, self.itl_mean.value * self.rate_mean.value)
        else:
            waits = [q / mean for q in queued]
            gate = bounded_gate if self.form == FORM_BOUNDED else cost_gate
            admitted = gate(waits, loads, stretch)
        if all(admitted):
            return [None] * len(endpoints)
        return UnitScores([1.0 if a else 0.0 for a in admitted])

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """Every pick teaches the mean prompt; the request's tokens join the endpoint's queue."""
        tokens = float(ctx.request.prompt_tokens)
        self.prompt_mean.observe(tokens)
        key = endpoint.key
        ahead = self.queued.get(key, 0.0)
        self._open[ctx.request.request_id] = (key, tokens, ahead)
        self.queued[key] = ahead + tokens

    def _leave_queue(self, request_id: str) -> tuple[float, float] | None:
        """Take a request's tokens out of its endpoint's queue; its (tokens, ahead at dispatch)."""
        found = self._open.pop(request_id, None)
        if found is None:
            return None
        key, tokens, ahead = found
        left = self.queued.get(key, 0.0) - tokens
        if left > 0.5:
            self.queued[key] = left
        else:
            self.queued.pop(key, None)
        return tokens, ahead

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        left = self._leave_queue(outcome.request_id)
        if left is not None and outcome.ttft_s is not None and outcome.ttft_s > 0:
            tokens, ahead = left
            self.rate_mean.observe((ahead + tokens) / outcome.ttft_s)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        self._leave_queue(outcome.request_id)
        if outcome.ok and outcome.itl_s is not None and outcome.itl_s >= 0:
            self.itl_mean.observe(outcome.itl_s)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        gone = set(keys)
        for key in gone:
            self.queued.pop(key, None)
        for rid in [rid for rid, (key, _, _) in self._open.items() if key in gone]:
            del self._open[rid]


def factory(name: str, params: Mapping[str, Any], path: str) -> DecodeHarmGate:
    r = ParamReader(params, path=path)
    form = r.string("form", DEFAULT_FORM)
    if form not in FORMS:
        r.problems.append(f"{path}.form: must be one of {', '.join(FORMS)}, got {form!r}")
        form = DEFAULT_FORM
    r.finish()
    return DecodeHarmGate(name=name, form=form)
