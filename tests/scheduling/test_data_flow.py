"""Plugins that share per-pick state run in data-flow order, or the configuration is rejected by path."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from igw.scheduling.builtin import build_registry
from igw.scheduling.data_flow import Placed, order_by_data_flow
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.factory import profile_from_weights, scheduler_from_picker_config
from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.picker_config import profile_from_picker_config
from igw.scheduling.plugins import no_hit_lru_scorer, prefix_cache_scorer
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.plugins.no_hit_lru_scorer import NoHitLruScorer
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from igw.scheduling.registry import PluginRegistry
from igw.scheduling.scheduler import Profile, WeightedScorer
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.types import DecisionKind, EndpointView
from tests.scheduling.helpers import ep, req

WARM_PROMPT = "You are a helpful assistant. " * 20

LRU_BEFORE_PREFIX: dict[str, Any] = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [{"type": "no-hit-lru-scorer"}, {"type": "prefix-cache-scorer"}],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "no-hit-lru-scorer", "weight": 3},
                {"pluginRef": "prefix-cache-scorer", "weight": 1},
            ],
        }
    ],
}


def test_lru_listed_before_prefix_still_sees_the_warm_request_and_keeps_it_on_its_warm_pod() -> None:
    scheduler = scheduler_from_picker_config(
        LRU_BEFORE_PREFIX, routing=RoutingSettings(), rng=random.Random(3)
    )
    assert [ws.scorer.type_name for ws in scheduler.profile.scorers] == [
        prefix_cache_scorer.TYPE,
        no_hit_lru_scorer.TYPE,
    ]
    pods = [ep("a:8000"), ep("b:8000")]
    first = scheduler.pick(req(WARM_PROMPT, request_id="cold"), pods, now=0.0)
    assert first.kind is DecisionKind.PICKED
    warm_pod = first.endpoint
    assert warm_pod is not None
    second = scheduler.pick(req(WARM_PROMPT, request_id="warm"), pods, now=0.0)
    # Read in the configured order, the LRU scorer would see no hit flag, score the warm pod (its most
    # recent cold pick) 0 and the other 1.0 x 3, and move the request off its cache.
    assert second.endpoint == warm_pod
    assert second.scores[warm_pod][no_hit_lru_scorer.TYPE] == pytest.approx(no_hit_lru_scorer.WARM_SCORE * 3)
    assert second.scores[warm_pod][prefix_cache_scorer.TYPE] == pytest.approx(1.0)


def test_weights_with_lru_and_prefix_put_the_prefix_scorer_first() -> None:
    profile = profile_from_weights({"lru": 5, "prefix": 1, "queue": 1})
    types = [ws.scorer.type_name for ws in profile.scorers]
    assert types.index(prefix_cache_scorer.TYPE) < types.index(no_hit_lru_scorer.TYPE)


class _StateFilter(PluginHooks):
    """A throwaway filter that reads the prefix scorer's hit flag (which only a scorer writes)."""

    type_name = "state-reading-filter"
    consumes = frozenset({prefix_cache_scorer.STATE_ANY_HIT})

    def __init__(self, name: str) -> None:
        self.name = name

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        return list(endpoints)


class _Writer(PluginHooks):
    """A throwaway scorer with configurable declarations, to build cycles."""

    type_name = "declaring-scorer"
    signal = ""

    def __init__(self, name: str, *, reads: str, writes: str) -> None:
        self.name = name
        self.consumes = frozenset({reads})
        self.produces = frozenset({writes})

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        return [0.5] * len(endpoints)


def _registry() -> PluginRegistry:
    registry = build_registry()
    registry.register(_StateFilter.type_name, lambda name, params, path: _StateFilter(name))

    def writer(name: str, params: Mapping[str, Any], path: str) -> _Writer:
        return _Writer(name, reads=str(params["reads"]), writes=str(params["writes"]))

    registry.register(_Writer.type_name, writer)
    return registry


def test_a_filter_reading_what_only_a_scorer_writes_is_rejected_naming_both_paths() -> None:
    doc = {
        "plugins": [{"type": "prefix-cache-scorer"}, {"type": "state-reading-filter"}],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [{"pluginRef": "prefix-cache-scorer"}, {"pluginRef": "state-reading-filter"}],
            }
        ],
    }
    with pytest.raises(SchedulerConfigError) as err:
        profile_from_picker_config(doc, settings=RoutingSettings(), registry=_registry())
    [problem] = err.value.problems
    assert problem.startswith("schedulingProfiles[0].plugins[1]: 'state-reading-filter'")
    assert "'prefix.any_hit'" in problem
    assert "'prefix-cache-scorer' (schedulingProfiles[0].plugins[0])" in problem
    assert "a filter runs before every scorer and picker" in problem


def test_scorers_reading_each_other_in_a_cycle_are_rejected_naming_the_paths() -> None:
    doc = {
        "plugins": [
            {"name": "x", "type": "declaring-scorer", "parameters": {"reads": "k1", "writes": "k2"}},
            {"name": "y", "type": "declaring-scorer", "parameters": {"reads": "k2", "writes": "k1"}},
        ],
    }
    with pytest.raises(SchedulerConfigError) as err:
        profile_from_picker_config(doc, settings=RoutingSettings(), registry=_registry())
    [problem] = err.value.problems
    assert "cycle" in problem
    assert "'x' (plugins[x])" in problem
    assert "'y' (plugins[y])" in problem


def test_a_chain_of_readers_is_sorted_after_its_writers_and_the_rest_keep_their_order() -> None:
    c = _Writer("c", reads="k2", writes="k3")
    b = _Writer("b", reads="k1", writes="k2")
    free = _Writer("free", reads="unwritten", writes="other")
    a = _Writer("a", reads="nothing", writes="k1")
    items = [Placed(p, p, f"plugins[{p.name}]") for p in (c, free, b, a)]
    _, ordered = order_by_data_flow([], items, None)
    assert [p.name for p in ordered] == ["free", "a", "b", "c"]


def test_a_plugin_that_declares_nothing_is_accepted_as_is() -> None:
    class Bare:
        name = "bare"

    bare = Bare()
    no_scorers: list[Placed[object]] = []
    filters, scorers = order_by_data_flow([Placed(bare, bare, "plugins[0]")], no_scorers, None)
    assert filters == [bare]
    assert not scorers


def test_profiles_already_in_data_flow_order_keep_their_order() -> None:
    profile = profile_from_weights(
        {"queue": 2, "kvCache": 2, "prefix": 3, "lru": 1, "loraAffinity": 1, "predictedLatency": 1}
    )
    assert [ws.scorer.type_name for ws in profile.scorers] == [
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
        "no-hit-lru-scorer",
        "lora-affinity-scorer",
        "predicted-ttft-scorer",
    ]


def test_a_hand_built_profile_with_the_reader_first_is_rejected() -> None:
    lru = NoHitLruScorer()
    prefix = PrefixCacheScorer()
    with pytest.raises(
        SchedulerConfigError, match=r"profile\.scorers: .*order is: prefix-cache-scorer, no-hit-lru"
    ):
        Profile(
            filters=(),
            scorers=(WeightedScorer(lru, 1.0), WeightedScorer(prefix, 1.0)),
            picker=MaxScorePicker(),
        )
    ok = Profile(
        filters=(), scorers=(WeightedScorer(prefix, 1.0), WeightedScorer(lru, 1.0)), picker=MaxScorePicker()
    )
    assert [id(ws.scorer) for ws in ok.scorers] == [id(prefix), id(lru)]
