"""``backlog-ttft-scorer``: predict each endpoint's time to first token from its prefill backlog and speed.

Why: on a mixed fleet the slowest requests are those sent to a slow GPU while a fast one could have
served them sooner. Counting requests (queue, in-flight) treats a 2,000-token prompt like a 50-token
one and an A10G like an H100; ``predicted-ttft-scorer`` multiplies a measured mean TTFT by the
waiting count, which is blind to *this* request's length and to prompts already being prefilled
(they are running, not waiting). What decides a request's TTFT on a pod is the prompt work ahead of
it plus its own, divided by the pod's prefill speed, and both are known to the router: it dispatched
the work ahead, and the speed shows in every completed request.

Model, per endpoint ``i``:

* **backlog** ``B_i``: prompt tokens this router dispatched there that are probably not prefilled
  yet. Each dispatch adds its prompt tokens; the backlog drains in real time at one token per
  ``s_i + b_i / max(x̄_i, B_i)`` seconds (the learned slope plus the intercept spread over the
  endpoint's mean tokens ahead ``x̄_i``, or over the backlog when that is larger), so a dispatch
  occupies the endpoint for about its own TTFT, while a deep backlog, which the engine prefills in
  shared steps, pays the per-step cost once. A learnt TTFT also caps the backlog: the engine
  prefills in arrival order, so once a request has its first token, only what was dispatched after
  it can be left.
* **speed**: ``TTFT = b_i + s_i * x`` where ``x`` is the backlog at dispatch plus the request's own
  uncached prompt tokens (``RequestOutcome.prompt_tokens - cached_tokens``), fitted online per
  endpoint by exponentially weighted least squares (``alpha`` is the weight of a new sample). A
  sample arrives with the request's first token (``on_first_token``, when the caller streams) or
  else at its completion, which on a slow GPU with long outputs comes seconds later. The fit absorbs
  what the model leaves out (decode steps sharing the batch, scheduling overhead) as long as it
  changes slowly. Until an endpoint has ``MIN_FIT_SAMPLES`` samples spread over tokens ahead (a
  standard deviation of at least ``slopeSpread`` tokens) with a positive slope and intercept, it
  takes the slope of a fitted candidate of alike KV capacity (not labelled as another GPU kind)
  through its own mean sample, or without one its mean TTFT split into a fixed half and a half
  proportional to tokens ahead. A slope fitted over a narrow band says nothing about prompts far
  outside it: an H200 that had served only prompts of 10-90 tokens fitted a tenth of its peers'
  slope and took every long prompt of the next burst (docs/benchmark.md, routing round 7).
* **prediction** for a request of ``n`` prompt tokens: ``b_i + s_i * (B_i + n)``; with scraped
  ``waiting`` requests beyond what the backlog explains (another router's traffic, requests stalled
  for KV space), each adds the endpoint's mean observed TTFT. A non-empty backlog explains one
  waiting request; each further dispatch of this router there still waiting for its first token
  (``pending``) explains ``1 - ownWaitingShare`` of one. Counted in full, as before routing round 7
  (share 1), they added seconds to every busy pod in a burst; not counted at all (share 0, round 7),
  a pod with a deep queue of this router's own long prompts was predicted as if the backlog drained
  at its idle speed, which it does not while it decodes the batch beside them, and it kept taking
  long prompts it then served late (docs/benchmark.md, routing round 8). For an adapter request
  they explain a whole one each, as in round 7: there a waiting request may be waiting for a LoRA
  slot, which the slot price already charges (the share lengthened the LoRA draws' tails, same
  page).
* **pending floor**: the backlog a prediction uses is never less than ``pendingFloor`` of the
  uncached prompt tokens of this router's dispatches there still waiting for their first token
  (``pending``): none of them is wholly prefilled yet. The drain assumes the fitted speed, which a
  busy pod decoding its batch beside the prompts does not reach, so on an overloaded mixed fleet a
  pod deep in this router's long prompts was predicted as drained and took more (random-1-08,
  docs/benchmark.md, routing round 9). The fit's samples keep the drained estimate: floored there
  too, an overloaded H200's fit came out flat (a tenth of its slope, half a second of intercept).
  A pick note (``igw serve --workers N``) carries the backlog, not the pending dispatch, whose
  first token only the sender hears: the floor counts a worker's own dispatches. Only streamed
  dispatches count: a non-streamed request's first token is never reported, so it would hold its
  prompt in the floor until the whole answer was done, long after its prefill.

**Cold start.** Before any sample at all, each endpoint is assumed to prefill at a speed
proportional to the KV cache it holds (``num_gpu_blocks x block_size`` from the scrape: a smaller
GPU is a slower one), and its backlog drains at that speed. Afterwards an unmeasured endpoint whose
KV capacity is within ``poolRatio`` of a measured one takes that endpoint's model (probably the same
hardware); one unlike every measured endpoint takes the fleet's smallest intercept and slope scaled
up by how much less KV cache it holds than the largest, gets one probe on that guess, and while the
probe is out ranks below every other candidate (per request in flight), so a slow newcomer is not
flooded before its first sample.

**Cheap probes.** Such an unmeasured endpoint, with no probe out and at most ``probeKvRatio``
times less KV cache than the largest candidate, takes no ``speedPreference`` penalty (below) for a
request no longer than the mean prompt dispatched so far (times ``probeShare``): its prediction
already carries the KV-scaled guess once, and counting the guess a second time in the preference
factor kept idle GPUs that hold somewhat less memory at the same compute (an H100 beside H200s: half
the KV cache) out of use while the measured ones queued. A short prompt is a cheap probe, and its
first token replaces the guess with a measurement. Long prompts, and endpoints with far less memory
than the largest (an A10G beside H100s: a different class of GPU, whose compute is as far behind),
still meet the guess twice: probing those early cost tail latency on the benchmark's mixed fleets
(docs/benchmark.md, routing round 4).

**Score**: ``min(predicted) / predicted_i``, times ``(fastest idle_j / idle_i) ** speedPreference``
where ``idle_i = b_i + s_i * n`` is how fast the endpoint would serve this request with nothing
ahead. The second factor breaks near-ties towards faster hardware: a slow GPU holding a request
group's prefix predicts about what a fast one predicts without it, and greedy per-request choice
would then tie the whole group to the slow GPU. Between candidates predicted with one model (one
kind of hardware within a mixed fleet) the first factor is sharpened to ``(best_k / predicted_i) **
predictionExponent x best / best_k``, ``best_k`` the lowest prediction of that model: the plain
ratio shrinks as the whole fleet's predictions grow (1.2 s against 1.5 s is 0.8), so on an overloaded
fleet a pod predicted 0.3 s later than its twin kept most of this scorer's weight and the
range-normalised queue and prefill-collision columns placed the request there (random-1-02,
docs/benchmark.md, routing round 10). Between kinds the ratio stays plain (sharpened there too, an
overloaded H200 beside six 4xA10G pods drew more than it served in time: random-1-01, same section),
and so it does for adapter requests (sharpened, a LoRA draw lost its tail: random-1-03).

**Cached prefixes**: with ``prefix-cache-scorer`` in the profile, the share of the prompt it places
on an endpoint (``prefix.match``) is left out of that endpoint's prefill work, so prefix affinity is
not read as load. **Adapter requests** on a mixed fleet are scored like base requests and then
divided by a **slot price** (:func:`slot_price`): 1 where the adapter runs, ``(max_lora / free
slots) ** adapterSlotPrice`` where it would take a free slot, ``(max_lora + 1) ** adapterSlotPrice``
where none is free. Left to the LoRA scorers alone, an adapter's requests stayed on the slow pod that
held it while fast pods had free slots; scored by speed alone, cold adapters filled the fast pods'
last slots and later adapters waited for one (docs/benchmark.md, routing round 5). On one kind of
hardware, and unless every candidate's KV capacity is known and they differ by more than
``poolRatio``, adapter requests score 1.0 (their slopes, which include adapter loads and slot waits,
would otherwise make identical pods look unlike).
**One kind of hardware**: when the candidates' KV capacities all lie within ``poolRatio`` of each
other and no two well-measured slopes (``SPEED_SAMPLES`` samples) lie more than ``speedRatio``
apart, every endpoint scores 1.0: on identical pods the queue, prefix and prefill-collision scorers
already balance load, and this scorer on top of them lengthened shared-prefix tails
(docs/benchmark.md). KV capacity alone takes an A100-80GB and an H100 serving an 8B model as one
kind; the slope check tells them apart once measured, and ``speedRatio`` sits above the scatter of
identical pods' fits. Candidates whose ``hardwareLabel`` values differ are never one kind (a pod
label naming the GPU kind tells them apart from the first pick, which no early slope threshold did
without also splitting identical pods). On one kind of hardware a request without an adapter scores
``1 - oneKindShare x (1 - s)`` instead, ``s`` being ``predicted-ttft-scorer``'s score of the same
pick (its ``predicted-ttft.scores``): that column, which counts this router's dispatches the scrape
cannot show yet, is what keeps picks off pods still prefilling, and the median on identical pods
follows it (:meth:`BacklogTtftScorer._one_kind_scores`).

**Published**: for a request without an adapter on candidates that are not one kind of hardware,
the pick's predictions (``backlog.predicted``, a :class:`Predictions`), which
``prefill-admission-scorer`` reads; an endpoint counts as measured there once its fit has
``MIN_FIT_SAMPLES`` samples (a mean of a few short prompts, split in halves, took H200s for slow
hardware beside 2xH100 pods). For a request without an adapter on candidates that are one kind of
hardware, the candidate list itself (``backlog.one-kind``), which ``prefill-collision-scorer`` reads:
there every pod's prefill rate is one rate, whatever chance made their measurements differ.

Category: balance. Signal: ``waiting`` (optional), ``num_gpu_blocks``/``block_size`` (cold start and
the one-kind-of-hardware check).

Fits of identical pods differ by chance; endpoints whose slopes lie within ``poolRatio`` of each
other share one model (:meth:`BacklogTtftScorer._pooled`).

Parameters: ``alpha`` (weight of a new sample in the fit, default 0.1), ``poolRatio`` (slopes within
this factor of a group's fastest count as the same speed, and KV capacities within it as the same
hardware, default 1.5), ``speedRatio`` (measured slopes this far apart tell alike-KV endpoints apart,
default 3), ``speedPreference`` (exponent of the idle-speed factor in the score, 0 switches it off,
default 1), ``maxTracked`` (dispatches remembered per endpoint until their outcome, default 4096),
``probeShare`` (a request of at most this share of the mean dispatched prompt may probe an
unmeasured endpoint without the preference penalty, 0 switches cheap probes off, default 1),
``probeKvRatio`` (only endpoints holding at most this factor less KV cache than the largest are
probed cheaply, default 3), ``adapterSlotPrice`` (exponent of the slot price on adapter requests; 0
leaves adapter requests to the LoRA scorers, scoring 1.0 everywhere, default 2), ``oneKindShare``
(share of ``predicted-ttft-scorer``'s column repeated on one kind of hardware, 0 to 1, 0 scores 1.0
everywhere there, default 0.25: with this scorer's default weight 4, one more weight on that column),
``hardwareLabel`` (pod label naming the GPU kind, default ``gpu``; "" switches the check off),
``slopeSpread`` (standard deviation of tokens ahead, in tokens, a fit's samples need before its own
slope is used, default 64; 0: any spread), ``ownWaitingShare`` (share of a mean TTFT still added per
scraped waiting request that this router's pending dispatches beyond the first explain, for
requests without an adapter, 0 to 1; 0: none, as in routing round 7; 1: all, as before it; default
0.25), ``pendingFloor`` (share of the pending dispatches' prompt tokens the backlog a prediction
uses never falls below, 0 to 1; 0: no floor, as before routing round 9; default 1),
``predictionExponent`` (exponent on the ratio of predictions between candidates of one model, at
least 0; 1: the plain ratio, as before routing round 10; default 4).
"""

