"""The explicit list of built-in scheduling plugins (the only place plugin types are registered)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from igw.scheduling import gie_sections
from igw.scheduling.framework import PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins import (
    backlog_ttft_scorer,
    context_length_filter,
    decode_balance_scorer,
    endpoint_speed_scorer,
    inflight_scorer,
    kv_cache_scorer,
    label_selector_filter,
    lora_affinity_scorer,
    lora_slot_filter,
    max_score_picker,
    no_hit_lru_scorer,
    output_affinity_scorer,
    predicted_ttft_scorer,
    prefill_admission_scorer,
    prefill_collision_scorer,
    prefix_cache_scorer,
    queue_scorer,
    random_picker,
    running_requests_scorer,
    token_load_scorer,
    utilization_detector,
    weighted_random_picker,
)
from igw.scheduling.registry import PluginFactory, PluginRegistry

SINGLE_PROFILE_HANDLER = "single-profile-handler"
INFLIGHT_LOAD_PRODUCER = "inflight-load-producer"

ACCEPTED_ONLY: Final[Mapping[str, str]] = {
    SINGLE_PROFILE_HANDLER: "igw runs exactly one profile, which is what this handler means in GIE",
    INFLIGHT_LOAD_PRODUCER: "GIE's producer of per-endpoint in-flight tokens for token-load-scorer; igw "
    "always keeps that count (EndpointView.inflight_tokens)",
}
"""Plugin types accepted so that EndpointPickerConfig files written for GIE load unchanged, although
they take no part in a pick here (type -> why)."""


class AcceptedPlugin(PluginHooks):
    """A plugin of an :data:`ACCEPTED_ONLY` type: takes no parameters and no part in a pick."""

    def __init__(self, *, name: str, type_name: str) -> None:
        self.name = name
        self.type_name = type_name


def _accepted(type_name: str) -> PluginFactory:
    def factory(name: str, params: Mapping[str, Any], path: str) -> AcceptedPlugin:
        ParamReader(params, path=path).finish()
        return AcceptedPlugin(name=name, type_name=type_name)

    return factory


def build_registry() -> PluginRegistry:
    registry = PluginRegistry()
    registry.register(queue_scorer.TYPE, queue_scorer.factory)
    registry.register(kv_cache_scorer.TYPE, kv_cache_scorer.factory)
    registry.register(prefix_cache_scorer.TYPE, prefix_cache_scorer.factory)
    registry.register(lora_affinity_scorer.TYPE, lora_affinity_scorer.factory)
    registry.register(running_requests_scorer.TYPE, running_requests_scorer.factory)
    registry.register(inflight_scorer.TYPE, inflight_scorer.factory)
    registry.register(no_hit_lru_scorer.TYPE, no_hit_lru_scorer.factory)
    registry.register(endpoint_speed_scorer.TYPE, endpoint_speed_scorer.factory)
    registry.register(predicted_ttft_scorer.TYPE, predicted_ttft_scorer.factory)
    registry.register(prefill_collision_scorer.TYPE, prefill_collision_scorer.factory)
    registry.register(backlog_ttft_scorer.TYPE, backlog_ttft_scorer.factory)
    registry.register(prefill_admission_scorer.TYPE, prefill_admission_scorer.factory)
    registry.register(decode_balance_scorer.TYPE, decode_balance_scorer.factory)
    registry.register(output_affinity_scorer.TYPE, output_affinity_scorer.factory)
    registry.register(label_selector_filter.TYPE, label_selector_filter.factory)
    registry.register(lora_slot_filter.TYPE, lora_slot_filter.factory)
    registry.register(context_length_filter.TYPE, context_length_filter.factory)
    registry.register(max_score_picker.TYPE, max_score_picker.factory)
    registry.register(weighted_random_picker.TYPE, weighted_random_picker.factory)
    registry.register(random_picker.TYPE, random_picker.factory)
    registry.register(token_load_scorer.TYPE, token_load_scorer.factory)
    registry.register(utilization_detector.TYPE, utilization_detector.factory)
    for type_name in ACCEPTED_ONLY:
        registry.register(type_name, _accepted(type_name))
    for type_name, factory in gie_sections.factories().items():
        registry.register(type_name, factory)
    return registry


REGISTRY = build_registry()


def plugin_types() -> Sequence[str]:
    return REGISTRY.types()
