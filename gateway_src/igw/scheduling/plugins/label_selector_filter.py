"""``by-label-selector``: keep only endpoints whose pod labels match ``matchLabels``.

Used, for example, to send a profile's traffic only to ``llm-d.ai/role: decode`` pods or to one GPU
generation. Parameters: ``matchLabels`` (mapping; empty keeps everything).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "by-label-selector"


class LabelSelectorFilter(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE, match_labels: Mapping[str, str]) -> None:
        self.name = name
        self.match_labels = dict(match_labels)

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        want = self.match_labels.items()
        return [e for e in endpoints if all(e.labels.get(k) == v for k, v in want)]


def factory(name: str, params: Mapping[str, Any], path: str) -> LabelSelectorFilter:
    r = ParamReader(params, path=path)
    plugin = LabelSelectorFilter(name=name, match_labels=r.string_map("matchLabels"))
    r.finish()
    return plugin
