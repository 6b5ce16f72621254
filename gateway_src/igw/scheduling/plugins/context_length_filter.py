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
from typing import Any, Final

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView, RoutingRequest

TYPE = "context-length-filter"


def tokens_needed(request: RoutingRequest) -> int:
    """Context positions the request may use: the (estimated) prompt plus the output budget."""
    return request.prompt_tokens + (request.max_tokens or 0)


def fitting(request: RoutingRequest, endpoints: Sequence[EndpointView]) -> Sequence[EndpointView]:
    """``endpoints`` that can hold ``request`` (the same sequence object when all of them can); when
    the estimate fits no known window, the endpoints with the largest one (and those not known).

    Why keep the largest when none fits: the prompt's size is an estimate (characters per token), and
    English text runs more characters per token than it assumes, so a prompt near the window that
    the model server accepts can be estimated past it. The gateway refuses a request itself only
    when even a far lighter estimate cannot fit (:func:`surely_too_long`); short of that, the pod
    with the most room decides, and answers its own 400 if the request really is too long."""
    need = tokens_needed(request)
    limits = [e.max_model_len for e in endpoints]
    unknown = limits.count(None)  # one C-level pass
    if unknown == len(limits):
        return endpoints
    known: list[int] = [n for n in limits if n is not None] if unknown else limits  # type: ignore[assignment]  # no None: counted
    if min(known) >= need:
        return endpoints
    largest = max(known)
    floor = need if largest >= need else largest
    return [e for e in endpoints if e.max_model_len is None or e.max_model_len >= floor]


PROMPT_ESTIMATE_SLACK: Final = 4
"""How much lighter than estimated a prompt may be before the gateway refuses it as too long: the
estimate counts 4 characters per token, and no tokenizer averages 16 or more on real text."""


def surely_too_long(prompt_tokens: int, max_tokens: int | None, limit: int) -> bool:
    """Whether a request cannot fit a ``limit``-token window whatever the prompt's real token count
    within :data:`PROMPT_ESTIMATE_SLACK` of its estimate ``prompt_tokens``: the gateway answers it 400
    without a pod. Before session s39 the estimate itself decided, and a long English prompt the
    model server would have accepted (about 4.5 characters per token) was refused."""
    lightest = max(1, prompt_tokens // PROMPT_ESTIMATE_SLACK)
    return lightest + (max_tokens or 0) > limit


class ContextLengthFilter(PluginHooks):
    type_name = TYPE

    def __init__(self, *, name: str = TYPE) -> None:
        self.name = name

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]:
        return list(fitting(ctx.request, endpoints))


def factory(name: str, params: Mapping[str, Any], path: str) -> ContextLengthFilter:
    ParamReader(params, path=path).finish()
    return ContextLengthFilter(name=name)
