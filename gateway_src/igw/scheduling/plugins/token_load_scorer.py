"""``token-load-scorer``: prefer endpoints with fewer tokens in flight from this gateway.

Formula (GIE v1.5 ``token-load-scorer``): with ``t`` = prompt + maximum output tokens of the requests
this gateway dispatched to the endpoint that have not completed (``EndpointView.inflight_tokens``) and
``T`` = ``queueThresholdTokens``: ``1 - min(t, T) / T``; no tokens in flight -> 1.0. An absolute
scale, unlike the min-max scorers: two endpoints both far below ``T`` score almost alike.
Category: distribution. Signal: none (gateway state; GIE's ``inflight-load-producer`` supplies the
same count there). Parameters: ``queueThresholdTokens`` (default 4,194,304 = 128 requests × 32K).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointView

TYPE = "token-load-scorer"
DEFAULT_QUEUE_THRESHOLD_TOKENS = 4_194_304


class TokenLoadScorer(PluginHooks):
    type_name = TYPE
    signal = ""

    def __init__(self, *, name: str = TYPE, threshold_tokens: int = DEFAULT_QUEUE_THRESHOLD_TOKENS) -> None:
        if threshold_tokens < 1:
            raise ValueError(f"threshold_tokens must be >= 1, got {threshold_tokens}")
        self.name = name
        self.threshold_tokens = threshold_tokens

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        cap = self.threshold_tokens
        return [1.0 - min(max(e.inflight_tokens, 0), cap) / cap for e in endpoints]


def factory(name: str, params: Mapping[str, Any], path: str) -> TokenLoadScorer:
    r = ParamReader(params, path=path)
    threshold = r.integer("queueThresholdTokens", DEFAULT_QUEUE_THRESHOLD_TOKENS, minimum=1)
    r.finish()
    return TokenLoadScorer(name=name, threshold_tokens=threshold)
