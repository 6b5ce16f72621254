"""Builders for scheduling tests: endpoint views, requests and a cycle context."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from igw.scheduling.framework import CycleContext
from igw.scheduling.scheduler import PENDING_SCORES, Scheduler
from igw.scheduling.types import (
    EndpointKey,
    EndpointView,
    EngineMetrics,
    RequestOutcome,
    RoutingDecision,
    RoutingPolicy,
    RoutingRequest,
)
from igw.sim.des import simulate
from igw.sim.spec import PodSpec
from igw.sim.workloads import poisson_arrivals, shared_prefix


def ep(
    key: str,
    *,
    waiting: int | None = 0,
    running: int | None = 0,
    kv: float | None = 0.0,
    active: frozenset[str] | None = None,
    waiting_adapters: frozenset[str] | None = None,
    max_lora: int | None = None,
    block_size: int | None = None,
    num_gpu_blocks: int | None = None,
    scraped_at: float | None = 0.0,
    failing: bool = False,
    inflight: int = 0,
    labels: dict[str, str] | None = None,
    no_metrics: bool = False,
) -> EndpointView:
    metrics = (
        None
        if no_metrics
        else EngineMetrics(
            waiting=waiting,
            running=running,
            kv_usage=kv,
            active_adapters=active,
            waiting_adapters=waiting_adapters,
            max_lora=max_lora,
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
        )
    )
    return EndpointView(
        key=key,
        metrics=metrics,
        scraped_at=None if no_metrics else scraped_at,
        scrape_failing=failing,
        inflight=inflight,
        labels=labels or {},
    )


def req(
    text: str = "",
    *,
    model: str = "base",
    adapter: str | None = None,
    request_id: str = "r1",
    cache_salt: str | None = None,
) -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id,
        model=adapter or model,
        base_model=model,
        prefix_text=text,
        prompt_tokens=len(text) // 4,
        adapter=adapter,
        cache_salt=cache_salt,
    )


def ctx(request: RoutingRequest | None = None, *, now: float = 0.0, seed: int = 7) -> CycleContext:
    return CycleContext(request=request or req(), now=now, rng=random.Random(seed))


class BareHooks:
    """The lifecycle hooks a plugin written to the bare ``Plugin`` protocol defines, as no-ops; not
    :class:`~igw.scheduling.framework.PluginHooks`, so the scheduler treats the plugin as a third
    party's (it calls every hook)."""

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        pass

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        pass

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        pass


@dataclass
class Recording:
    """A routing policy that records every decision of the scheduler it wraps; with
    ``settle_later``, every pick leaves its bookkeeping to the scheduler's next call
    (``Scheduler.pick``), and ``left_unsettled`` counts the picks that found it still due. With
    ``forced`` too, a forced choice's decision is recorded as it settles (``on_decided``), in its
    pick's place; ``forced_picks`` counts them (the decisions are complete once the scheduler
    settled its last pick)."""

    scheduler: Scheduler
    settle_later: bool = False
    forced: bool = False
    decisions: list[RoutingDecision] = field(default_factory=list)
    left_unsettled: int = 0
    forced_picks: int = 0
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.scheduler.name

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        if self.scheduler._unsettled is not None or self.scheduler._forced is not None:
            self.left_unsettled += 1
        decision = self.scheduler.pick(
            request,
            endpoints,
            now=now,
            settle_later=self.settle_later,
            on_decided=self._decided(len(self.decisions)) if self.forced else None,
        )
        self.decisions.append(decision)
        return decision

    def _decided(self, position: int) -> Callable[[RoutingDecision], None]:
        def decided(decision: RoutingDecision) -> None:
            returned = self.decisions[position]
            assert returned.scores is PENDING_SCORES  # only a forced choice settles this way
            assert (returned.kind, returned.endpoint, returned.fallbacks, returned.removed) == (
                decision.kind,
                decision.endpoint,
                decision.fallbacks,
                decision.removed,
            )  # what the pick returned at once is what its scoring chose
            self.decisions[position] = decision
            self.forced_picks += 1

        return decided

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        self.scheduler.on_complete(outcome, now=now)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        self.scheduler.on_endpoints_removed(keys)


def run_loaded_mixed_fleet(
    policy: RoutingPolicy, seed: int, *, pods: Sequence[PodSpec] | None = None
) -> None:
    """480 shared-prefix requests at 60/s through ``policy`` on a simulated fleet of three H100 and
    three A100 pods (the DES): queues, prefix reuse, settled TTFT means, dispatches between scrapes.

    H100s and A100s: different speeds (the TTFT pooling has groups to settle) with alike KV caches,
    so the backlog scorer, which steers away from small-KV pods such as A10Gs, leaves every pod
    some of the load and all the scorers' fast paths are exercised. ``pods``: another fleet for the
    same requests."""
    rng = random.Random(seed)
    pods = pods or [
        *(PodSpec(preset="llama-3.1-8b/h100", name=f"h100-{i}") for i in range(3)),
        *(PodSpec(preset="llama-3.1-8b/a100", name=f"a100-{i}") for i in range(3)),
    ]
    requests = shared_prefix(
        groups=12,
        prompts_per_group=40,
        system_prompt_len=600,
        question_len=60,
        output_len=80,
        arrivals=poisson_arrivals(rate=60.0, rng=rng),
        model="m",
        rng=rng,
    )
    simulate(pods=pods, requests=requests, policy=policy, seed=seed)
