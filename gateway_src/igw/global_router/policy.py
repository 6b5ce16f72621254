"""The routing policy: for one request, the clusters to try, in order, each with the reason.

Pure: the caller passes the clusters' state, the router's region and a ``random.Random``; nothing
here reads a clock, a socket or a global. The order is:

1. Only available clusters (ramp > 0) whose configuration lists the model and whose latest
   heartbeat (if any) still reports it.
2. **Slow start**: a returning cluster at ramp ``r`` < 1 takes part in a request with probability
   ``r``; otherwise it is held back to the very end (a last resort), so its traffic grows gradually
   even when it is the only cluster of its region.
3. **Saturation**: clusters whose heartbeat reports saturation at or above
   ``routing.saturationThreshold`` (or no fresh endpoint) go after every cluster with headroom, so
   traffic moves away before they start answering 429. The figures are the requested model's own
   pools' when the heartbeat carries them (:func:`model_load`), else the cluster's: a cluster serves
   several models on pods of their own, and one model's pool full (or without a fresh pod) while
   the others idle leaves the cluster-wide figures low. Until session s39 only the cluster's were
   read, so such a cluster kept its full share of that model's requests, each costing a 429 or 503
   round trip before the next cluster was tried.
4. Among clusters with headroom:

   - ``latency-first``: the router's own region first, then the others; within each group a
     weighted random order with weight ``capacityWeight × headroom / (predicted P99 TTFT + 50 ms)``
     (headroom: 1 - the saturation of step 3)
     (load spreads in proportion to capacity and spare room instead of piling onto one cluster);
   - ``cost-first-within-slo``: one weighted order of the clusters with headroom (the weight
     above), the weight of each whose *predicted* P99 TTFT (the heartbeat's recent P99 plus
     ``interRegionPenaltySeconds`` outside the router's region) is under the SLO multiplied by
     ``(cheapest price / price) ** 4`` among them, that of each other one by the smallest of those
     factors (:func:`_cost_first`). Weighting rather than strictly cheapest-first keeps every
     router from piling onto the one cheapest cluster between two heartbeats, and weighting the
     clusters over the SLO rather than putting them last keeps them from piling onto the last
     clusters under it (the discrete-event model showed both ending in 429s).

The weighted random order is Efraimidis-Spirakis sampling (key ``u ** (1 / w)``): the first
element is chosen with probability proportional to its weight, and the rest form the retry order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from igw.gateway.heartbeat_message import Heartbeat
from igw.global_router.config import ClusterSpec, RoutingSpec

COST_EXPONENT: Final = 4
"""How strongly cost-first favours cheaper clusters: a cluster twice the price gets 1/16 of the weight."""
MIN_WEIGHT: Final = 1e-300
"""The least weight a cluster is drawn with: a cost factor of prices many orders of magnitude apart
(``perMillionTokens`` may be any number from 0 to 1e6) underflows to 0, and an order keyed by
``log(u) / weight`` then divided by zero. Until session s42 ``cost-first-within-slo`` with one
cluster at 1e-90 per million tokens and another at 1e6 answered every request for their model 500
(``ZeroDivisionError`` in the plan)."""
TTFT_FLOOR_S: Final = 0.05
"""Added to the predicted TTFT in the weight, so a cluster without TTFT data is not infinitely good."""


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What the policy knows about one cluster at decision time."""

    spec: ClusterSpec
    heartbeat: Heartbeat | None
    ramp: float
    """0 while drained; ``RAMP_FLOOR``..1 during slow start; 1 when fully available."""


@dataclass(frozen=True, slots=True)
class Choice:
    cluster: ClusterSpec
    reason: str
    """same-region, cross-region, cost-within-slo, over-slo, saturated, slow-start."""
    predicted_ttft_s: float


def serves(state: ClusterState, model: str) -> bool:
    if model not in state.spec.models:
        return False
    return state.heartbeat is None or model in state.heartbeat.models


def predicted_ttft(state: ClusterState, *, region: str, routing: RoutingSpec) -> float:
    """Recent P99 TTFT reported by the cluster (0 without data) plus the inter-region penalty."""
    recent = state.heartbeat.ttft_p99_s if state.heartbeat and state.heartbeat.ttft_p99_s else 0.0
    return recent + (0.0 if state.spec.region == region else routing.inter_region_penalty_s)


@dataclass(frozen=True, slots=True)
class Load:
    """The load figures routing reads of one cluster for one model."""

    saturation: float
    """0 (every endpoint has spare capacity) .. 1 (none has)."""
    endpoints_fresh: int


IDLE: Final = Load(saturation=0.0, endpoints_fresh=1)
"""The load of a cluster without a heartbeat (routed on its configuration alone)."""


def model_load(beat: Heartbeat | None, model: str | None) -> Load:
    """``model``'s load at the cluster whose heartbeat is ``beat``: its own pools' figures (the
    saturation of several pools of the model weighted by their endpoints, their fresh endpoints
    summed) when ``beat`` carries a pool of it (a pool of a LoRA adapter: one listing it in its
    ``adapters``), else the cluster's (a heartbeat without ``pools``, or an adapter of a pool from a
    gateway that does not list adapters; ``model`` ``None``: the cluster's). Until session s40 an
    adapter was always routed on the cluster's figures: the pool of its base model full while the
    cluster's other pools idled kept the cluster first for the adapter's requests, each a 429."""
    if beat is None:
        return IDLE
    pools = (
        [pool for pool in beat.pools.values() if pool.model == model or model in pool.adapters]
        if model is not None
        else []
    )
    if not pools:
        return Load(saturation=beat.saturation, endpoints_fresh=beat.endpoints_fresh)
    total = sum(pool.endpoints_total for pool in pools)
    saturation = 1.0 if total == 0 else sum(pool.saturation * pool.endpoints_total for pool in pools) / total
    return Load(saturation=saturation, endpoints_fresh=sum(pool.endpoints_fresh for pool in pools))