from __future__ import annotations

import math
import statistics
import types
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.predicted_ttft_scorer import STATE_SCORES, PublishedScores
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.plugins.speed_pools import Model, SpeedPools
from igw.scheduling.slot_init import slot_constructor
from igw.scheduling.types import EndpointKey, EndpointView, EngineMetrics, RequestOutcome

TYPE = "backlog-ttft-scorer"
DEFAULT_ALPHA = 0.1
DEFAULT_MAX_TRACKED = 4096
DEFAULT_POOL_RATIO = 1.5
DEFAULT_TYPICAL_TOKENS = 1000.0
"""Tokens ahead assumed for an endpoint without samples when spreading its intercept (drain rate)."""
MIN_FIT_SAMPLES = 8
"""Samples before an endpoint's own regression is trusted (until then: its mean, the fleet's slope)."""
SPEED_SAMPLES = 16
"""Samples an endpoint's fit needs before its slope may tell its hardware apart from alike-KV peers."""
DEFAULT_SPEED_RATIO = 3.0
DEFAULT_SPEED_PREFERENCE = 1.0
DEFAULT_PROBE_SHARE = 1.0
"""A request no longer than this share of the mean dispatched prompt is a cheap probe."""
DEFAULT_PROBE_KV_RATIO = 3.0
"""Only endpoints holding at most this factor less KV cache than the largest are probed cheaply."""
DEFAULT_ADAPTER_SLOT_PRICE = 2.0
"""Exponent of the slot price on adapter requests (0: adapter requests score 1.0 everywhere)."""
DEFAULT_ONE_KIND_SHARE = 0.25
"""On one kind of hardware, the share of ``predicted-ttft-scorer``'s column this scorer repeats
(0: every endpoint scores 1.0 there)."""
DEFAULT_SLOPE_SPREAD = 64.0
"""Standard deviation of tokens ahead a fit's samples need before its own slope is trusted
(``slopeSpread``; 0: any spread)."""
DEFAULT_OWN_WAITING_SHARE = 0.25
"""Share of a mean TTFT a scraped waiting request still adds when this router's pending dispatches
(beyond the first, which a non-empty backlog explains) account for it (``ownWaitingShare``)."""
DEFAULT_PENDING_FLOOR = 1.0
"""Share of the prompt tokens of this router's pending dispatches to an endpoint (sent, first token
not seen) below which its backlog is never estimated (``pendingFloor``; 0: no floor)."""
DEFAULT_PREDICTION_EXPONENT = 4.0
"""Exponent on the ratio of predictions between endpoints of one model and one ``hardwareLabel`` value
(``predictionExponent``; 1: the plain ratio, as before routing round 10)."""
DEFAULT_HARDWARE_LABEL = "gpu"
"""Pod label naming the GPU kind (the simulated fleets set it; "" switches the label check off)."""
STATE_ONE_KIND = "backlog.one-kind"
"""Cycle-state key: the candidate list (the same object every scorer of the pick receives), written
only when this pick found the candidates to be one kind of hardware for a request without an adapter;
read by ``prefill-collision-scorer``."""
STATE_PREDICTED = "backlog.predicted"
"""Cycle-state key: this pick's :class:`Predictions` (written for requests without an adapter on
candidates that are not one kind of hardware; read by ``prefill-admission-scorer``)."""
MIN_TOKENS = 1
"""A request is never counted as zero work (an empty prompt still costs one step)."""
MIN_TOKENS_F = float(MIN_TOKENS)
EXACT_IN_FLOAT = 2**53
"""Integers below this convert to float exactly (KV capacities compared as ints or floats agree)."""
_NOT_KEPT: Any = object()
"""Marks a position without a kept KV twin (``None`` is a kept answer: no twin)."""
PRIOR_TOKENS_PER_S_PER_KV_TOKEN = 0.05
"""Prefill speed assumed before any outcome, in prompt tokens per second per KV-cache token the
endpoint holds. It only sets how fast a dispatch is forgotten while nothing is measured (the
comparison between endpoints rests on their capacities); the presets' prefill rates divided by their
KV capacities lie around this value, and a lower one errs towards remembering dispatches longer."""


@dataclass(slots=True)
class LinearFit:
    """Exponentially weighted least squares of ``y = intercept + slope * x`` (first sample as is)."""

    mean_x: float = 0.0
    mean_y: float = 0.0
    var_x: float = 0.0
    cov_xy: float = 0.0
    count: int = 0

    def observe(self, x: float, y: float, *, alpha: float) -> None:
        if self.count == 0:
            self.mean_x, self.mean_y, self.count = x, y, 1
            return
        a = max(alpha, 1.0 / (self.count + 1))  # plain means until the window is full
        dx = x - self.mean_x
        dy = y - self.mean_y
        self.mean_x += a * dx
        self.mean_y += a * dy
        self.var_x = (1.0 - a) * (self.var_x + a * dx * dx)
        self.cov_xy = (1.0 - a) * (self.cov_xy + a * dx * dy)
        self.count += 1

    def regression(self, *, min_samples: int, min_spread: float = 0.0) -> tuple[float, float] | None:
        """``(intercept, slope)`` by least squares once ``min_samples`` samples spread over ``x``
        (a weighted standard deviation of at least ``min_spread``, and above 0) give a positive slope
        and a non-negative intercept; else ``None``. A slope fitted over a narrow band of ``x`` says
        nothing about prompts far outside it (ten short prompts fitted an H200's slope at a tenth of
        its peers', docs/benchmark.md, routing round 7)."""
        if self.count < min_samples or self.var_x <= 0 or self.var_x < min_spread * min_spread:
            return None
        slope = self.cov_xy / self.var_x
        intercept = self.mean_y - slope * self.mean_x
        return (intercept, slope) if slope > 0 and intercept >= 0 else None


@dataclass(slots=True, init=False, unsafe_hash=True)
class Predictions:
    """What :meth:`BacklogTtftScorer.score` predicted in one pick, published as ``backlog.predicted``.

    Read-only, with a written-out ``__init__`` (as :class:`~igw.scheduling.values.RoutingRequest`'s
    and ``PublishedScores``'): one is made per pick, and the ``__init__`` that ``dataclasses``
    generates stays interpreted in the compiled build (the last interpreted call of a pick there)."""

    endpoints: Final[Sequence[EndpointView]]
    """The candidate list scored (the same object every scorer of the pick receives)."""
    seconds: Final[Sequence[float]]
    """Predicted seconds to first token per candidate, in ``endpoints`` order."""
    idle: Final[Sequence[float]]
    """Seconds each candidate would take for the whole prompt with nothing ahead and nothing cached
    (``intercept + slope x prompt tokens`` of the model it was predicted with): its hardware's speed."""
    measured: Final[Sequence[bool]]
    """Whether each candidate has ``MIN_FIT_SAMPLES`` samples of its own (else its model is a guess:
    the KV-based prior, another endpoint's model standing in, or a mean of a few samples)."""

    def __init__(
        self,
        endpoints: Sequence[EndpointView],
        seconds: Sequence[float],
        idle: Sequence[float],
        measured: Sequence[bool],
    ) -> None:
        self.endpoints = endpoints
        self.seconds = seconds
        self.idle = idle
        self.measured = measured


_predictions = slot_constructor(Predictions)
"""``Predictions(endpoints, seconds, idle, measured)`` by slot writes (made once per pick)."""


@dataclass(slots=True)
class Backlog:
    """Prompt tokens not yet prefilled, as of ``at`` (drained at the endpoint's speed since then)."""

    tokens: float = 0.0
    at: float = 0.0
    total: float = 0.0
    """Prompt tokens ever dispatched to the endpoint: what was sent after a request is
    ``total`` now minus ``total`` just after that request's dispatch."""

    def now(self, now: float, slope: float) -> float:
        if slope <= 0:
            return self.tokens
        return max(0.0, self.tokens - max(0.0, now - self.at) / slope)


def uncached(tokens: int, matched: Mapping[EndpointKey, float] | None, key: EndpointKey) -> float:
    """Prompt tokens the endpoint probably has to prefill: those outside its matched prefix share."""
    share = matched.get(key, 0.0) if matched else 0.0
    return max(float(MIN_TOKENS), tokens * (1.0 - share))


def kv_capacities(endpoints: Sequence[EndpointView]) -> list[float | None]:
    """KV-cache tokens per endpoint (``num_gpu_blocks x block_size`` from its scrape), or ``None``."""
    return [
        float(blocks * size)
        if (m := e.metrics) is not None and (blocks := m.num_gpu_blocks) and (size := m.block_size)
        else None
        for e in endpoints
    ]


def _prior_drain(endpoint: EndpointView) -> float:
    """Seconds per backlog token assumed from the endpoint's KV cache before anything is measured
    (a larger cache: a faster GPU); 0 (no drain) when its size is unknown."""
    [capacity] = kv_capacities([endpoint])
    return 1.0 / (capacity * PRIOR_TOKENS_PER_S_PER_KV_TOKEN) if capacity else 0.0


_Alike = tuple[list[float | None], bool, list[str | None] | None, bool]
"""Kept per scrape by ``backlog-ttft-scorer`` (:meth:`BacklogTtftScorer._alike_made`): capacities,
whether they are alike, each candidate's hardware label value, whether two values differ."""


def _differ(values: list[str | None] | None) -> bool:
    """:meth:`BacklogTtftScorer.labels_differ` from the candidates' label values: two distinct ones
    (``None``, unlabelled, counts as either)."""
    if values is None:
        return False
    distinct = set(values)
    distinct.discard(None)
    return len(distinct) > 1


