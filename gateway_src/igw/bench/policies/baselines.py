"""Load-balancing baselines that see nothing of the GPU: what a Kubernetes Service or Envoy does.

* :class:`RoundRobinPolicy` — the Kubernetes Service baseline AWS compares against (kube-proxy IPVS
  ``rr``); it is the denominator of every "% lower than round-robin" number.
* :class:`RandomPolicy` — kube-proxy iptables mode (uniformly random endpoint).
* :class:`LeastRequestPolicy` — fewest requests in flight from this router (full scan).
* :class:`PowerOfTwoPolicy` — two random candidates, the one with fewer in flight (Envoy's
  ``LEAST_REQUEST`` default, sglang-router's ``power_of_two``).

The random source is injected so that ties and samples are reproducible per seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from igw.bench.policies.decisions import no_endpoints, picked
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome, RoutingDecision, RoutingRequest


class _StatelessHooks:
    """No-op completion hooks: these baselines learn nothing from outcomes."""

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        del outcome, now

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        del keys


class _SeededPolicy(_StatelessHooks):
    """A baseline that draws from the injected random source (for picks and tie-breaks)."""

    def __init__(self, *, rng: random.Random) -> None:
        self._rng = rng


class RoundRobinPolicy(_StatelessHooks):
    """Cycle through the endpoints in key order, ignoring all load signals.

    Endpoints are ordered by key so that the cycle does not depend on the caller's list order;
    when the set changes the cursor keeps counting, as kube-proxy's IPVS scheduler does.
    """

    name = "round-robin"

    def __init__(self) -> None:
        self._cursor = 0

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        del request, now
        if not endpoints:
            return no_endpoints()
        ordered = sorted(endpoints, key=lambda e: e.key)
        chosen = ordered[self._cursor % len(ordered)]
        self._cursor += 1
        return picked(chosen.key, endpoints, reason="round-robin")


class RandomPolicy(_SeededPolicy):
    """Uniformly random endpoint (kube-proxy iptables mode)."""

    name = "random"

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        del request, now
        if not endpoints:
            return no_endpoints()
        ordered = sorted(endpoints, key=lambda e: e.key)
        return picked(self._rng.choice(ordered).key, endpoints, reason="random")


def _least_inflight(candidates: Sequence[EndpointView], rng: random.Random) -> EndpointView:
    """The candidate with the fewest router-counted requests in flight; ties broken at random."""
    lowest = min(e.inflight for e in candidates)
    tied = sorted((e for e in candidates if e.inflight == lowest), key=lambda e: e.key)
    return tied[0] if len(tied) == 1 else rng.choice(tied)


class LeastRequestPolicy(_SeededPolicy):
    """Fewest requests in flight from this router, over all endpoints."""

    name = "least-request"

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        del request, now
        if not endpoints:
            return no_endpoints()
        return picked(_least_inflight(endpoints, self._rng).key, endpoints, reason="least-request")


class PowerOfTwoPolicy(_SeededPolicy):
    """Sample two distinct endpoints at random and keep the one with fewer requests in flight."""

    name = "power-of-two"

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        del request, now
        if not endpoints:
            return no_endpoints()
        ordered = sorted(endpoints, key=lambda e: e.key)
        pair = ordered if len(ordered) <= 2 else self._rng.sample(ordered, 2)
        return picked(_least_inflight(pair, self._rng).key, endpoints, reason="power-of-two")
