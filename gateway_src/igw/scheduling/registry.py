"""The one registry of scheduling plugins: ``type`` name -> factory.

Built-in plugins are registered explicitly in :mod:`igw.scheduling.builtin` (no import-time
scanning), so the full list of what an EndpointPickerConfig may reference is readable in one place.
"""

from __future__ import annotations

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

    def create(
        self, type_name: str, *, name: str | None = None, params: Mapping[str, Any] | None = None, path: str
    ) -> Plugin:
        factory = self._factories.get(type_name)
        if factory is None:
            known = ", ".join(self.types())
            raise SchedulerConfigError([f"{path}.type: unknown plugin type {type_name!r} (known: {known})"])
        return factory(name or type_name, params or {}, f"{path}.parameters")
