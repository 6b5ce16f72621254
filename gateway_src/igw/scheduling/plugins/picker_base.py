"""What every built-in picker shares: a name and how many endpoints it returns (the pick plus
connect-failure fallbacks), read from the ``maxNumOfEndpoints`` parameter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from igw.scheduling.framework import PluginHooks
from igw.scheduling.params import ParamReader

DEFAULT_MAX_ENDPOINTS = 3


class CountedPicker(PluginHooks):
    """Base of the pickers: ``rank`` returns at most ``max_endpoints`` indices; the name defaults to
    the subclass's ``type_name``."""

    type_name: str

    def __init__(self, *, name: str | None = None, max_endpoints: int = DEFAULT_MAX_ENDPOINTS) -> None:
        self.name = name or self.type_name
        self.max_endpoints = max_endpoints


P = TypeVar("P", bound=CountedPicker)


def counted_picker_factory(cls: type[P]) -> Callable[[str, Mapping[str, Any], str], P]:
    """The registry factory of a :class:`CountedPicker` subclass (parameter ``maxNumOfEndpoints``)."""

    def factory(name: str, params: Mapping[str, Any], path: str) -> P:
        r = ParamReader(params, path=path)
        plugin = cls(
            name=name, max_endpoints=r.integer("maxNumOfEndpoints", DEFAULT_MAX_ENDPOINTS, minimum=1)
        )
        r.finish()
        return plugin

    return factory