def capacities_updated(
    old: list[float | None], changed: list[int], metrics: Sequence[EngineMetrics | None]
) -> list[float | None]:
    """:func:`kv_capacities` of a candidate list after the endpoints at ``changed`` were re-scraped
    (``metrics``: every candidate's, in order; ``old``: the list before), for
    :meth:`~igw.scheduling.columns.Columns.per_scrape`: ``old`` itself when no capacity changed
    (a scrape rarely changes the KV cache an engine holds), else a copy with the new values."""
    new: list[float | None] | None = None
    for i in changed:
        m = metrics[i]
        capacity = (
            float(blocks * size)
            if m is not None and (blocks := m.num_gpu_blocks) and (size := m.block_size)
            else None
        )
        if capacity != old[i] or (capacity is None) != (old[i] is None):
            if new is None:
                new = old.copy()
            new[i] = capacity
    return old if new is None else new


def slot_price(adapter: str, endpoint: EndpointView, *, exponent: float) -> float:
    """How much dearer a request for ``adapter`` is on ``endpoint`` because of its LoRA slots: 1 where
    the adapter is running (or the endpoint has no LoRA metrics); where it would take a free slot,
    ``(max_lora / free slots) ** exponent``, so the last free slots of a pod, which later cold
    adapters need, cost most; ``(max_lora + 1) ** exponent`` where no slot is free (it waits)."""
    m = endpoint.metrics
    if m is None or m.max_lora is None or m.max_lora <= 0:
        return 1.0
    active = m.active_adapters or frozenset()
    if adapter in active:
        return 1.0
    taken = len(active | (m.waiting_adapters or frozenset()))
    free = m.max_lora - taken
    ratio = m.max_lora / free if free > 0 else m.max_lora + 1.0
    return float(ratio**exponent)


def kind_pooled(
    own: Mapping[EndpointKey, Model], pooled: Mapping[EndpointKey, Model], label_of: Mapping[EndpointKey, str]
) -> dict[EndpointKey, Model]:
    """``pooled`` with every endpoint that shares its ``hardwareLabel`` value with another endpoint
    having its own regression (``own``) given that kind's median intercept and median slope."""
    kinds: dict[str, list[EndpointKey]] = {}
    for key in own:
        if (kind := label_of.get(key)) is not None:
            kinds.setdefault(kind, []).append(key)
    out = dict(pooled)
    for members in kinds.values():
        if len(members) > 1:
            model = (
                statistics.median(own[k][0] for k in members),
                statistics.median(own[k][1] for k in members),
            )
            out.update(dict.fromkeys(members, model))
    return out


@dataclass(slots=True)
class _StandIns:
    """Stand-ins found for unmeasured candidates (by position), valid for one candidate list (its
    keys and KV capacities) and one set of measured endpoints."""

    members_version: int
    keys: list[EndpointKey]
    capacities: list[float | None]
    largest: float | None
    by_position: dict[int, EndpointKey | None] = field(default_factory=dict)
    twins_version: int = -1
    """``SpeedPools.members_version`` the ``twins`` were found for."""
    twins: dict[int, EndpointKey | None] = field(default_factory=dict)
    """KV twins of candidates without a trusted regression, by position (:meth:`_anchored`)."""
    alike: dict[float, list[int]] = field(default_factory=dict)
    """Per KV capacity, the positions of the candidates within ``pool_ratio`` of it, closest first
    (:meth:`BacklogTtftScorer._kv_twin`); depends on the capacities alone."""


