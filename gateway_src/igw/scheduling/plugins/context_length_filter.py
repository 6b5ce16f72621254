"""``context-length-filter``: drop endpoints whose context window cannot hold the request.

A request needs ``prompt_tokens + max_tokens`` positions; a model server started with a smaller
``--max-model-len`` (vLLM) or ``--context-length`` (SGLang) answers it with a 400, so sending it
there wastes a round trip and fails a request another pod could serve. Endpoints whose limit is not
known (``EndpointView.max_model_len is None``) are kept. When every endpoint fits (the common case)
the list is returned unchanged, so routing is exactly what it would be without this filter.

The scheduler applies this filter to every pick before any other step; it is also registered so an
EndpointPickerConfig may list it explicitly. It takes no parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView, RoutingRequest

TYPE = "context-length-filter"


def tokens_needed(request: RoutingRequest) -> int:
    """Context positions the request may use: the (estimated) prompt plus the output budget."""
    return request.prompt_tokens + (request.max_tokens or 0)


def fitting(request: RoutingRequest, endpoints: Sequence[EndpointView]) -> Sequence[EndpointView]:
    """``endpoints`` that can hold ``request`` (the same sequence object when all of them can)."""
    need = tokens_needed(request)
    limits = [e.max_model_len for e in endpoints]
    unknown = limits.count(None)  # one C-level pass
    if unknown == len(limits):
        return endpoints
    known: list[int] = [n for n in limits if n is not None] if unknown else limits  # type: ignore[assignment]  # no None: counted
    if min(known) >= need:
        return endpoints
    return [e for e in endpoints if e.max_model_len is None or e.max_model_len >= need]


class ContextLengthFilter(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        return list(fitting(ctx.request, endpoints))


def factory(name: str, params: Mapping[str, Any], path: str) -> ContextLengthFilter:
    ParamReader(params, path=path).finish()
    return ContextLengthFilter(name=name)
