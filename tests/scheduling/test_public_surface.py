"""``igw.scheduling`` exports exactly the plugin contract; a change to it is a deliberate API change."""

from __future__ import annotations

import igw.scheduling

PINNED = {
    "REGISTRY",
    "CycleContext",
    "DecisionKind",
    "EndpointKey",
    "EndpointView",
    "EngineMetrics",
    "Filter",
    "ParamReader",
    "Picker",
    "Plugin",
    "PluginFactory",
    "PluginHooks",
    "PluginRegistry",
    "RequestOutcome",
    "RoutingDecision",
    "RoutingPolicy",
    "RoutingRequest",
    "SchedulerConfigError",
    "SaturationDetector",
    "SharesPicks",
    "BoundedIndex",
    "Scorer",
    "clamp01",
    "consumes",
    "min_max_inverse",
    "order_by_data_flow",
    "plugin_types",
    "produces",
}


def test_exported_names_are_pinned() -> None:
    assert set(igw.scheduling.__all__) == PINNED
    assert len(igw.scheduling.__all__) == len(PINNED)


def test_every_exported_name_resolves() -> None:
    missing = [name for name in igw.scheduling.__all__ if not hasattr(igw.scheduling, name)]
    assert missing == []


def test_star_import_gives_exactly_the_exported_names() -> None:
    namespace: dict[str, object] = {}
    exec("from igw.scheduling import *", namespace)  # the behaviour under test
    assert set(namespace) - {"__builtins__"} == PINNED


def test_builtin_plugins_are_reachable_through_the_exported_registry() -> None:
    types = igw.scheduling.plugin_types()
    assert "prefix-cache-scorer" in types
    assert types == igw.scheduling.REGISTRY.types()
    plugin = igw.scheduling.REGISTRY.create("no-hit-lru-scorer", path="plugins[0]")
    assert isinstance(plugin, igw.scheduling.Scorer)
    assert igw.scheduling.consumes(plugin) == {"prefix.any_hit"}