def is_saturated(state: ClusterState, routing: RoutingSpec, model: str | None = None) -> bool:
    """Whether the cluster has no room for ``model`` (its pools' figures: :func:`model_load`)."""
    if state.heartbeat is None:
        return False
    load = model_load(state.heartbeat, model)
    return load.saturation >= routing.saturation_threshold or load.endpoints_fresh == 0


def _weight(state: ClusterState, predicted: float, model: str | None) -> float:
    headroom = 1.0 - model_load(state.heartbeat, model).saturation
    return max(1e-9, state.spec.capacity_weight * max(headroom, 0.01) / (predicted + TTFT_FLOOR_S))


def _weighted_order(
    states: Sequence[ClusterState],
    *,
    region: str,
    routing: RoutingSpec,
    rng: random.Random,
    model: str | None,
    factor: Callable[[ClusterState], float] = lambda _state: 1.0,
) -> list[ClusterState]:
    keyed = []
    for state in states:
        predicted = predicted_ttft(state, region=region, routing=routing)
        weight = max(MIN_WEIGHT, _weight(state, predicted, model) * factor(state))
        u = rng.random() or 1e-12
        keyed.append((math.log(u) / weight, state.spec.name, state))
    keyed.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [state for _, _, state in keyed]


def _cost_factor(states: Sequence[ClusterState]) -> Callable[[ClusterState], float]:
    """``(cheapest price / price) ** COST_EXPONENT``; a cluster without a price counts as twice the
    dearest one. Strongly favours cheap clusters without sending *everything* to the cheapest one."""
    prices = [p for s in states if (p := s.spec.cost_per_million_tokens) is not None and p > 0]
    if not prices:
        return lambda _state: 1.0
    floor, unknown = min(prices), 2 * max(prices)

    def factor(state: ClusterState) -> float:
        price = state.spec.cost_per_million_tokens
        if price is None:
            price = unknown
        return 1.0 if price <= 0 else (floor / price) ** COST_EXPONENT

    return factor


def _latency_first(
    states: Sequence[ClusterState],
    *,
    region: str,
    routing: RoutingSpec,
    rng: random.Random,
    model: str | None,
) -> list[tuple[ClusterState, str]]:
    local = [s for s in states if s.spec.region == region]
    remote = [s for s in states if s.spec.region != region]
    return [
        *(
            (s, "same-region")
            for s in _weighted_order(local, region=region, routing=routing, rng=rng, model=model)
        ),
        *(
            (s, "cross-region")
            for s in _weighted_order(remote, region=region, routing=routing, rng=rng, model=model)
        ),
    ]


def _cost_first(
    roomy: Sequence[ClusterState],
    *,
    region: str,
    routing: RoutingSpec,
    rng: random.Random,
    model: str,
) -> list[tuple[ClusterState, str]]:
    """``cost-first-within-slo`` over the clusters with headroom: one weighted order, each cluster
    whose predicted P99 TTFT is under the SLO weighted by its price (:func:`_cost_factor` among
    them), each other one (``over-slo``) by the smallest of those factors: no cost preference, and
    its high TTFT already lowers its weight. Until session s40 the clusters over the SLO went after
    every cluster under it: as load made the cheap clusters' TTFT pass the SLO, each moved its
    traffic onto the fewer clusters left under it, until every router sent everything to the last
    one or two (the discrete-event model at 59 % load: 8151 answers 429 against 12 latency-first,
    P99 latency 1.94 s against 1.60 s, for no saving)."""
    slo = routing.ttft_p99_slo_s
    within = {s.spec.name for s in roomy if predicted_ttft(s, region=region, routing=routing) < slo}
    priced = _cost_factor([s for s in roomy if s.spec.name in within])
    floor = min((priced(s) for s in roomy if s.spec.name in within), default=1.0)

    def factor(state: ClusterState) -> float:
        return priced(state) if state.spec.name in within else floor

    order = _weighted_order(roomy, region=region, routing=routing, rng=rng, model=model, factor=factor)
    return [(s, "cost-within-slo" if s.spec.name in within else "over-slo") for s in order]


def plan(
    model: str,
    clusters: Sequence[ClusterState],
    *,
    region: str,
    routing: RoutingSpec,
    rng: random.Random,
) -> list[Choice]:
    """The clusters to try for ``model``, best first; empty when none can serve it."""
    serving = [c for c in clusters if c.ramp > 0 and serves(c, model)]
    in_play: list[ClusterState] = []
    held_back: list[ClusterState] = []
    for state in serving:
        (in_play if state.ramp >= 1.0 or rng.random() < state.ramp else held_back).append(state)
    roomy = [s for s in in_play if not is_saturated(s, routing, model)]
    full = [s for s in in_play if is_saturated(s, routing, model)]
    ordered: list[tuple[ClusterState, str]]
    if routing.policy == "cost-first-within-slo":
        ordered = _cost_first(roomy, region=region, routing=routing, rng=rng, model=model)
    else:
        ordered = _latency_first(roomy, region=region, routing=routing, rng=rng, model=model)
    full.sort(
        key=lambda s: (
            model_load(s.heartbeat, model).saturation,
            predicted_ttft(s, region=region, routing=routing),
        )
    )
    ordered += [(s, "saturated") for s in full]
    ordered += [(s, "slow-start") for s in held_back]
    return [
        Choice(
            cluster=s.spec, reason=reason, predicted_ttft_s=predicted_ttft(s, region=region, routing=routing)
        )
        for s, reason in ordered
    ]
