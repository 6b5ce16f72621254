"""Build a :class:`~igw.scheduling.scheduler.Profile` from an ``EndpointPickerConfig`` document.

This is the ``configMapRef`` path of a scheduler: the referenced ConfigMap key holds a GIE/llm-d
plugins file, which must load here unchanged::

    apiVersion: inference.networking.x-k8s.io/v1alpha1
    kind: EndpointPickerConfig
    plugins:
    - type: queue-scorer
    - type: prefix-cache-scorer
      parameters: {blockSize: 64}
    schedulingProfiles:
    - name: default
      plugins: [{pluginRef: queue-scorer, weight: 2}, {pluginRef: prefix-cache-scorer, weight: 3}]
    saturationDetector: {queueDepthThreshold: 5, kvCacheUtilThreshold: 0.8, metricsStalenessThreshold: 200ms}

Rules (GIE's loader): a plugin's name defaults to its type and must be unique; an omitted scorer
weight is 1; no profiles -> a ``default`` profile referencing every plugin; no picker ->
``max-score-picker``. igw runs one profile, so more than one is an error. Every problem is reported
with its path, all at once.

Plugin *parameters* follow the reference: an invalid value falls back to the plugin's default and an
unknown parameter is ignored, each with a warning naming its path (logged on ``igw.scheduling`` and
returned by :func:`load_picker_config`), so a file written for GIE loads unchanged. ``strict=True``
turns those warnings into errors (``igw validate``-style checking of a file before it ships).
The v1.5 form ``saturationDetector: {pluginRef: NAME}`` makes a declared ``utilization-detector`` the
scheduler's admission rule. GIE's data-layer, parser, flow-control and feature-gate sections are
judged in :mod:`igw.scheduling.gie_sections` (accepted, accepted with a warning, or refused).
Plugins that share per-pick state run in data-flow order whatever their
order in the file (:mod:`igw.scheduling.data_flow`): ``no-hit-lru-scorer`` after ``prefix-cache-scorer``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Set
from typing import Any, Final

from igw.config.durations import parse_duration
from igw.scheduling import gie_sections
from igw.scheduling.builtin import REGISTRY
from igw.scheduling.data_flow import Placed, order_by_data_flow
from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.framework import Filter, Picker, Plugin, SaturationDetector, Scorer
from igw.scheduling.params import lenient_parameters
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.registry import PluginRegistry
from igw.scheduling.scheduler import Profile, WeightedScorer
from igw.scheduling.settings import RoutingSettings

API_VERSIONS: Final = frozenset({"inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1"})
KIND: Final = "EndpointPickerConfig"
_TOP_LEVEL: Final = frozenset(
    {"apiVersion", "kind", "plugins", "schedulingProfiles", "saturationDetector", *gie_sections.TOP_LEVEL}
)
DEFAULT_SCORER_WEIGHT: Final = 1.0
_log = logging.getLogger("igw.scheduling")


def _instantiate(
    doc: Mapping[str, Any], registry: PluginRegistry, problems: list[str], refused: set[str]
) -> dict[str, Plugin]:
    """The declared plugins by name; ``refused`` gets the names declared but not built (their
    problems already reported), so that a reference to one is not reported again as undefined."""
    plugins: dict[str, Plugin] = {}
    raw_plugins = doc.get("plugins", [])
    if not isinstance(raw_plugins, list):
        problems.append("plugins: must be a list")
        return plugins
    for i, item in enumerate(raw_plugins):
        path = f"plugins[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{path}: must be a mapping with 'type'")
            continue
        unknown = sorted(set(item) - {"name", "type", "parameters"})
        if unknown:
            problems.append(f"{path}: unknown field {unknown[0]!r}")
        type_name = item.get("type")
        if not isinstance(type_name, str) or not type_name:
            problems.append(f"{path}.type: required")
            continue
        name = item.get("name") or type_name
        if name in plugins:
            problems.append(f"{path}.name: duplicate plugin name {name!r}")
            continue
        try:
            plugins[name] = registry.create(type_name, name=name, params=item.get("parameters"), path=path)
        except SchedulerConfigError as exc:
            problems.extend(exc.problems)
            refused.add(name)
    return plugins


def _profile(
    doc: Mapping[str, Any], plugins: dict[str, Plugin], problems: list[str], refused: Set[str] = frozenset()
) -> Profile:
    raw_profiles = doc.get("schedulingProfiles")
    refs: list[tuple[str, Any, str]] = []
    if raw_profiles is None:
        # The implicit profile references every plugin except the admission detector (GIE: a
        # detector filters only where a profile names it).
        sd = doc.get("saturationDetector")
        detector_ref = sd.get("pluginRef") if isinstance(sd, Mapping) else None
        refs = [(name, None, f"plugins[{name}]") for name in plugins if name != detector_ref]
    elif not isinstance(raw_profiles, list) or len(raw_profiles) != 1:
        problems.append("schedulingProfiles: igw runs exactly one scheduling profile; give one entry")
    else:
        prof = raw_profiles[0]
        entries = prof.get("plugins", []) if isinstance(prof, Mapping) else None
        if not isinstance(entries, list):
            problems.append("schedulingProfiles[0].plugins: must be a list")
            entries = []
        for j, entry in enumerate(entries):
            path = f"schedulingProfiles[0].plugins[{j}]"
            ref = entry.get("pluginRef") if isinstance(entry, Mapping) else None
            if not isinstance(ref, str) or ref not in plugins:
                if not (isinstance(ref, str) and ref in refused):  # a refused plugin's problem is reported
                    problems.append(f"{path}.pluginRef: references undefined plugin {ref!r}")
                continue
            refs.append((ref, entry.get("weight"), path))
    filters: list[Placed[Filter]] = []
    scorers: list[Placed[WeightedScorer]] = []
    pickers: list[Placed[Picker]] = []
    for ref, weight, path in refs:
        plugin = plugins[ref]
        if isinstance(plugin, Scorer):
            w = DEFAULT_SCORER_WEIGHT if weight is None else weight
            if isinstance(w, bool) or not isinstance(w, int | float) or w < 0:
                problems.append(f"{path}.weight: must be a non-negative number, got {weight!r}")
                continue
            if w > 0:
                scorers.append(Placed(WeightedScorer(plugin, float(w)), plugin, path))
        elif isinstance(plugin, Filter):
            filters.append(Placed(plugin, plugin, path))
        elif isinstance(plugin, Picker):
            pickers.append(Placed(plugin, plugin, path))
    if len(pickers) > 1:
        names = ", ".join(p.entry.name for p in pickers)
        problems.append(f"schedulingProfiles[0]: more than one picker ({names})")
    picker: Picker = pickers[0].entry if pickers else MaxScorePicker()
    try:
        ordered_filters, ordered_scorers = order_by_data_flow(
            filters, scorers, pickers[0] if pickers else None
        )
    except SchedulerConfigError as exc:
        problems.extend(exc.problems)
        return Profile(filters=(), scorers=(), picker=picker)
    return Profile(filters=tuple(ordered_filters), scorers=tuple(ordered_scorers), picker=picker)


def _detector(
    doc: Mapping[str, Any], plugins: dict[str, Plugin], problems: list[str], refused: Set[str] = frozenset()
) -> SaturationDetector | None:
    sd = doc.get("saturationDetector")
    if not isinstance(sd, Mapping) or "pluginRef" not in sd:
        return None
    ref = sd["pluginRef"]
    plugin = plugins.get(ref) if isinstance(ref, str) else None
    if plugin is None:
        if not (isinstance(ref, str) and ref in refused):
            problems.append(f"saturationDetector.pluginRef: references undefined plugin {ref!r}")
        return None
    if not isinstance(plugin, SaturationDetector):
        problems.append(f"saturationDetector.pluginRef: plugin {ref!r} is not a saturation detector")
        return None
    return plugin


def _saturation(doc: Mapping[str, Any], settings: RoutingSettings, problems: list[str]) -> RoutingSettings:
    sd = doc.get("saturationDetector")
    if sd is None:
        return settings
    if not isinstance(sd, Mapping):
        problems.append("saturationDetector: must be a mapping")
        return settings
    changes: dict[str, Any] = {}
    for key in sorted(sd):
        value = sd[key]
        path = f"saturationDetector.{key}"
        if key == "queueDepthThreshold":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(f"{path}: must be a non-negative integer, got {value!r}")
            else:
                changes["queue_depth_threshold"] = value
        elif key == "kvCacheUtilThreshold":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                problems.append(f"{path}: must be a number between 0 and 1, got {value!r}")
            else:
                changes["kv_cache_util_threshold"] = float(value)
        elif key == "pluginRef":
            continue  # the v1.5 form, resolved by _detector
        elif key == "metricsStalenessThreshold":
            try:
                changes["stale_threshold_s"] = parse_duration(value)
            except ValueError as exc:
                problems.append(f"{path}: {exc}")
        else:
            problems.append(f"{path}: unknown field")
    updated = dataclasses.replace(settings, **changes)
    paths = {
        "queue_depth_threshold": "saturationDetector.queueDepthThreshold",
        "kv_cache_util_threshold": "saturationDetector.kvCacheUtilThreshold",
        "stale_threshold_s": "saturationDetector.metricsStalenessThreshold",
    }
    problems += updated.problems({name: path for name, path in paths.items() if name in changes})
    return updated


def profile_from_picker_config(
    doc: Mapping[str, Any],
    *,
    settings: RoutingSettings,
    registry: PluginRegistry = REGISTRY,
    strict: bool = False,
) -> tuple[Profile, RoutingSettings]:
    """The profile and the routing settings with the document's ``saturationDetector`` applied."""
    profile, settings, _ = load_picker_config(doc, settings=settings, registry=registry, strict=strict)
    return profile, settings


