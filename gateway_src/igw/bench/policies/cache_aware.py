"""sglang-router's ``cache_aware`` policy (also vllm-router's), as published in their source.

Algorithm (sglang-router's ``src/policies/cache_aware.rs``):

1. Loads are the router's own in-flight counts. The fleet is *imbalanced* iff
   ``max - min > balance_abs_threshold`` **and** ``max > balance_rel_threshold * min``; then the
   least-loaded worker wins (the text is still inserted into the tree under it).
2. Otherwise the longest prefix match in the per-model approximate radix tree decides: if
   ``matched_chars / input_chars > cache_threshold`` the matched worker wins, else the least-loaded
   one (ties to the lowest index, which is why cache misses all land on the first worker at low
   load — a behaviour of the peer we reproduce, not a bug of ours).
3. Every ``eviction_interval_s`` each worker's share of the tree is cut back to ``max_tree_size``
   characters by LRU leaf eviction (done lazily on the next pick, in the caller's time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from igw.bench.policies.decisions import no_endpoints, picked
from igw.bench.policies.radix_tree import ApproximateRadixTree
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome, RoutingDecision, RoutingRequest


@dataclass(frozen=True, slots=True)
class CacheAwareConfig:
    """sglang-router 0.3.2 defaults (``smg launch --help``); :data:`VLLM_ROUTER_DEFAULTS` for vllm-router."""

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 60.0
    max_tree_size: int = 67_108_864

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0:
            raise ValueError(f"balance_abs_threshold must be >= 0, got {self.balance_abs_threshold}")
        if self.balance_rel_threshold < 1.0:
            raise ValueError(f"balance_rel_threshold must be >= 1, got {self.balance_rel_threshold}")
        if self.eviction_interval_s <= 0 or self.max_tree_size <= 0:
            raise ValueError("eviction_interval_s and max_tree_size must be > 0")


VLLM_ROUTER_DEFAULTS = CacheAwareConfig(eviction_interval_s=120.0, max_tree_size=33_554_432)
"""vllm-router 0.1.17's ``cache_aware`` defaults (its command-line help). It matches on the token ids
that ``/v1/completions/render`` returns; the simulator's ids are one per 4 characters of text, so the
character tree here gives the same match rates."""


class CacheAwarePolicy:
    """sglang-router ``cache_aware`` over router-local in-flight counts and a character tree."""

    def __init__(self, *, config: CacheAwareConfig | None = None, name: str = "sglang-cache-aware") -> None:
        self.name = name
        self.config = config or CacheAwareConfig()
        self._trees: dict[str, ApproximateRadixTree] = {}
        self._last_eviction: float | None = None

    def tree(self, model: str) -> ApproximateRadixTree:
        """The tree for one model (created on first use), exposed for inspection in tests."""
        return self._trees.setdefault(model, ApproximateRadixTree())

    def _maybe_evict(self, now: float) -> None:
        if self._last_eviction is None:
            self._last_eviction = now
        elif now - self._last_eviction >= self.config.eviction_interval_s:
            for tree in self._trees.values():
                tree.evict_tenants_by_size(self.config.max_tree_size)
            self._last_eviction = now

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        if not endpoints:
            return no_endpoints()
        self._maybe_evict(now)
        ordered = sorted(endpoints, key=lambda e: e.key)
        loads = [e.inflight for e in ordered]
        least_loaded = ordered[loads.index(min(loads))].key
        tree = self.tree(request.base_model)
        cfg = self.config
        text = request.prefix_text
        if max(loads) - min(loads) > cfg.balance_abs_threshold and max(loads) > (
            cfg.balance_rel_threshold * min(loads)
        ):
            chosen, reason = least_loaded, "imbalanced: least-loaded"
        else:
            match = tree.prefix_match(text, allowed={e.key for e in ordered}, now=now)
            rate = match.matched_chars / len(text) if text else 0.0
            if match.tenant is not None and rate > cfg.cache_threshold:
                chosen, reason = match.tenant, f"prefix match {rate:.2f}"
            else:
                chosen, reason = least_loaded, f"cache miss {rate:.2f}: least-loaded"
        tree.insert(text, chosen, now=now)
        return picked(chosen, endpoints, reason=reason)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        del outcome, now

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        """A no-op, as in smg: removed workers are excluded at match time and age out of the tree."""
        del keys
