"""``lora-affinity-scorer``: prefer endpoints that already run (or can load) the requested adapter.

Formula (GIE): adapter in the running set -> 1.0; else a free LoRA slot
(``len(running) + len(waiting) < max_lora``) -> 0.8; else adapter in the waiting set -> 0.6; else 0.0.
Inputs come from ``vllm:lora_requests_info``. Requests for a base model (no adapter) score 1.0
everywhere: the scorer has no opinion and must not skew the sum. Category: affinity.
Signal: ``lora``; engines without LoRA metrics (SGLang) score ``None``. Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "lora-affinity-scorer"

ACTIVE = 1.0
FREE_SLOT = 0.8
WAITING = 0.6
NONE = 0.0


def adapter_affinity(
    adapter: str, endpoint: EndpointView, *, unreflected: frozenset[str] = frozenset()
) -> float | None:
    """The GIE score of one endpoint for ``adapter`` (``None``: no LoRA metrics); shared with
    ``lora-slot-filter``, which passes as ``unreflected`` the adapters it sent to the endpoint since
    the scrape (counted as waiting: they claim slots the scrape cannot show yet)."""
    m = endpoint.metrics
    if m is None or m.max_lora is None:
        return None
    active = m.active_adapters or frozenset()
    waiting = (m.waiting_adapters or frozenset()) | (unreflected - active)
    if adapter in active:
        return ACTIVE
    if len(active) + len(waiting) < m.max_lora:
        return FREE_SLOT
    if adapter in waiting:
        return WAITING
    return NONE


class LoraAffinityScorer(PluginHooks):
    type_name = TYPE
    signal = "lora"

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        adapter = ctx.request.adapter
        if adapter is None:
            return [1.0] * len(endpoints)
        return [adapter_affinity(adapter, e) for e in endpoints]


def factory(name: str, params: Mapping[str, Any], path: str) -> LoraAffinityScorer:
    ParamReader(params, path=path).finish()
    return LoraAffinityScorer(name=name)