def load_picker_config(
    doc: Mapping[str, Any],
    *,
    settings: RoutingSettings,
    registry: PluginRegistry = REGISTRY,
    strict: bool = False,
) -> tuple[Profile, RoutingSettings, list[str]]:
    """Like :func:`profile_from_picker_config`, also returning the parameter warnings (each naming its
    path) that lenient loading turned into defaults; with ``strict`` they are errors instead."""
    problems: list[str] = []
    if not isinstance(doc, Mapping):
        raise SchedulerConfigError(["EndpointPickerConfig: must be a mapping"])
    for key in sorted(set(doc) - _TOP_LEVEL):
        problems.append(f"{key}: unknown field")
    if "apiVersion" in doc and doc["apiVersion"] not in API_VERSIONS:
        problems.append(f"apiVersion: expected one of {sorted(API_VERSIONS)}, got {doc['apiVersion']!r}")
    if "kind" in doc and doc["kind"] != KIND:
        problems.append(f"kind: expected {KIND!r}, got {doc['kind']!r}")
    warnings: list[str] = []
    refused: set[str] = set()
    if strict:
        plugins = _instantiate(doc, registry, problems, refused)
    else:
        with lenient_parameters() as warnings:
            plugins = _instantiate(doc, registry, problems, refused)
    profile = _profile(doc, plugins, problems, refused)
    detector = _detector(doc, plugins, problems, refused)
    if detector is not None:
        profile = dataclasses.replace(profile, detector=detector)
    settings = _saturation(doc, settings, problems)
    notes = gie_sections.check_sections(doc, plugins, refused, problems)
    if strict:
        problems.extend(notes)
        notes = []
    for note in notes:
        _log.warning("EndpointPickerConfig: %s", note)
    if problems:
        raise SchedulerConfigError(problems)
    return profile, settings, [*warnings, *notes]
