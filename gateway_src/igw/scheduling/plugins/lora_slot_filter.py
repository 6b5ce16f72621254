"""``lora-slot-filter``: send an adapter request only where it can start without waiting for a slot.

Why: the GIE ``lora-affinity-scorer`` gives a pod whose LoRA slots are all busy with *other*
adapters 0.0 against 0.8 for a free slot, but with weight 1 next to queue 2 / kvCache 2 /
predictedLatency 1 a slightly less loaded pod still wins, and the request then waits there until one
of the other adapters fully drains, which with popular adapters may take tens of seconds
(``igw bench lora-multi-adapter``: TTFT p95 ~60 s). Such a pod is nearly unschedulable for the
request, so this is a filter, not a score.

Rule, per request with adapter ``a`` (tiers by the GIE scorer's categories): keep the endpoints
where ``a`` is running or a slot is free; if none, those where ``a`` is already waiting (it will be
loaded together); if none, every endpoint (nothing better exists; the scorers decide). Endpoints
without LoRA metrics are kept in the first tier (unknown is not penalised). Base-model requests pass
unfiltered. Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.lora_affinity_scorer import FREE_SLOT, WAITING, adapter_affinity
from igw.scheduling.types import EndpointView

TYPE = "lora-slot-filter"


class LoraSlotFilter(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        adapter = ctx.request.adapter
        if adapter is None:
            return list(endpoints)
        scores = [adapter_affinity(adapter, e) for e in endpoints]
        for floor in (FREE_SLOT, WAITING):
            kept = [e for e, s in zip(endpoints, scores, strict=True) if s is None or s >= floor]
            if kept:
                return kept
        return list(endpoints)


def factory(name: str, params: Mapping[str, Any], path: str) -> LoraSlotFilter:
    ParamReader(params, path=path).finish()
    return LoraSlotFilter(name=name)
