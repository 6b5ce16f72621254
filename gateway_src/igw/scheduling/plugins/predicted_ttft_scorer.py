"""``predicted-ttft-scorer``: prefer the endpoint where this request should see its first token soonest.

Why not raw speed: scoring endpoints by their measured speed alone (``endpoint-speed-scorer``) sends
every request to the fastest-looking pod until its numbers degrade (measured on ``igw bench
homogeneous-steady``: TTFT p50 2.47 s vs 19 ms for round-robin). Why not raw counts: a queue or
in-flight count treats one waiting request on an H100 like one on an A10G, which pulls traffic onto
slow pods in mixed fleets. This scorer multiplies the two: *work ahead × measured time per unit of
work*.

Formula: ``predicted_i = ttft_i * (1 + waiting_i)`` where ``ttft_i`` is an exponentially weighted
mean of the time to first token this gateway measured on endpoint ``i`` (``RequestOutcome.ttft_s``)
and ``waiting_i`` is the scraped waiting count plus ``EndpointView.unreflected_dispatches`` (this
router's dispatches the scrape cannot show yet, see :mod:`igw.scheduling.dispatch_ledger`). Score:
``min(predicted) / predicted_i`` (the best endpoint scores 1.0; twice the predicted TTFT scores 0.5):
a ratio rather than min-max, so one pathological endpoint does not flatten the differences between
the others. Endpoints not measured yet take the mean measured TTFT (new pods are neither favoured
nor punished); with no measurement at all the score is ``1 / (1 + waiting)`` relative to the best.
Category: balance. Signal: ``waiting`` (missing -> the gateway's own in-flight count is used).

Parameters: ``alpha`` (EWMA weight of a new TTFT sample, default 0.2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.framework import CycleContext, PluginHooks
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "predicted-ttft-scorer"
DEFAULT_ALPHA = 0.2


class PredictedTtftScorer(PluginHooks):
    type_name = TYPE
    signal = ""

    def __init__(self, *, name: str = TYPE, alpha: float = DEFAULT_ALPHA) -> None:
        self.name = name
        self.ttft = EndpointEwma(alpha=alpha)

    def predicted(self, endpoints: Sequence[EndpointView]) -> list[float]:
        """Predicted TTFT per endpoint in the units of the measurements (1.0 when none yet)."""
        measured = [self.ttft.get(e.key) for e in endpoints]
        present = [v for v in measured if v is not None]
        fallback = sum(present) / len(present) if present else 1.0
        return [
            (fallback if t is None else t) * (1 + _work_ahead(e))
            for t, e in zip(measured, endpoints, strict=True)
        ]

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        predicted = self.predicted(endpoints)
        best = min(predicted, default=0.0)
        return [1.0 if p <= 0 else best / p for p in predicted]

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        if not outcome.ok or outcome.ttft_s is None or outcome.ttft_s < 0:
            return
        self.ttft.observe(outcome.endpoint, outcome.ttft_s)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        self.ttft.forget(keys)


def _work_ahead(endpoint: EndpointView) -> int:
    """Requests ahead of a new one: scraped waiting plus this router's dispatches the scrape cannot
    show yet; without a waiting signal, the gateway's own in-flight count."""
    m = endpoint.metrics
    if m is not None and m.waiting is not None:
        return max(0, m.waiting) + max(0, endpoint.unreflected_dispatches)
    return max(0, endpoint.inflight)


def factory(name: str, params: Mapping[str, Any], path: str) -> PredictedTtftScorer:
    r = ParamReader(params, path=path)
    plugin = PredictedTtftScorer(name=name, alpha=r.number("alpha", DEFAULT_ALPHA, minimum=0.0, maximum=1.0))
    r.finish()
    return plugin