class BacklogTtftScorer(PluginHooks):
    type_name = TYPE
    signal = "waiting"
    consumes = frozenset({STATE_MATCH, STATE_SCORES})
    produces = frozenset({STATE_PREDICTED, STATE_ONE_KIND})

    def __init__(
        self,
        *,
        name: str = TYPE,
        alpha: float = DEFAULT_ALPHA,
        pool_ratio: float = DEFAULT_POOL_RATIO,
        speed_ratio: float = DEFAULT_SPEED_RATIO,
        speed_preference: float = DEFAULT_SPEED_PREFERENCE,
        max_tracked: int = DEFAULT_MAX_TRACKED,
        probe_share: float = DEFAULT_PROBE_SHARE,
        probe_kv_ratio: float = DEFAULT_PROBE_KV_RATIO,
        adapter_slot_price: float = DEFAULT_ADAPTER_SLOT_PRICE,
        one_kind_share: float = DEFAULT_ONE_KIND_SHARE,
        hardware_label: str = DEFAULT_HARDWARE_LABEL,
        slope_spread: float = DEFAULT_SLOPE_SPREAD,
        own_waiting_share: float = DEFAULT_OWN_WAITING_SHARE,
        pending_floor: float = DEFAULT_PENDING_FLOOR,
        prediction_exponent: float = DEFAULT_PREDICTION_EXPONENT,
    ) -> None:
        self.name = name
        self.prediction_exponent = prediction_exponent
        self.pending_floor = pending_floor
        self.pending_tokens: dict[EndpointKey, float] = {}
        """Per endpoint, the uncached prompt tokens of its ``pending`` dispatches: none of them is
        wholly prefilled yet, so ``pendingFloor`` of their sum is still ahead of a new request."""
        self.own_waiting_share = own_waiting_share
        self._pending_explains = 1.0 - own_waiting_share
        """How much of one scraped waiting request each pending dispatch beyond the first explains
        (for a request without an adapter; an adapter request's explain one each)."""
        self._adapter_cycle = False
        """Whether the pick being scored is for an adapter request (set by :meth:`score`)."""
        self.slope_spread = slope_spread
        self.hardware_label = hardware_label
        self.one_kind_share = one_kind_share
        self.adapter_slot_price = adapter_slot_price
        self._one_kind = False
        """Whether the last :meth:`score` found one kind of hardware (:meth:`_one_kind_scores`)."""
        self.probe_share = probe_share
        self.probe_kv_ratio = probe_kv_ratio
        self.prompt_mean = 0.0
        """Mean prompt tokens of the requests dispatched (exponentially weighted by ``alpha``)."""
        self._prompts = 0
        self._cheap_probes: set[EndpointKey] = set()
        """Unmeasured endpoints this cycle's request may probe without the preference penalty."""
        self.alpha = alpha
        self.pool_ratio = pool_ratio
        self.speed_ratio = speed_ratio
        self.speed_preference = speed_preference
        self._cycle_pooled: Mapping[EndpointKey, tuple[float, float]] = {}
        """The pooled models of the last :meth:`predicted` (the pick's own cycle, for ``on_picked``)."""
        self.max_tracked = max_tracked
        self.fits: dict[EndpointKey, LinearFit] = {}
        self.backlogs: dict[EndpointKey, Backlog] = {}
        self._cycle_models: dict[EndpointKey, tuple[float, float]] = {}
        """``(intercept, slope)`` each endpoint was predicted with in the last cycle, guesses
        included, so ``on_picked`` drains the chosen endpoint's backlog at the speed it was judged by."""
        self.dispatched: OrderedDict[str, tuple[EndpointKey, float, float, float, float]] = OrderedDict()
        self._label_of: dict[EndpointKey, str] = {}
        """Each picked endpoint's ``hardwareLabel`` value (labelled endpoints only)."""
        self._labels_version = 0
        """Counts changes to ``_label_of``."""
        self._kind_cache: tuple[object, int, dict[EndpointKey, Model]] | None = None
        """:meth:`_pooled`'s answer for one slope-pooled mapping and one ``_labels_version``."""
        self.pending: dict[EndpointKey, int] = {}
        """Per endpoint, the dispatches in ``dispatched`` (sent, first token not seen yet): the
        scraped ``waiting`` requests they explain."""
        """Request id -> (endpoint, backlog tokens ahead of it at dispatch, the endpoint's
        ``Backlog.total`` just after it, its tokens in the pending floor, the tokens it added to the
        backlog), until its outcome (or :meth:`on_not_sent`)."""
        self.pools = SpeedPools(pool_ratio=pool_ratio)
        """Every fit's own regression, pooled by speed (kept current whenever a fit learns)."""
        self._fits_version = 0
        """Counts changes to ``fits`` (the caches below are of one version)."""
        self._slowest_cache: tuple[int, float] | None = None
        self._members_version = 0
        """Counts changes to the set of endpoints in ``fits`` (which endpoints are measured)."""
        self._stand_ins: _StandIns | None = None
        """The unmeasured candidates' stand-ins for the last candidate list (:meth:`_unfitted`)."""
        self._fleet_best_cache: tuple[int, Mapping[EndpointKey, Model], Model] | None = None
        self._speed_version = 0
        """Counts changes to which endpoints have ``SPEED_SAMPLES`` samples (a fit reaching that
        count, a removal): with the pooled models, all :meth:`_key_slopes_alike` depends on."""
        self._slopes_kept: tuple[int, Mapping[EndpointKey, Model], list[EndpointKey], bool] | None = None
        """``(speed version, pooled models, candidate keys, answer)`` of the last pick's
        :meth:`_key_slopes_alike`, read while all three are unchanged (:meth:`_kept_slopes_alike`;
        the pooled models are a new dict after every change). After an outcome that changed the
        pooled models it is worked out again for those keys (off the pick's path, :meth:`_learn`)."""
        self._measured_version = 0
        """Counts changes to which endpoints have ``MIN_FIT_SAMPLES`` samples (a fit reaching that
        count, a removal): all the published ``measured`` flags depend on, with the keys."""
        self._measured_kept: tuple[int, list[EndpointKey], list[bool]] | None = None
        """``(measured version, candidate keys, measured flags)`` of the last :meth:`_publish`."""
        self._well_measured: tuple[int, list[EndpointKey], list[EndpointKey]] | None = None
        """``(speed version, candidate keys, those of them with SPEED_SAMPLES samples)`` for
        :meth:`_versioned_slopes_alike`."""
        self._alike_owner = (self, "alike")
        self._capacities_owner = (self, "capacities")
        """Names of the values kept per scrape (:meth:`Columns.per_scrape`), made once."""

    def _pooled(self) -> dict[EndpointKey, tuple[float, float]]:
        """``(intercept, slope)`` of every endpoint with its own regression, pooled by speed.

        Why pooled: the fits of identical pods differ by chance (prompt mix, batch timing), and read
        as speed differences they would send every request to whichever pod was lucky. Endpoints
        are sorted by slope and grouped while a slope is at most ``pool_ratio`` times the group's
        first (fastest); a group shares its mean intercept and slope. Compared with the first
        member, not the previous one, so small steps cannot chain a slow GPU to a fast one. Kept
        sorted between picks by :class:`~igw.scheduling.plugins.speed_pools.SpeedPools`.

        Endpoints labelled with one ``hardwareLabel`` value then share the median of their own
        regressions (:func:`kind_pooled`): they are one kind of GPU, and under a burst one pod's fit
        can come out far flatter than its twins' (a 2xH100 at a seventh of its nine twins' slope took
        the long prompts of random-1-02 and queued them for 3 s, docs/benchmark.md, routing round 7),
        which pooling by slope alone keeps apart as the fastest hardware.
        """
        pooled = self.pools.pooled()
        if not self._label_of:
            return pooled
        cached = self._kind_cache
        if cached is not None and cached[0] is pooled and cached[1] == self._labels_version:
            return cached[2]
        out = kind_pooled(self.pools.own(), pooled, self._label_of)
        self._kind_cache = (pooled, self._labels_version, out)
        return out

    def _model(
        self, key: EndpointKey, pooled: Mapping[EndpointKey, tuple[float, float]]
    ) -> tuple[float, float] | None:
        """``(intercept, slope)`` of the endpoint, or a guess, or ``None`` when nothing is measured.

        An endpoint with too few samples for a regression splits its own mean TTFT into a fixed
        half and a half proportional to tokens ahead (right at its mean tokens ahead). One without
        any sample takes the fleet's smallest intercept and slope (the caller scales it by KV size).
        """
        model = pooled.get(key)
        if model is not None:
            return model
        fit = self.fits.get(key)
        if fit is not None:
            # Half fixed, half per token: the mean is met at the mean tokens ahead, and both a
            # backlog and a long prompt still count.
            return fit.mean_y / 2, fit.mean_y / (2 * max(fit.mean_x, MIN_TOKENS))
        if not self.fits:
            return None
        return self._fleet_best(pooled)

    def _fleet_best(self, pooled: Mapping[EndpointKey, tuple[float, float]]) -> tuple[float, float]:
        """The smallest intercept and the smallest slope over every fitted endpoint's model (``fits``
        not empty); kept until ``fits`` or ``pooled`` changes (looked up once per unmeasured endpoint)."""
        cached = self._fleet_best_cache
        if cached is not None and cached[0] == self._fits_version and cached[1] is pooled:
            return cached[2]
        known = [m for k in self.fits if (m := self._model(k, pooled)) is not None]
        best = min(b for b, _ in known), min(s for _, s in known)
        self._fleet_best_cache = (self._fits_version, pooled, best)
        return best

    def _drain_slope(self, key: EndpointKey, intercept: float, slope: float, queued: float = 0.0) -> float:
        """Seconds per backlog token: the slope plus the intercept spread over the endpoint's mean
        tokens ahead, so a dispatch occupies the endpoint for about its own TTFT (the per-step cost
        is paid by every request, not only the per-token share)."""
        fit = self.fits.get(key)
        typical = fit.mean_x if fit is not None and fit.mean_x > 0 else DEFAULT_TYPICAL_TOKENS
        return slope + intercept / max(typical, queued)

    def _slowest_mean(self) -> float:
        cached = self._slowest_cache
        if cached is not None and cached[0] == self._fits_version:
            return cached[1]
        slowest = max((f.mean_y for f in self.fits.values() if f.count), default=0.0)
        self._slowest_cache = (self._fits_version, slowest)
        return slowest

    def _alike_measured(
        self, capacity: float | None, endpoints: Sequence[EndpointView], capacities: Sequence[float | None]
    ) -> EndpointKey | None:
        """The measured candidate whose KV capacity is closest to ``capacity``, if within ``pool_ratio``
        of it: probably the same hardware, so its model stands in until this endpoint's first outcome
        (also across ``hardwareLabel`` kinds: refusing that cost a LoRA draw, docs/benchmark.md)."""
        if capacity is None:
            return None
        best: tuple[float, EndpointKey] | None = None
        for e, c in zip(endpoints, capacities, strict=True):
            if c is None or e.key not in self.fits:
                continue
            ratio = max(c, capacity) / min(c, capacity)
            if ratio <= self.pool_ratio and (best is None or ratio < best[0]):
                best = (ratio, e.key)
        return None if best is None else best[1]

    def _anchored(
        self,
        i: int,
        fit: LinearFit,
        endpoints: Sequence[EndpointView],
        stand_ins: _StandIns,
        pooled: Mapping[EndpointKey, Model],
    ) -> Model:
        """Model of candidate ``i``, which has samples but no trusted regression of its own (too few,
        or all over a narrow band of tokens ahead): the slope of the candidate with a regression and
        the closest KV capacity (within ``pool_ratio``, not labelled as another GPU kind), through
        this endpoint's own mean sample; without such a candidate, its mean TTFT split into a fixed
        half and a half proportional to tokens ahead (:meth:`_model`).

        Why: the half-and-half split extrapolates a mean measured on short prompts to long ones (an
        H200 that had served ten prompts of about 30 tokens was predicted five times slower than its
        peers for 3,000), and a regression over such a band gave a tenth of their slope, which sent
        it every long prompt of a burst (docs/benchmark.md, routing round 7). Its own mean still
        moves the line, so a pod that is slower than its KV twin shows it.

        The twin depends only on the candidate list (keys, KV capacities; labels as first seen with
        it) and on which endpoints have a regression, so it is kept per position in ``stand_ins``
        until that set changes (a search over every candidate per unregressed candidate per pick
        cost a fifth of a pick's time, ``igw perf decide``)."""
        twins = self._twins_of(stand_ins)
        if i in twins:
            twin = twins[i]
        else:
            twin = twins[i] = self._kv_twin(i, endpoints, stand_ins, pooled)
        model = None if twin is None else pooled.get(twin)
        if model is None:
            return fit.mean_y / 2, fit.mean_y / (2 * max(fit.mean_x, MIN_TOKENS))
        slope = model[1]
        return max(0.0, fit.mean_y - slope * fit.mean_x), slope

    def _twins_of(self, stand_ins: _StandIns) -> dict[int, EndpointKey | None]:
        """The KV twins kept in ``stand_ins`` (:meth:`_anchored`), emptied first when the set of
        endpoints with a regression changed since they were found."""
        twins = stand_ins.twins
        version = self.pools.members_version
        if stand_ins.twins_version != version:
            twins.clear()
            stand_ins.twins_version = version
        return twins

    def _kv_twin(
        self,
        i: int,
        endpoints: Sequence[EndpointView],
        stand_ins: _StandIns,
        pooled: Mapping[EndpointKey, Model],
    ) -> EndpointKey | None:
        """The candidate other than ``i`` with a regression (in ``pooled``) and the KV capacity closest
        to ``i``'s, within ``pool_ratio``, not labelled as another GPU kind (the first such candidate
        when several are as close); ``None`` if there is none.

        The candidates within ``pool_ratio`` of a capacity, closest first (then by position), depend
        only on the candidate list's capacities, so they are kept in ``stand_ins`` per capacity
        (:meth:`_alike_order`); the first of them passing the checks is the closest one, as a pass
        over every candidate keeping the strictly closer one finds. Why: the set of endpoints with a
        regression changes every few picks, and each change looked for every twin again with a pass
        over the whole candidate list (``igw perf decide``)."""
        capacity = stand_ins.capacities[i]
        if capacity is None:
            return None
        order = stand_ins.alike.get(capacity)
        if order is None:
            order = stand_ins.alike[capacity] = self._alike_order(capacity, stand_ins.capacities)
        label = self.hardware_label
        own_label = endpoints[i].labels.get(label) if label else None
        for j in order:
            if j == i:
                continue
            e = endpoints[j]
            if e.key not in pooled:
                continue
            if own_label is not None and (other := e.labels.get(label)) is not None and other != own_label:
                continue
            return e.key
        return None

    def _alike_order(self, capacity: float, capacities: Sequence[float | None]) -> list[int]:
        """Positions of the known capacities within ``pool_ratio`` of ``capacity``, by ratio (the
        same ``max / min`` as :meth:`_alike_measured`'s), then by position."""
        ratio_limit = self.pool_ratio
        found: list[tuple[float, int]] = []
        for j, c in enumerate(capacities):
            if c is None:
                continue
            ratio = max(c, capacity) / min(c, capacity)
            if ratio <= ratio_limit:
                found.append((ratio, j))
        found.sort()
        return [j for _, j in found]

    def predicted(
        self,
        endpoints: Sequence[EndpointView],
        *,
        tokens: int,
        now: float,
        matched: Mapping[EndpointKey, float] | None = None,
    ) -> list[float]:
        """Predicted seconds to first token per endpoint; before any outcome, from a speed assumed
        proportional to the KV cache the endpoint holds (:meth:`_unmeasured`). ``matched``: share of
        the prompt each endpoint probably has cached (the prefix scorer's ``prefix.match``), not
        prefilled again."""
        capacities = kv_capacities(endpoints)
        self._cycle_models = {}
        if not self.fits:
            return self._unmeasured(endpoints, capacities, tokens=tokens, now=now, matched=matched)
        pooled = self._pooled()
        self._cycle_pooled = pooled
        return self._predict(endpoints, capacities, pooled, tokens=tokens, now=now, matched=matched)

    def _predict(
        self,
        endpoints: Sequence[EndpointView],
        capacities: list[float | None],
        pooled: Mapping[EndpointKey, Model],
        *,
        tokens: int,
        now: float,
        matched: Mapping[EndpointKey, float] | None,
        idle: list[float] | None = None,
        keys: list[EndpointKey] | None = None,
    ) -> list[float]:
        """:meth:`predicted` once some endpoint is measured: ``b + s * (backlog + own tokens)`` per
        candidate, plus one mean TTFT per unexplained waiting request; the model of each candidate is
        recorded in ``_cycle_models``, and its ``b + s * tokens`` appended to ``idle`` if given.
        ``keys``: the candidates' keys, when the caller has them (for :meth:`_stand_ins_for`).

        Why one loop with the helpers spelled out: it runs once per candidate per pick, and the
        helpers (:meth:`_model`, :meth:`_drain_slope`, :meth:`Backlog.now`, :func:`uncached`, and
        ``max`` of two numbers) cost a call each per candidate, most of the scorer's time. Every
        expression is the helper's own, in the same order (``b if b > a else a`` is ``max(a, b)``),
        so the floats are the same. Endpoints without a fit of their own (a newcomer) take
        :meth:`_unfitted` with the helpers."""
        # The dicts themselves, not their bound ``get``: in the compiled build a typed dict's
        # ``get`` is a direct C call, a bound method a generic call per candidate.
        fits, backlogs, pending, pending_tokens = self.fits, self.backlogs, self.pending, self.pending_tokens
        pooled_get = pooled.get
        floor_share = self.pending_floor
        pending_explains = 1.0 if self._adapter_cycle else self._pending_explains
        models = self._cycle_models
        # uncached() of an endpoint without a matched prefix share.
        plain = tokens * (1.0 - 0.0)
        if not plain > MIN_TOKENS_F:
            plain = MIN_TOKENS_F
        stand_ins: _StandIns | None = None
        twins: dict[int, EndpointKey | None] | None = None
        out: list[float] = []
        probes: list[int] = []
        self._cheap_probes = cheap_probes = set()
        cheap = self.probe_share > 0 and tokens <= self.prompt_mean * self.probe_share
        for i, e in enumerate(endpoints):
            key = e.key
            fit = fits.get(key)
            if fit is not None:
                model = pooled_get(key)
                if model is None:
                    # _anchored, written out (often about half the candidates have samples but no
                    # regression of their own): the kept twin, else found; the same expressions.
                    if twins is None:
                        if stand_ins is None:
                            stand_ins = self._stand_ins_for(endpoints, capacities, keys)
                        twins = self._twins_of(stand_ins)
                    twin = twins.get(i, _NOT_KEPT)
                    if twin is _NOT_KEPT:
                        assert stand_ins is not None  # set with twins
                        twin = twins[i] = self._kv_twin(i, endpoints, stand_ins, pooled)
                    twin_model = None if twin is None else pooled_get(twin)
                    if twin_model is None:
                        model = fit.mean_y / 2, fit.mean_y / (2 * max(fit.mean_x, MIN_TOKENS))
                    else:
                        slope = twin_model[1]
                        intercept = fit.mean_y - slope * fit.mean_x
                        model = (intercept if intercept > 0.0 else 0.0), slope  # max(0.0, intercept)
                intercept, slope = model
                typical = fit.mean_x
                if not typical > 0:
                    typical = DEFAULT_TYPICAL_TOKENS
                per_waiting = fit.mean_y
            else:
                if stand_ins is None:
                    stand_ins = self._stand_ins_for(endpoints, capacities, keys)
                intercept, slope, unlike = self._unfitted(i, endpoints, stand_ins, pooled)
                if unlike and e.inflight > 0:
                    # Unmeasured, unlike any measured endpoint, and its probe still out: the
                    # worst candidate (below) until its first outcome, so a slow newcomer is not
                    # flooded on a guess.
                    probes.append(i)
                elif unlike and cheap:
                    capacity, largest = capacities[i], stand_ins.largest
                    if capacity and largest and largest <= capacity * self.probe_kv_ratio:
                        cheap_probes.add(key)
                typical = DEFAULT_TYPICAL_TOKENS
                per_waiting = intercept
                model = (intercept, slope)
            models[key] = model  # the pooled tuple itself where there is one (the same values)
            if idle is not None:
                idle.append(intercept + slope * tokens)
            backlog = backlogs.get(key)
            if backlog is None:
                ahead = 0.0
            else:
                # Backlog.now at _drain_slope's rate.
                queued = backlog.tokens
                drain = slope + intercept / (queued if queued > typical else typical)
                if drain <= 0:
                    ahead = queued
                else:
                    elapsed = now - backlog.at
                    ahead = queued - (elapsed if elapsed > 0.0 else 0.0) / drain
                    if not ahead > 0.0:
                        ahead = 0.0
            if floor_share > 0.0:
                # No less than ``pendingFloor`` of the prompts still waiting for their first token.
                floor = floor_share * pending_tokens.get(key, 0.0)
                if floor > ahead:
                    ahead = floor
            if matched:
                own = tokens * (1.0 - matched.get(key, 0.0))
                if not own > MIN_TOKENS_F:
                    own = MIN_TOKENS_F
            else:
                own = plain
            predicted = intercept + slope * (ahead + own)
            m = e.metrics
            if m is not None and (waiting := m.waiting) is not None and waiting > 0:
                # Waiting requests beyond what this router's backlog explains (another router's
                # traffic, requests stalled for KV space) each cost about one mean TTFT; a
                # non-empty backlog explains one, and each further dispatch of this router still
                # waiting for its first token explains ``1 - ownWaitingShare`` of one.
                first = 1 if ahead > 0 else 0
                mine = pending.get(key, 0)
                if mine < first:
                    mine = first
                unexplained = waiting - (first + pending_explains * (mine - first))
                if unexplained > 0:
                    predicted += unexplained * per_waiting
            out.append(predicted)
        if probes:
            others = [p for i, p in enumerate(out) if i not in probes]
            worst = max(others, default=self._slowest_mean())
            for i in probes:
                out[i] = max(out[i], worst) * (1 + endpoints[i].inflight)
        return out

    def _stand_ins_for(
        self,
        endpoints: Sequence[EndpointView],
        capacities: list[float | None],
        keys: list[EndpointKey] | None = None,
    ) -> _StandIns:
        """The stand-ins of this candidate list (found on demand by :meth:`_unfitted`).

        Which measured candidate stands in for an unmeasured one depends only on the candidates' keys
        and KV capacities and on which endpoints are measured, so the answers are kept while those
        stay the same (finding one is a pass over every candidate, per unmeasured candidate).
        ``keys``: the candidates' keys when the caller has them (the pick's ``Columns.keys``)."""
        if keys is None:
            keys = [e.key for e in endpoints]
        cache = self._stand_ins
        if (
            cache is None
            or cache.members_version != self._members_version
            or cache.keys != keys
            or cache.capacities != capacities
        ):
            cache = self._stand_ins = _StandIns(
                members_version=self._members_version,
                keys=list(keys),  # a copy: ``keys`` may be the pick's shared Columns.keys
                capacities=capacities,
                largest=max([c for c in capacities if c is not None], default=None),
            )
        return cache

    def _unfitted(
        self,
        i: int,
        endpoints: Sequence[EndpointView],
        stand_ins: _StandIns,
        pooled: Mapping[EndpointKey, Model],
    ) -> tuple[float, float, bool]:
        """``(intercept, slope, unlike)`` of candidate ``i``, which has no fit of its own: the model of
        the measured candidate with alike KV capacity, or (``unlike``) the fleet's best slowed by how
        much less KV cache it holds than the largest endpoint (a smaller GPU is a slower one, until
        measured)."""
        capacities = stand_ins.capacities
        found = stand_ins.by_position
        if i in found:
            stand_in = found[i]
        else:
            stand_in = found[i] = self._alike_measured(capacities[i], endpoints, capacities)
        model = self._model(endpoints[i].key if stand_in is None else stand_in, pooled)
        assert model is not None  # some endpoint is measured, so every endpoint has a model
        intercept, slope = model
        if stand_in is not None:
            return intercept, slope, False
        capacity, largest = capacities[i], stand_ins.largest
        if capacity and largest:
            factor = max(1.0, largest / capacity)
            intercept, slope = intercept * factor, slope * factor
        return intercept, slope, True

    def _unmeasured(
        self,
        endpoints: Sequence[EndpointView],
        capacities: Sequence[float | None],
        *,
        tokens: int,
        now: float,
        matched: Mapping[EndpointKey, float] | None,
    ) -> list[float]:
        """Before the first outcome: tokens ahead (this router's dispatches, drained at the assumed
        speed, plus this request) over a prefill speed proportional to the endpoint's KV cache
        (:data:`PRIOR_TOKENS_PER_S_PER_KV_TOKEN`); endpoints not scraped yet take the mean capacity.
        Without the drain every dispatch would count for ever, and after enough of them a small,
        slow GPU would look the least loaded."""
        known = [c for c in capacities if c is not None]
        fallback = sum(known) / len(known) if known else 1.0
        out: list[float] = []
        for e, cap in zip(endpoints, capacities, strict=True):
            per_token = 1.0 / ((cap or fallback) * PRIOR_TOKENS_PER_S_PER_KV_TOKEN)
            self._cycle_models[e.key] = (0.0, per_token)
            backlog = self.backlogs.get(e.key)
            ahead = backlog.now(now, per_token) if backlog else 0.0
            out.append(per_token * (ahead + uncached(tokens, matched, e.key)))
        return out

    def one_speed(self, endpoints: Sequence[EndpointView]) -> bool:
        """Whether the candidates look like one kind of hardware: every KV capacity known and within
        ``pool_ratio`` of the others, and no two of their well-measured slopes (at least
        ``SPEED_SAMPLES`` samples each) more than ``speed_ratio`` apart. KV capacity alone cannot tell
        an A100-80GB from an H100 serving the same model; slopes alone cannot tell identical pods
        apart from different ones, because on identical pods serving shared prefixes the requests'
        uncached lengths barely vary and the fitted slopes scatter (by less than ``speed_ratio``)."""
        self._cycle_pooled = self._pooled()
        return (
            self._alike_capacities(endpoints)
            and not self.labels_differ(endpoints)
            and self._slopes_alike(endpoints, self._cycle_pooled)
        )

    def labels_differ(self, endpoints: Sequence[EndpointView]) -> bool:
        """Whether two candidates carry different ``hardwareLabel`` values (unlabelled ones count as
        either): then they are not one kind of hardware, whatever their KV capacities say."""
        label = self.hardware_label
        if not label:
            return False
        values = {v for e in endpoints if (v := e.labels.get(label)) is not None}
        return len(values) > 1

    def _slopes_alike(self, endpoints: Sequence[EndpointView], pooled: Mapping[EndpointKey, Model]) -> bool:
        """No two of the candidates' well-measured pooled slopes more than ``speed_ratio`` apart."""
        return self._key_slopes_alike([e.key for e in endpoints], pooled)

    def _key_slopes_alike(self, keys: list[EndpointKey], pooled: Mapping[EndpointKey, Model]) -> bool:
        """:meth:`_slopes_alike` over the candidates' keys (a pick has them read already)."""
        fits_get, pooled_get = self.fits.get, pooled.get
        slopes = [
            m[1]
            for k in keys
            if (f := fits_get(k)) is not None
            and f.count >= SPEED_SAMPLES
            and (m := pooled_get(k)) is not None
        ]
        return not slopes or max(slopes) <= min(slopes) * self.speed_ratio

    def _kept_slopes_alike(self, keys: list[EndpointKey], pooled: Mapping[EndpointKey, Model]) -> bool:
        """:meth:`_key_slopes_alike` of a pick (``pooled``: this fits version's pooled models), read
        from ``_slopes_kept`` when the well-measured endpoints, the pooled models and the candidate
        keys are those it was made for (an outcome on an endpoint without a regression of its own
        changes none of them)."""
        kept = self._slopes_kept
        if kept is not None and kept[0] == self._speed_version and kept[1] is pooled and kept[2] == keys:
            return kept[3]
        answer = self._versioned_slopes_alike(keys, pooled)
        self._slopes_kept = (self._speed_version, pooled, list(keys), answer)
        return answer

    def _versioned_slopes_alike(self, keys: list[EndpointKey], pooled: Mapping[EndpointKey, Model]) -> bool:
        """:meth:`_key_slopes_alike` with the well-measured candidates (those with ``SPEED_SAMPLES``
        samples) kept per ``_speed_version`` and candidate keys (``_well_measured``): which
        endpoints have that many samples changes only with the version (a fit reaching the count,
        a removal), while the pooled models, which this reads anew, change with most outcomes.
        The same slopes in the same order, so the same answer."""
        kept = self._well_measured
        if kept is None or kept[0] != self._speed_version or kept[1] != keys:
            fits_get = self.fits.get
            measured = [k for k in keys if (f := fits_get(k)) is not None and f.count >= SPEED_SAMPLES]
            kept = self._well_measured = (self._speed_version, list(keys), measured)
        pooled_get = pooled.get
        slopes = [m[1] for k in kept[2] if (m := pooled_get(k)) is not None]
        return not slopes or max(slopes) <= min(slopes) * self.speed_ratio

    def _alike_made(self, endpoints: Sequence[EndpointView], capacities: list[float | None]) -> _Alike:
        """What :meth:`_score_base` keeps per scrape for the one-kind check: the capacities it was
        made from, :meth:`_capacities_alike` of them, each candidate's ``hardwareLabel`` value
        (``None`` for all when the check is off) and :meth:`labels_differ`'s answer from them."""
        label = self.hardware_label
        values = [e.labels.get(label) for e in endpoints] if label else None
        return capacities, self._capacities_alike(capacities), values, _differ(values)

    def _alike_updated(
        self,
        old: _Alike,
        changed: list[int],
        endpoints: Sequence[EndpointView],
        capacities: list[float | None],
    ) -> _Alike:
        """:meth:`_alike_made` after the candidates at ``changed`` were re-scraped: the capacity
        check again only when the capacities changed (:func:`capacities_updated` hands back the same
        list when none did), and the labels read again at ``changed`` only (the others' views are
        those the values were read from, or copies of them with the same labels), so the answers
        are :meth:`_alike_made`'s without a pass over every candidate per pick on a large pool,
        where some candidate is re-scraped between almost any two picks."""
        was, alike, values, differ = old
        if capacities is not was:
            alike = self._capacities_alike(capacities)
        if values is not None:
            label, fresh = self.hardware_label, None
            for i in changed:
                value = endpoints[i].labels.get(label)
                if value != values[i]:
                    if fresh is None:
                        fresh = values.copy()
                    fresh[i] = value
            if fresh is not None:
                values, differ = fresh, _differ(fresh)
        return capacities, alike, values, differ

    def _unlike_capacities(self, endpoints: Sequence[EndpointView]) -> bool:
        """Every candidate's KV capacity known, and the largest more than ``pool_ratio`` times the
        smallest (the fleet is known to mix kinds of hardware)."""
        capacities = kv_capacities(endpoints)
        if not capacities or None in capacities:
            return False
        known = cast("list[float]", capacities)
        return max(known) > min(known) * self.pool_ratio

    def _capacities_alike(self, capacities: list[float | None]) -> bool:
        """:meth:`_alike_capacities` from the candidates' :func:`kv_capacities`: every one known and
        the largest at most ``pool_ratio`` times the smallest. The same answer: the capacities are
        the products ``_alike_capacities`` compares, as floats (exact below 2**53, where it
        compares the integers), and a zero or missing number is ``None`` here and fails its
        ``lo > 0`` there, before the same comparison of the floats."""
        if not capacities or None in capacities:
            return False
        known = cast("list[float]", capacities)
        return max(known) <= min(known) * self.pool_ratio

    def _alike_capacities(self, endpoints: Sequence[EndpointView]) -> bool:
        """Every candidate's KV capacity known and within ``pool_ratio`` of the others."""
        try:
            # The usual case, in C-level passes: every endpoint publishes both numbers (a missing
            # metrics object or number raises here; a zero, which counts as unknown, fails lo > 0).
            sizes = [e.metrics.num_gpu_blocks * e.metrics.block_size for e in endpoints]  # type: ignore[union-attr,operator]
            lo, hi = min(sizes), max(sizes)
        except (AttributeError, TypeError, ValueError):
            pass
        else:
            if lo > 0 and hi < EXACT_IN_FLOAT:  # as floats below, the same values and comparison
                return bool(hi <= lo * self.pool_ratio)
        capacities = kv_capacities(endpoints)
        if not capacities or None in capacities:
            return False
        known = cast("list[float]", capacities)
        return max(known) <= min(known) * self.pool_ratio

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        self._cycle_models = {}
        adapter = ctx.request.adapter
        if adapter is not None and (self.adapter_slot_price <= 0 or not self._unlike_capacities(endpoints)):
            # Adapter requests left to the LoRA scorers and filter unless the candidates' KV caches
            # are known to differ: on identical pods the slopes learnt from adapter requests
            # (adapter loads and slot waits included) scatter enough to pass for different
            # hardware, and before the first scrape nothing is known. Dispatches still count.
            return UnitScores([1.0] * len(endpoints))
        self._one_kind = False
        self._adapter_cycle = adapter is not None
        try:
            scores = self._score_base(ctx, endpoints)
        finally:
            self._adapter_cycle = False
        if adapter is None or self._one_kind:
            # Identical pods: the LoRA scorers and filter place adapter requests, as before.
            return scores
        exponent = self.adapter_slot_price
        return [
            None if s is None else s / slot_price(adapter, e, exponent=exponent)
            for s, e in zip(scores, endpoints, strict=True)
        ]

    def _score_base(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        """The score without adapter slot prices (see :meth:`score`)."""
        pooled = self._cycle_pooled = self._pooled()
        # The KV capacities and their check read the scrapes only: once per scrape, between picks.
        # The capacities are updated at the re-scraped positions only, and the check reads them
        # (what ``_alike_capacities`` computes from the views, :meth:`_capacities_alike`).
        cols = ctx.columns(endpoints)
        capacities = cols.per_scrape(
            self._capacities_owner,
            lambda: kv_capacities(endpoints),
            lambda old, changed: capacities_updated(old, changed, cols.metrics),
        )
        _, capacities_alike, _, labels_differ = cols.per_scrape(
            self._alike_owner,
            lambda: self._alike_made(endpoints, capacities),
            lambda old, changed: self._alike_updated(old, changed, endpoints, capacities),
        )
        if capacities_alike and not labels_differ and self._kept_slopes_alike(cols.keys, pooled):
            # one_speed: on endpoints of one speed the queue, prefix and prefill-collision scorers
            # already balance the load (this scorer on top made shared-prefix tails worse,
            # docs/benchmark.md).
            self._one_kind = True
            ctx.state[STATE_ONE_KIND] = endpoints
            return self._one_kind_scores(ctx, endpoints)
        tokens = max(MIN_TOKENS, ctx.request.prompt_tokens)
        now, matched = ctx.now, ctx.state.get(STATE_MATCH)
        if not self.fits:
            predicted = self._unmeasured(endpoints, capacities, tokens=tokens, now=now, matched=matched)
            self._publish(ctx, endpoints, predicted, tokens)
            if self.prediction_exponent != 1.0 and not self._adapter_cycle:
                return cast("list[float | None]", self._ratios(predicted, endpoints))
            best = min(predicted) if predicted else 0.0
            return cast("list[float | None]", [1.0 if p <= 0 else best / p for p in predicted])
        preference = self.speed_preference
        idle: list[float] = []
        predicted = self._predict(
            endpoints, capacities, pooled, tokens=tokens, now=now, matched=matched, idle=idle, keys=cols.keys
        )
        models = self._cycle_models
        if len(models) != len(idle):  # a key listed twice: each position takes the key's last model
            idle = [b + s * tokens for b, s in [models[e.key] for e in endpoints]]
        # Without a key listed twice ``idle`` is already what _publish would compute from
        # ``_cycle_models`` (the same ``intercept + slope * tokens`` per candidate): handed over.
        self._publish(ctx, endpoints, predicted, tokens, idle, cols.keys)
        best = min(predicted) if predicted else 0.0
        if self.prediction_exponent != 1.0 and not self._adapter_cycle:
            ratios = self._ratios(predicted, endpoints)
            if preference > 0 and (fastest := min(idle)) > 0:
                probing = self._cheap_probes
                if probing:
                    return cast(
                        "list[float | None]",
                        [
                            r * (fastest / (fastest if e.key in probing else t)) ** preference
                            for r, e, t in zip(ratios, endpoints, idle, strict=True)
                        ],
                    )
                # No cheap probe (the usual case): ``fastest / t`` for every candidate, without the
                # candidates' keys (one iterator less, no set look-up per candidate).
                if len(idle) != len(ratios):
                    raise ValueError("backlog-ttft-scorer: ratios and idle times of different lengths")
                if NATIVE_POW and -math.inf < preference < math.inf:
                    return cast("list[float | None]", _preferred(ratios, idle, fastest, preference))
                preferred = [r * (fastest / idle[i]) ** preference for i, r in enumerate(ratios)]
                return cast("list[float | None]", preferred)
            return cast("list[float | None]", ratios)
        if preference > 0:
            fastest = min(idle)
            if self._cheap_probes:
                # Their guess already slowed their prediction; a cheap probe is not penalised twice.
                probing = self._cheap_probes
                idle = [fastest if e.key in probing else t for e, t in zip(endpoints, idle, strict=True)]
            if fastest > 0:
                # The score times the idle-speed factor, in one pass. With every prediction
                # positive both factors lie in (0, 1]: vouched (a NaN still shows in the totals).
                if preference == 1.0 and best > 0:
                    # The default exponent: ``x ** 1.0`` is ``x`` for every float (C ``pow``), and
                    # with ``best > 0`` no prediction is ``<= 0``; the same floats, no power call.
                    return UnitScores(
                        [best / p * (fastest / t) for p, t in zip(predicted, idle, strict=True)]
                    )
                scores = [
                    (1.0 if p <= 0 else best / p) * (fastest / t) ** preference
                    for p, t in zip(predicted, idle, strict=True)
                ]
                return UnitScores(scores) if best > 0 else cast("list[float | None]", scores)
        if best > 0:
            return UnitScores([best / p for p in predicted])
        return cast("list[float | None]", [1.0 if p <= 0 else best / p for p in predicted])

    def _ratios(self, predicted: list[float], endpoints: Sequence[EndpointView]) -> list[float]:
        """``best / predicted_i`` with the part of it between endpoints of one model sharpened:
        ``(best_k / predicted_i) ** predictionExponent x best / best_k``, where ``best_k`` is the lowest
        prediction among the candidates predicted with endpoint ``i``'s model (``intercept, slope``:
        one kind of hardware, pooled, or one KV capacity before any sample) and carrying its
        ``hardwareLabel`` value, and ``best`` the lowest of all (before any sample an H200 and a
        2xH100 pod hold about the same KV cache: random-1-14, docs/benchmark.md, routing round 10).
        Between kinds the ratio stays as it is (sharpened there too, an overloaded H200 beside six
        4xA10G pods drew more than it could serve: random-1-01, same section). Requests without an
        adapter only (:meth:`_score_base`): sharpened for adapter requests too, random-1-03 (a LoRA
        draw) lost its tail. A prediction <= 0 scores 1.0."""
        best = min(predicted) if predicted else 0.0  # no keyword: a generic call compiled
        # The models as objects (a Mapping of objects): in the compiled build a ``tuple[float,
        # float]`` read from the typed dict is unboxed to two C doubles and boxed again (a new
        # tuple and two floats) wherever it is stored or used as a key, and the old kinds did that
        # per candidate per dict operation, four times.
        models: Mapping[EndpointKey, object] = self._cycle_models
        label = self.hardware_label
        if label:
            kinds: list[object] = [(models[e.key], e.labels.get(label)) for e in endpoints]
        else:  # ``(model, None)`` for every candidate groups as the model alone
            kinds = [models[e.key] for e in endpoints]
        # One hash per candidate: each kind's group number, then the groups' lowest predictions in
        # a list. A group's lowest is set only by a prediction below infinity, as ``p <
        # best_of.get(kind, inf)`` did; a group left without one fails as ``best_of[kind]`` did.
        n = len(predicted)
        if len(kinds) != n:
            raise ValueError(
                "_ratios: predictions and candidates of different lengths"
            )  # as zip(strict=True)
        group_of: dict[object, int] = {}
        groups: list[int] = []
        lowest: list[float] = []
        # Loops by position over lists: in the compiled build native, where ``zip`` is a call
        # through the type (its keyword) and an iterator step per item.
        for i in range(n):
            p = predicted[i]
            kind = kinds[i]
            g = group_of.get(kind)
            if g is None:
                g = group_of[kind] = len(lowest)
                lowest.append(math.inf)
            if p < lowest[g]:
                lowest[g] = p
            groups.append(g)
        exponent = self.prediction_exponent
        # Compiled: ``math.pow`` (a native C call on doubles) where ``**`` would box both operands
        # and go through the generic number protocol; for a finite positive base and a finite
        # exponent both are C ``pow`` of the same doubles (see :func:`_preferred`).
        native_pow = NATIVE_POW and -math.inf < exponent < math.inf
        out: list[float] = []
        for i in range(n):
            p = predicted[i]
            if p <= 0:
                out.append(1.0)
                continue
            g = groups[i]
            low = lowest[g]
            if low == math.inf:
                raise KeyError(kinds[groups.index(g)])
            base = low / p
            if native_pow and 0.0 < base < math.inf:
                out.append(math.pow(base, exponent) * (best / low))
            else:
                out.append(base**exponent * (best / low))
        return out

    def _one_kind_scores(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        """Scores on one kind of hardware: ``1 - oneKindShare x (1 - s)`` where ``s`` is
        ``predicted-ttft-scorer``'s score of this pick, for a request without an adapter; else (no
        such score, an adapter request, share 0) 1.0 everywhere.

        Why: on identical pods the backlog model would only repeat what the queue and collision
        scorers see, and at full weight it lengthened shared-prefix tails; but the median on
        identical pods is set by picks landing on a pod still prefilling this router's recent
        dispatches, which ``predicted-ttft-scorer`` (waiting count including unreflected dispatches)
        sees best, and a heavier weight on it moved the median towards round-robin's while costing
        mixed fleets (docs/benchmark.md, routing rounds 5 and 6). Repeating a share of its column
        here gives it that weight on one kind of hardware only."""
        share = self.one_kind_share
        found = ctx.state.get(STATE_SCORES)
        if (
            share <= 0
            or ctx.request.adapter is not None
            or not isinstance(found, PublishedScores)
            or found.endpoints is not endpoints
        ):
            return UnitScores([1.0] * len(endpoints))
        scores = found.scores
        if type(scores) is UnitScores and share <= 1.0:
            # Every s within [0, 1] and the share within (0, 1]: 1 - s, the product and 1 minus it
            # all stay within [0, 1] under rounding, so the scheduler's range check is skipped.
            return UnitScores([1.0 - share * (1.0 - s) for s in scores])  # type: ignore[operator]  # no None
        return [None if s is None else 1.0 - share * (1.0 - s) for s in scores]

    def _publish(
        self,
        ctx: CycleContext,
        endpoints: Sequence[EndpointView],
        predicted: list[float],
        tokens: int,
        idle: list[float] | None = None,
        keys: list[EndpointKey] | None = None,
    ) -> None:
        """Publish this pick's predictions (``backlog.predicted``) for a request without an adapter
        (an adapter request's TTFT depends on slots this model leaves to the slot price).

        ``idle``: each candidate's ``b + s * tokens`` by the model in ``_cycle_models`` when the
        caller has it already; computed here otherwise. Not changed afterwards by the caller.
        ``keys``: the candidates' keys when the caller has them (the pick's ``Columns.keys``). The
        ``measured`` flags are kept between picks (``_measured_kept``) and shared by the published
        predictions: never to be changed."""
        if ctx.request.adapter is None:
            if idle is None:
                models = self._cycle_models
                idle = [b + s * tokens for b, s in [models[e.key] for e in endpoints]]
            if keys is None:
                keys = [e.key for e in endpoints]
            kept = self._measured_kept
            if kept is None or kept[0] != self._measured_version or kept[1] != keys:
                # Which endpoints have MIN_FIT_SAMPLES samples changes only with the version (a fit
                # reaching the count, a removal): kept per candidate keys, as the speed check's.
                fits_get = self.fits.get
                measured = [(f := fits_get(k)) is not None and f.count >= MIN_FIT_SAMPLES for k in keys]
                kept = self._measured_kept = (self._measured_version, list(keys), measured)
            ctx.state[STATE_PREDICTED] = _predictions(endpoints, predicted, idle, kept[2])

    def _drain_of(self, endpoint: EndpointView, queued: float) -> float:
        """Seconds per backlog token of ``endpoint``: the model this cycle predicted with, else its
        own or the fleet's, else the speed assumed from its KV cache; 0 (no drain) when unknown."""
        key = endpoint.key
        model = self._cycle_models.get(key) or self._model(key, self._cycle_pooled)
        if model is not None:
            return self._drain_slope(key, *model, queued)
        return _prior_drain(endpoint)

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """The pick's uncached prompt tokens join the endpoint's backlog, drained up to now first.

        Once per pick, so the helpers are written out (:meth:`_drain_of`, :meth:`_drain_slope`,
        :meth:`Backlog.now`, :func:`uncached`, and ``max`` of two numbers as ``b if b > a else a``),
        each expression in the helper's own order: the same floats."""
        key = endpoint.key
        now = ctx.now
        backlog = self.backlogs.get(key)
        if backlog is None:
            backlog = self.backlogs[key] = Backlog(at=now)
        queued = backlog.tokens
        model = self._cycle_models.get(key) or self._model(key, self._cycle_pooled)
        if model is None:
            # Nothing measured: the KV-based prior (what _drain_of gives: its own look-up of the
            # model, just made, would find None again).
            drain = _prior_drain(endpoint)
        else:
            intercept, slope = model
            fit = self.fits.get(key)
            typical = fit.mean_x if fit is not None and fit.mean_x > 0 else DEFAULT_TYPICAL_TOKENS
            drain = slope + intercept / (queued if queued > typical else typical)
        if drain <= 0:
            ahead = queued
        else:
            elapsed = now - backlog.at
            ahead = queued - (elapsed if elapsed > 0.0 else 0.0) / drain
            if not ahead > 0.0:
                ahead = 0.0
        pending_tokens = self.pending_tokens
        prompt_tokens = ctx.request.prompt_tokens
        matched = ctx.state.get(STATE_MATCH)
        own = prompt_tokens * (1.0 - (matched.get(key, 0.0) if matched else 0.0))
        if not own > MIN_TOKENS_F:
            own = MIN_TOKENS_F
        backlog.tokens = ahead + own
        backlog.total += own
        self._prompts += 1
        weight = 1.0 / self._prompts  # a plain mean until the window is full
        if not weight > self.alpha:
            weight = self.alpha
        self.prompt_mean += weight * (prompt_tokens - self.prompt_mean)
        backlog.at = now
        label = self.hardware_label
        if label and (kind := endpoint.labels.get(label)) is not None and self._label_of.get(key) != kind:
            self._label_of[key] = kind
            self._labels_version += 1
        rid = ctx.request.request_id
        pending = self.pending
        if (old := self.dispatched.get(rid)) is not None:  # a retried id: its earlier dispatch is over
            pending[old[0]] -= 1
            pending_tokens[old[0]] -= old[3]
        floored = own if ctx.request.stream else 0.0  # see "pending floor" in the module docstring
        self.dispatched[rid] = (key, ahead, backlog.total, floored, own)
        pending[key] = pending.get(key, 0) + 1
        pending_tokens[key] = pending_tokens.get(key, 0.0) + floored
        while len(self.dispatched) > self.max_tracked * max(1, len(self.backlogs)):
            gone = self.dispatched.popitem(last=False)[1]
            pending[gone[0]] -= 1
            pending_tokens[gone[0]] -= gone[3]

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        """Learn the request's TTFT as soon as it is known (a streaming response's first token)."""
        self._learn(outcome, now=now)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        """Learn from the completed request unless its first token already taught this scorer."""
        self._learn(outcome, now=now)

    def _learn(self, outcome: RequestOutcome, *, now: float) -> None:
        entry = self.dispatched.pop(outcome.request_id, None)
        if entry is not None:
            self.pending[entry[0]] -= 1
            self.pending_tokens[entry[0]] -= entry[3]
        if entry is None or not outcome.ok or outcome.ttft_s is None or outcome.ttft_s < 0:
            return
        key, ahead, total_after = entry[0], entry[1], entry[2]
        own = max(MIN_TOKENS, outcome.prompt_tokens - outcome.cached_tokens)
        if not math.isfinite(outcome.ttft_s):
            return
        fit = self.fits.get(key)
        if fit is None:
            fit = self.fits[key] = LinearFit()
            self._members_version += 1
        fit.observe(ahead + own, outcome.ttft_s, alpha=self.alpha)
        self.pools.set(key, fit.regression(min_samples=MIN_FIT_SAMPLES, min_spread=self.slope_spread))
        # Regrouped now, after the outcome, rather than by the next pick (the same grouping: it
        # depends on the fits and the labels seen, and a new dict is handed out either way); the
        # models a pick reads, so that the kept speed check below is the one the next pick uses.
        pooled = self._pooled()
        self._fits_version += 1
        if fit.count == SPEED_SAMPLES:
            self._speed_version += 1
        if fit.count == MIN_FIT_SAMPLES:
            self._measured_version += 1
        kept = self._slopes_kept
        if kept is not None and (kept[0] != self._speed_version or kept[1] is not pooled):
            # The last pick's candidates: their speed check for the new fits, worked out now.
            keys = kept[2]
            self._slopes_kept = (
                self._speed_version,
                pooled,
                keys,
                self._versioned_slopes_alike(keys, pooled),
            )
        backlog = self.backlogs.get(key)
        if backlog is not None:
            # The engine prefills in arrival order: once this request has its first token, all that
            # was dispatched there before it is prefilled too, so at most what came after is left.
            # Once per outcome, so :meth:`_drain_slope` (``fit`` is the key's fit) and
            # :meth:`Backlog.now` are written out as in :meth:`on_picked`: the same floats.
            model = self._cycle_models.get(key) or self._model(key, self._cycle_pooled)
            queued = backlog.tokens
            if model is None:
                ahead = queued  # no drain: Backlog.now at slope 0
            else:
                intercept, slope = model
                typical = fit.mean_x if fit.mean_x > 0 else DEFAULT_TYPICAL_TOKENS
                drain = slope + intercept / (queued if queued > typical else typical)
                if drain <= 0:
                    ahead = queued
                else:
                    elapsed = now - backlog.at
                    ahead = queued - (elapsed if elapsed > 0.0 else 0.0) / drain
                    if not ahead > 0.0:
                        ahead = 0.0
            backlog.tokens = min(ahead, backlog.total - total_after)
            backlog.at = now

    def on_not_sent(self, request_id: str, endpoint: EndpointKey, *, sent_to: EndpointView | None) -> bool:
        """Take the pick of ``request_id`` off ``endpoint`` (its backlog, its pending floor, the
        dispatch its first token would teach the fit), and with ``sent_to`` put it there instead.

        Left in place, a pick flow control gave back (the pump picks a queued request's pod at every
        poll) added its prompt to that pod's backlog each time, and one whose request never came
        back (its client left, shed) held its pending floor there until ``maxTracked`` more picks;
        a pick sent elsewhere (steered, or its connection failed) taught the picked pod's fit the
        time to first token of the pod that served it (until session s41)."""
        entry = self.dispatched.get(request_id)
        if entry is None or entry[0] != endpoint:
            return False
        del self.dispatched[request_id]
        floored, own = entry[3], entry[4]
        self.pending[endpoint] -= 1
        self.pending_tokens[endpoint] -= floored
        backlog = self.backlogs.get(endpoint)
        if backlog is not None:  # drained since, in arrival order: what is left of it at most
            left = backlog.tokens - own
            backlog.tokens = left if left > 0.0 else 0.0
        if sent_to is None:
            return True
        key = sent_to.key
        target = self.backlogs.get(key)
        if target is None:
            target = self.backlogs[key] = Backlog(at=backlog.at if backlog is not None else 0.0)
        ahead = target.tokens  # as of its last update: the drain since is not known here
        target.tokens = ahead + own
        target.total += own
        self.dispatched[request_id] = (key, ahead, target.total, floored, own)
        self.pending[key] = self.pending.get(key, 0) + 1
        self.pending_tokens[key] = self.pending_tokens.get(key, 0.0) + floored
        return True

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        gone = set(keys)
        for key in gone:
            self.fits.pop(key, None)
            self.backlogs.pop(key, None)
            self.pools.set(key, None)
        self._fits_version += 1
        self._members_version += 1
        self._speed_version += 1
        self._measured_version += 1
        for rid in [rid for rid, entry in self.dispatched.items() if entry[0] in gone]:
            del self.dispatched[rid]
        for key in gone:
            self.pending.pop(key, None)
            self.pending_tokens.pop(key, None)
            if self._label_of.pop(key, None) is not None:
                self._labels_version += 1

    # Pick notes (``SharesPicks``, ``igw serve --workers N``): the other workers' dispatches join
    # this worker's backlogs, so N workers do not each believe a pod idle that the others filled.

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """The pick's time, the prompt tokens it added to the pod's backlog (the uncached share, as
        :meth:`on_picked` counted them) and the seconds per token it drains at here. Only numbers
        derived from the request: no prompt text or token ids. Why this state may be shared while
        the fits may not: a backlog drains by time on its own (a learned dispatch needs no
        completion to leave it), whereas each fit pairs a dispatch with its own request's first
        token, which only the worker that owns the request sees.

        Nothing while the pick's candidates were one kind of hardware: then every endpoint scores
        1.0 and backlogs decide nothing, so homogeneous fleets pay neither the note nor its
        learning. Should the fleet turn mixed, the other workers' backlogs lack those picks for
        about one drain time (the pods' own prefill of them)."""
        if self._one_kind:
            return None
        key = endpoint.key
        backlog = self.backlogs.get(key)
        queued = backlog.tokens if backlog is not None else 0.0
        own = uncached(ctx.request.prompt_tokens, ctx.state.get(STATE_MATCH), key)
        return {"t": ctx.now, "n": own, "d": self._drain_of(endpoint, queued)}

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Add another worker's dispatch to ``endpoint``'s backlog, drained from its pick time.

        The note arrives up to a report interval late: when it is older than the backlog's last
        update, only what would be left of it by then is added (the engine prefills in arrival
        order, so the earlier dispatch drains first); when newer, the backlog is drained up to the
        note's time first. The drain rate is this worker's model of the pod when it has one, else
        the sender's. The tokens count in ``Backlog.total`` too, so the first-token cap of
        :meth:`_learn` (only what was dispatched after a request can be left) keeps them."""
        if not isinstance(note, dict):
            raise ValueError(f"{self.name}: a pick note is an object (got {type(note).__name__})")
        at, tokens, drain = note.get("t"), note.get("n"), note.get("d")
        for field_name, value in (("t", at), ("n", tokens), ("d", drain)):
            if type(value) not in (int, float) or not math.isfinite(cast(float, value)):
                raise ValueError(f"{self.name}: pick note field {field_name!r} must be a finite number")
        at, tokens, drain = float(cast(float, at)), float(cast(float, tokens)), float(cast(float, drain))
        if tokens < 0 or drain < 0:
            raise ValueError(f"{self.name}: pick note fields 'n' and 'd' must not be negative")
        backlog = self.backlogs.get(endpoint)
        if backlog is None:
            backlog = self.backlogs[endpoint] = Backlog(at=at)
        model = self._cycle_models.get(endpoint) or self._model(endpoint, self._cycle_pooled)
        if model is not None:
            drain = self._drain_slope(endpoint, *model, backlog.tokens)
        if at >= backlog.at:
            backlog.tokens = backlog.now(at, drain) + tokens
            backlog.at = at
        elif drain <= 0:
            backlog.tokens += tokens
        else:
            backlog.tokens += max(0.0, tokens - (backlog.at - at) / drain)
        backlog.total += tokens


def _preferred(ratios: list[float], idle: list[float], fastest: float, preference: float) -> list[float]:
    """``[r * (fastest / idle[i]) ** preference for i, r in enumerate(ratios)]`` (the score times
    the idle-speed factor, :meth:`BacklogTtftScorer._score_base`) as a loop that the mypyc build
    compiles to native code, with ``math.pow`` for a finite positive base: there ``**`` on floats
    boxes both operands and goes through the generic number protocol, ``math.pow`` is a C call on
    doubles. Both are C ``pow`` of the same doubles for a finite positive base and a finite
    exponent (CPython's ``float_pow`` and ``math.pow`` handle only zeros, NaN, infinities and
    negative bases themselves, and both raise ``OverflowError`` on an overflow), so the floats are
    the same; any other base goes through ``**``. For a finite ``preference`` only (the caller's
    check); ``idle`` at least as long as ``ratios``."""
    out: list[float] = []
    for i in range(len(ratios)):
        base = fastest / idle[i]
        if 0.0 < base < math.inf:
            out.append(ratios[i] * math.pow(base, preference))
        else:
            out.append(ratios[i] * base**preference)
    return out


NATIVE_POW = not isinstance(_preferred, types.FunctionType)
"""Whether this module runs compiled (mypyc makes its functions native): then the pick raises
floats to the ``predictionExponent`` and ``speedPreference`` with ``math.pow`` where the base is
finite and positive (:func:`_preferred`); interpreted, ``**`` stays (an operator, cheaper there
than a call)."""


def factory(name: str, params: Mapping[str, Any], path: str) -> BacklogTtftScorer:
    r = ParamReader(params, path=path)
    plugin = BacklogTtftScorer(
        name=name,
        alpha=r.number("alpha", DEFAULT_ALPHA, minimum=0.0, maximum=1.0),
        pool_ratio=r.number("poolRatio", DEFAULT_POOL_RATIO, minimum=1.0),
        speed_ratio=r.number("speedRatio", DEFAULT_SPEED_RATIO, minimum=1.0),
        speed_preference=r.number("speedPreference", DEFAULT_SPEED_PREFERENCE, minimum=0.0),
        max_tracked=r.integer("maxTracked", DEFAULT_MAX_TRACKED, minimum=1),
        probe_share=r.number("probeShare", DEFAULT_PROBE_SHARE, minimum=0.0),
        probe_kv_ratio=r.number("probeKvRatio", DEFAULT_PROBE_KV_RATIO, minimum=1.0),
        adapter_slot_price=r.number("adapterSlotPrice", DEFAULT_ADAPTER_SLOT_PRICE, minimum=0.0),
        one_kind_share=r.number("oneKindShare", DEFAULT_ONE_KIND_SHARE, minimum=0.0, maximum=1.0),
        hardware_label=r.string("hardwareLabel", DEFAULT_HARDWARE_LABEL),
        slope_spread=r.number("slopeSpread", DEFAULT_SLOPE_SPREAD, minimum=0.0),
        own_waiting_share=r.number("ownWaitingShare", DEFAULT_OWN_WAITING_SHARE, minimum=0.0, maximum=1.0),
        pending_floor=r.number("pendingFloor", DEFAULT_PENDING_FLOOR, minimum=0.0, maximum=1.0),
        prediction_exponent=r.number("predictionExponent", DEFAULT_PREDICTION_EXPONENT, minimum=0.0),
    )
    r.finish()
    return plugin
