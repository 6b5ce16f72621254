"""The one registry of benchmark policies: name -> description and builder.

Every policy is built fresh per run from a :class:`PolicyContext` (its own seeded random source), so
runs are independent and reproducible. The gateway entries build the gateway's *real* scheduler
(``igw.scheduling.factory``); nothing here re-implements it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from igw.bench.policies.baselines import LeastRequestPolicy, PowerOfTwoPolicy, RandomPolicy, RoundRobinPolicy
from igw.bench.policies.cache_aware import VLLM_ROUTER_DEFAULTS, CacheAwarePolicy
from igw.bench.policies.kube_service import KubeServicePolicy
from igw.bench.policies.oracle import OraclePolicy
from igw.scheduling.factory import (
    DEFAULT_WEIGHTS,
    IGW_LATENCY_SCORERS,
    default_weights,
    scheduler_from_weights,
)
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import RoutingPolicy


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a builder may depend on: the run's random source and the scenario's traits."""

    rng: random.Random
    lora: bool = False
    """The scenario routes to LoRA adapters (the gateway then enables its LoRA-affinity scorer)."""
    weights: Mapping[str, float] | None = None
    """Explicit gateway weights (``igw bench --weights``); ``None`` = the entry's own."""
    saturation_off: bool = True
    """Disable the gateway's 429 admission so every policy serves every request (see ``_gateway``)."""
    slo: tuple[float, float] | None = None
    """The run's (TTFT, TPOT) SLO in seconds, for policies whose objective is SLO goodput."""


PolicyBuilder = Callable[[PolicyContext], RoutingPolicy]


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    name: str
    description: str
    build: PolicyBuilder
    needs_oracle: bool = False
    """It reads the DES's exact pod state (``bind_oracle``): it runs in the DES alone, as one router."""
    needs_slo: bool = False
    """It needs the run's SLOs (:attr:`PolicyContext.slo`), which only a scenario sets."""


TUNED_WEIGHTS: Final[Mapping[str, float]] = {
    "queue": 2.0,
    "kvCache": 3.0,
    "prefix": 3.0,
    "predictedLatency": 2.0,
    **{key: DEFAULT_WEIGHTS[key] for key in IGW_LATENCY_SCORERS},
}
"""The best weights found by ``igw bench --tune`` (docs/benchmark.md, "Weight search").

Searched after the scheduler gained its dispatch ledger (its own in-flight count since each scrape,
which is what the earlier ``active-request-scorer`` term used to supply against herding) and the
noise-aware predicted-TTFT scorer: at seeds 1-2, half scale, heavier KV-cache and predicted-TTFT terms
(kvCache 3, predictedLatency 2) brought the geometric mean of TTFT p99 / oracle's p99 over the four
tuning scenarios from 1.93 (defaults) to 1.75. The search preceded igw's scorers without a
``weights`` key (``scheduling.factory.IGW_LATENCY_SCORERS``: prefill collision, backlog TTFT, prefill
admission, decode balance, output affinity), which are added here at their default weights, read from
the factory's defaults, as the gateway adds them to any CRD ``weights`` that keep
``predictedLatency`` > 0. Live mode passes these as an EndpointPickerConfig (``configMapRef``)."""


def _gateway(weights_of: Callable[[PolicyContext], Mapping[str, float]]) -> PolicyBuilder:
    def build(ctx: PolicyContext) -> RoutingPolicy:

        routing = RoutingSettings()
        if ctx.saturation_off:
            # Round-robin and the peers never refuse a request; a gateway that answered 429 would
            # "win" on TTFT by serving fewer requests. The benchmark compares routing, so admission
            # control is off here and measured separately (it is a feature, not a routing policy).
            routing = RoutingSettings(queue_depth_threshold=10**9, kv_cache_util_threshold=2.0)
        return scheduler_from_weights(weights_of(ctx), name="gateway", routing=routing, rng=ctx.rng)

    return build


def _default_weights(ctx: PolicyContext) -> Mapping[str, float]:

    return ctx.weights or default_weights(lora_adapters=ctx.lora)


def _tuned_weights(ctx: PolicyContext) -> Mapping[str, float]:
    weights = dict(ctx.weights or TUNED_WEIGHTS)
    if ctx.lora and "loraAffinity" not in weights:
        weights["loraAffinity"] = 1.0
    return weights


def _oracle(ctx: PolicyContext) -> RoutingPolicy:

    return OraclePolicy(rng=ctx.rng)


def _oracle_slo(ctx: PolicyContext) -> RoutingPolicy:
    if ctx.slo is None:
        raise ValueError("oracle-slo needs the run's SLOs (PolicyContext.slo)")
    return OraclePolicy(rng=ctx.rng, slo=ctx.slo)


_ENTRIES: Final[tuple[PolicyEntry, ...]] = (
    PolicyEntry(
        "round-robin",
        "per-request round-robin (kube-proxy IPVS rr, kindest Service model)",
        lambda c: RoundRobinPolicy(),
    ),
    PolicyEntry(
        "kube-service",
        "Kubernetes Service behind a load balancer: random pod per connection, 4 clients x 10 keep-alive",
        lambda c: KubeServicePolicy(rng=c.rng),
    ),
    PolicyEntry("random", "kube-proxy iptables mode: uniform random", lambda c: RandomPolicy(rng=c.rng)),
    PolicyEntry(
        "least-request", "fewest in-flight requests (router-local)", lambda c: LeastRequestPolicy(rng=c.rng)
    ),
    PolicyEntry("power-of-two", "two random choices, fewer in flight", lambda c: PowerOfTwoPolicy(rng=c.rng)),
    PolicyEntry(
        "sglang-cache-aware",
        "sglang-router cache_aware (approximate radix tree, balance thresholds 64/1.5, cache 0.3)",
        lambda c: CacheAwarePolicy(),
    ),
    PolicyEntry(
        "vllm-cache-aware",
        "vllm-router cache_aware (the same algorithm on /render token ids; eviction 120 s, smaller tree)",
        lambda c: CacheAwarePolicy(config=VLLM_ROUTER_DEFAULTS, name="vllm-cache-aware"),
    ),
    PolicyEntry("gateway-default", "igw scheduler, default weights", _gateway(_default_weights)),
    PolicyEntry("gateway-tuned", "igw scheduler, weights found by tuning", _gateway(_tuned_weights)),
    PolicyEntry("oracle", "exact instantaneous pod state: least predicted TTFT", _oracle, needs_oracle=True),
    PolicyEntry(
        "oracle-slo",
        "exact pod state, SLO goodput objective: least predicted TTFT among pods meeting both SLOs",
        _oracle_slo,
        needs_oracle=True,
        needs_slo=True,
    ),
)
POLICIES: Final[dict[str, PolicyEntry]] = {e.name: e for e in _ENTRIES}

DEFAULT_POLICIES: Final[tuple[str, ...]] = tuple(p for p in POLICIES if p != "oracle-slo")
WEIGHTED_POLICIES: Final[frozenset[str]] = frozenset({"gateway-default", "gateway-tuned"})
"""The policies whose scorer weights ``igw bench --weights`` replaces (the others have none)."""
"""Every policy but ``oracle-slo`` (opt in with ``--policies``; it doubles the oracle's cost)."""


def build_policy(name: str, ctx: PolicyContext) -> RoutingPolicy:
    entry = POLICIES.get(name)
    if entry is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return entry.build(ctx)
