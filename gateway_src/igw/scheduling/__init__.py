"""The scheduling framework's public surface: the plugin contract and what plugins work with.

A plugin is a filter, a scorer or a picker (:class:`Filter`, :class:`Scorer`, :class:`Picker`) with
the lifecycle hooks of :class:`Plugin` (derive from :class:`PluginHooks` for no-op defaults). It
declares the per-pick state keys it reads and writes (``consumes`` / ``produces``), sees one
:class:`CycleContext` per pick and :class:`EndpointView` candidates, and is made by a
:data:`PluginFactory` registered by ``type`` name in the one :class:`PluginRegistry`
(:data:`REGISTRY`; the built-in list is :mod:`igw.scheduling.builtin`). Parameters are read with
:class:`ParamReader`; configuration problems are raised as :class:`SchedulerConfigError` with paths.
Anything not listed in ``__all__`` is internal and may change.
"""

from __future__ import annotations

from igw.scheduling.builtin import REGISTRY, plugin_types
from igw.scheduling.data_flow import consumes, order_by_data_flow, produces
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.framework import (
    BoundedIndex,
    CycleContext,
    Filter,
    Picker,
    Plugin,
    PluginHooks,
    SaturationDetector,
    Scorer,
    SharesPicks,
    clamp01,
    min_max_inverse,
)
from igw.scheduling.params import ParamReader
from igw.scheduling.registry import PluginFactory, PluginRegistry
from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    EndpointView,
    EngineMetrics,
    RequestOutcome,
    RoutingDecision,
    RoutingPolicy,
    RoutingRequest,
)

__all__ = [
    "REGISTRY",
    "BoundedIndex",
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
    "SaturationDetector",
    "SchedulerConfigError",
    "Scorer",
    "SharesPicks",
    "clamp01",
    "consumes",
    "min_max_inverse",
    "order_by_data_flow",
    "plugin_types",
    "produces",
]
