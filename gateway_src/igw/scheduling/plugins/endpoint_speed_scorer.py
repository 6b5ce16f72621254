"""``endpoint-speed-scorer``: prefer endpoints that have *measured* faster on this gateway's traffic.

Heterogeneous fleets (mixed GPU generations) are first-class in igw: an H100 and an A10G with the
same queue depth are not equally good picks. This scorer learns each endpoint's decode speed from
completed requests (an exponentially weighted mean of inter-token latency, ``RequestOutcome.itl_s``)
and scores ``fastest_itl / own_itl`` among candidates (the fastest scores 1.0). Endpoints with no
measurement yet score ``None``: the framework imputes the mean, so new pods are neither punished nor
favoured while they warm up. Category: balance. Signal: none (gateway measurements).

Parameters: ``alpha`` (EWMA weight of a new sample, default 0.2), ``minOutputTokens`` (ignore
outcomes with fewer output tokens, default 2: one token has no inter-token latency).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "endpoint-speed-scorer"
DEFAULT_ALPHA = 0.2
DEFAULT_MIN_OUTPUT_TOKENS = 2


class EndpointSpeedScorer(PluginHooks):
    type_name = TYPE
    signal = ""

    def __init__(
        self,
        *,
        name: str = TYPE,
        alpha: float = DEFAULT_ALPHA,
        min_output_tokens: int = DEFAULT_MIN_OUTPUT_TOKENS,
    ) -> None:
        self.name = name
        self.alpha = alpha
        self.min_output_tokens = min_output_tokens
        self.itl: dict[EndpointKey, float] = {}

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        measured = [self.itl.get(e.key) for e in endpoints]
        present = [v for v in measured if v is not None and v > 0]
        if not present:
            return [None] * len(endpoints)
        fastest = min(present)
        return [None if v is None or v <= 0 else fastest / v for v in measured]

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        if not outcome.ok or outcome.itl_s is None or outcome.output_tokens < self.min_output_tokens:
            return
        old = self.itl.get(outcome.endpoint)
        sample = outcome.itl_s
        self.itl[outcome.endpoint] = sample if old is None else old + self.alpha * (sample - old)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        for key in keys:
            self.itl.pop(key, None)


def factory(name: str, params: Mapping[str, Any], path: str) -> EndpointSpeedScorer:
    r = ParamReader(params, path=path)
    plugin = EndpointSpeedScorer(
        name=name,
        alpha=r.number("alpha", DEFAULT_ALPHA, minimum=0.0, maximum=1.0),
        min_output_tokens=r.integer("minOutputTokens", DEFAULT_MIN_OUTPUT_TOKENS, minimum=1),
    )
    r.finish()
    return plugin
