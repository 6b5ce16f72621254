"""The one registry of scheduling plugins: ``type`` name -> factory.

Built-in plugins are registered explicitly in :mod:`igw.scheduling.builtin` (no import-time
scanning), so the full list of what an EndpointPickerConfig may reference is readable in one place.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

from igw.scheduling.errors import SchedulerConfigError
from igw.scheduling.framework import Plugin
from igw.scheduling.upstream_plugins import UPSTREAM_PLUGIN_TYPES, upstream_source

_UPSTREAM_ONLY = "a plugin of llm-d/GIE that igw does not implement"

PluginFactory = Callable[[str, Mapping[str, Any], str], Plugin]
"""``factory(name, parameters, path) -> plugin``; ``path`` prefixes every error it reports."""


class PluginRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}

    def register(self, type_name: str, factory: PluginFactory) -> None:
        if type_name in self._factories:
            raise ValueError(f"plugin type {type_name!r} is already registered")
        self._factories[type_name] = factory

    def types(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

    def unknown_type_message(self, type_name: str) -> str:
        """Why ``type_name`` is refused: a plugin of llm-d or GIE that igw does not implement is
        named as such, with the release that registers it (a config written for them, not a typo);
        otherwise the closest type first (a typo such as ``queue-scorrer`` is the usual cause, and
        the full list is long), then every known type."""
        known = f"known: {', '.join(self.types())}"
        source = upstream_source(type_name)
        if source is not None:
            return f"plugin type {type_name!r} is {_UPSTREAM_ONLY} ({source}); {known}"
        # a misspelt upstream name is pointed at that name, not at an unrelated igw plugin
        candidates = sorted({*self.types(), *UPSTREAM_PLUGIN_TYPES})
        close = difflib.get_close_matches(type_name.lower(), candidates, n=1, cutoff=0.6)
        hint = ""
        if close and close[0] in self._factories:
            hint = f" (did you mean {close[0]!r}?)"
        elif close:
            hint = f" (did you mean {close[0]!r}? {_UPSTREAM_ONLY})"
        return f"unknown plugin type {type_name!r}{hint}; {known}"

    def create(
        self, type_name: str, *, name: str | None = None, params: Mapping[str, Any] | None = None, path: str
    ) -> Plugin:
        factory = self._factories.get(type_name)
        if factory is None:
            raise SchedulerConfigError([f"{path}.type: {self.unknown_type_message(type_name)}"])
        return factory(name or type_name, params or {}, f"{path}.parameters")
