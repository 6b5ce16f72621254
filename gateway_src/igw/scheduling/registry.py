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
        """Why ``type_name`` is refused: the closest registered type first (a typo such as
        ``queue-scorrer`` is the usual cause, and the full list is long), then every known type."""
        close = difflib.get_close_matches(type_name.lower(), self.types(), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown plugin type {type_name!r}{hint}; known: {', '.join(self.types())}"

    def create(
        self, type_name: str, *, name: str | None = None, params: Mapping[str, Any] | None = None, path: str
    ) -> Plugin:
        factory = self._factories.get(type_name)
        if factory is None:
            raise SchedulerConfigError([f"{path}.type: {self.unknown_type_message(type_name)}"])
        return factory(name or type_name, params or {}, f"{path}.parameters")
