"""The explicit list of built-in scheduling plugins (the only place plugin types are registered)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins import (
    endpoint_speed_scorer,
    inflight_scorer,
    kv_cache_scorer,
    label_selector_filter,
    lora_affinity_scorer,
    lora_slot_filter,
    max_score_picker,
    no_hit_lru_scorer,
    predicted_ttft_scorer,
    prefill_collision_scorer,
    prefix_cache_scorer,
    queue_scorer,
    random_picker,
    running_requests_scorer,
    token_load_scorer,
    utilization_detector,
    weighted_random_picker,
)
from igw.scheduling.registry import PluginRegistry

SINGLE_PROFILE_HANDLER = "single-profile-handler"
INFLIGHT_LOAD_PRODUCER = "inflight-load-producer"


class SingleProfileHandler(PluginHooks):
    """Accepted so EndpointPickerConfig files written for GIE load unchanged: igw runs exactly one
    profile, which is what this handler means there. It takes no part in a pick."""

    type_name = SINGLE_PROFILE_HANDLER

    def __init__(self, *, name: str) -> None:
        self.name = name


def _single_profile_handler(name: str, params: Mapping[str, Any], path: str) -> SingleProfileHandler:
    ParamReader(params, path=path).finish()
    return SingleProfileHandler(name=name)


class InflightLoadProducer(PluginHooks):
    """Accepted so GIE v1.5 files using ``token-load-scorer`` load unchanged: there this producer
    counts each endpoint's in-flight tokens; igw always keeps that count (``EndpointView.inflight_tokens``),
    so the plugin takes no part in a pick."""

    type_name = INFLIGHT_LOAD_PRODUCER

    def __init__(self, *, name: str) -> None:
        self.name = name


def _inflight_load_producer(name: str, params: Mapping[str, Any], path: str) -> InflightLoadProducer:
    ParamReader(params, path=path).finish()
    return InflightLoadProducer(name=name)


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
    registry.register(label_selector_filter.TYPE, label_selector_filter.factory)
    registry.register(lora_slot_filter.TYPE, lora_slot_filter.factory)
    registry.register(max_score_picker.TYPE, max_score_picker.factory)
    registry.register(weighted_random_picker.TYPE, weighted_random_picker.factory)
    registry.register(random_picker.TYPE, random_picker.factory)
    registry.register(token_load_scorer.TYPE, token_load_scorer.factory)
    registry.register(utilization_detector.TYPE, utilization_detector.factory)
    registry.register(SINGLE_PROFILE_HANDLER, _single_profile_handler)
    registry.register(INFLIGHT_LOAD_PRODUCER, _inflight_load_producer)
    return registry


REGISTRY = build_registry()


def plugin_types() -> Sequence[str]:
    return REGISTRY.types()
