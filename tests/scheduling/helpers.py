"""Builders for scheduling tests: endpoint views, requests and a cycle context."""

from __future__ import annotations

import random
from collections.abc import Sequence

from igw.scheduling.framework import CycleContext
from igw.scheduling.types import EndpointKey, EndpointView, EngineMetrics, RequestOutcome, RoutingRequest


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
    text: str = "", *, model: str = "base", adapter: str | None = None, request_id: str = "r1"
) -> RoutingRequest:
    return RoutingRequest(
        request_id=request_id,
        model=adapter or model,
        base_model=model,
        prefix_text=text,
        prompt_tokens=len(text) // 4,
        adapter=adapter,
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
