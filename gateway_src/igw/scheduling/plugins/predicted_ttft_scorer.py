"""``predicted-ttft-scorer``: prefer the endpoint where this request should see its first token soonest.

Why not raw speed: scoring endpoints by their measured speed alone (``endpoint-speed-scorer``) sends
every request to the fastest-looking pod until its numbers degrade (herding; measured in
docs/scheduler-design.md). Why not raw counts: a queue or
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

**Differences inside the noise are not speed differences.** Per-request TTFTs vary several-fold with
prompt length and step timing, so the means of identical pods differ by chance; read as speeds, those
differences sent each request to whichever pod had been lucky (on ``igw bench homogeneous-steady``
the predicted-TTFT scorer was the deciding column in most picks while no pod had anything waiting).
So measured means are compared in log space (TTFT noise is relative) against their standard errors
(:meth:`EndpointEwma.standard_error`): endpoints are sorted and grouped while the next one
is at most ``noiseZ`` combined standard errors above the group's first (fastest) member, and the
members all take the group's mean TTFT (so small steps cannot chain an A10G to the H100s).
Endpoints with fewer samples than the EWMA's window keep their own mean and join no group (a few
samples have no trustworthy noise estimate). Its effect is measured in docs/scheduler-design.md.

Parameters: ``alpha`` (EWMA weight of a new TTFT sample, default 0.2), ``noiseZ`` (how many
standard errors apart two endpoints must be to count as different speeds, default 2; 0 compares
raw means).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from itertools import count as count_from
from typing import Any, cast

from igw.scheduling.columns import Columns
from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "predicted-ttft-scorer"
DEFAULT_ALPHA = 0.2
DEFAULT_NOISE_Z = 2.0


class PredictedTtftScorer(PluginHooks):
    type_name = TYPE
    signal = ""

    def __init__(
        self, *, name: str = TYPE, alpha: float = DEFAULT_ALPHA, noise_z: float = DEFAULT_NOISE_Z
    ) -> None:
        self.name = name
        self.noise_z = noise_z
        self.ttft = EndpointEwma(alpha=alpha)
        self.log_ttft = EndpointEwma(alpha=alpha)
        """The same samples in log space, where their noise is compared (TTFT noise is relative)."""

    def predicted(self, endpoints: Sequence[EndpointView], cols: Columns | None = None) -> list[float]:
        """Predicted TTFT per endpoint in the units of the measurements (1.0 when none yet).

        ``cols``: the pick's shared reads of ``endpoints`` (:meth:`CycleContext.columns`), if any.
        """
        cols = cols or Columns(endpoints)
        speeds = self.pooled_ttft(endpoints, cols)
        waiting = cols.waiting
        if waiting is not None and min(waiting, default=0) >= 0:
            unreflected = cols.unreflected
            if min(unreflected, default=0) >= 0:
                # The usual case (every endpoint publishes ``waiting``, no negative count): the
                # formula below without its per-endpoint guards.
                return [t * (1 + (w + u)) for t, w, u in zip(speeds, waiting, unreflected, strict=True)]
        out: list[float] = []
        for t, e in zip(speeds, endpoints, strict=True):
            # Requests ahead of a new one: scraped waiting plus this router's dispatches the scrape
            # cannot show yet; without a waiting signal, the gateway's own in-flight count.
            m = e.metrics
            if m is not None and m.waiting is not None:
                ahead = (m.waiting if m.waiting > 0 else 0) + (
                    e.unreflected_dispatches if e.unreflected_dispatches > 0 else 0
                )
            else:
                ahead = e.inflight if e.inflight > 0 else 0
            out.append(t * (1 + ahead))
        return out

    def pooled_ttft(self, endpoints: Sequence[EndpointView], cols: Columns | None = None) -> list[float]:
        """Measured TTFT per endpoint, with differences inside the measurements' noise removed.

        Settled endpoints (at least a full EWMA window of samples) are sorted by their log-space mean
        and grouped while the next one is at most ``noise_z`` combined standard errors above the
        group's first member
        (:meth:`EndpointEwma.standard_error`); every member of a group takes the group's mean TTFT.
        Identical pods thus look identical (the other signals decide), while an A10G next to an H100
        (a tenfold difference) stays apart. Unmeasured endpoints take the mean of the measured ones
        (1.0 when none is measured); unsettled ones keep their own mean.

        Cost: the standard errors are kept up to date when a sample arrives, not computed here, and
        each group's end is found by a chain of ``map`` calls that runs in C and stops at the first
        endpoint outside the group; only the sort is per pick and per settled endpoint.
        """
        keys = (cols or Columns(endpoints)).keys
        get = self.ttft.values.get
        measured = [get(k) for k in keys]
        if None in measured:
            present = [v for v in measured if v is not None]
            fallback = sum(present) / len(present) if present else 1.0
            out = [fallback if t is None else t for t in measured]
        else:
            out = cast("list[float]", measured)
        if self.noise_z <= 0:
            return out
        logs = self.log_ttft
        count, settled = logs.counts.get, logs.settled_count
        eligible = [i for i, k in enumerate(keys) if count(k, 0) >= settled and measured[i] is not None]
        if not eligible:
            return out
        # Settled endpoints have a log-space mean and a standard error (no None below).
        log_of, error_of = logs.values.__getitem__, logs.errors.get
        log_means = {i: log_of(keys[i]) for i in eligible}
        order = sorted(eligible, key=log_means.__getitem__)  # stable: ties keep endpoint order
        logs_sorted = [log_means[i] for i in order]
        errors_sorted = [error_of(keys[i]) or 0.0 for i in order]
        z, n = self.noise_z, len(order)
        log_iter, error_iter = iter(logs_sorted), iter(errors_sorted)
        next(log_iter), next(error_iter)  # the first group starts at position 0
        start = 0
        while True:
            # A group ends at the first later endpoint more than ``z`` combined standard errors above
            # the group's *first* (fastest) member, not the previous one, so a chain of small steps
            # cannot join an H100 and an A10G. The iterators are shared, so each endpoint is
            # compared once: the search for the next group resumes after this group's end.
            first_log, first_error = logs_sorted[start], errors_sorted[start]
            above = map(operator.sub, log_iter, repeat(first_log))
            allowed = map(operator.mul, repeat(z), map(math.hypot, error_iter, repeat(first_error)))
            end = next(compress(count_from(start + 1), map(operator.gt, above, allowed)), n)
            _pool(out, order[start:end])
            if end >= n:
                return out
            start = end

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        predicted = self.predicted(endpoints, ctx.columns(endpoints))
        best = min(predicted, default=0.0)
        if best > 0:  # every prediction positive: the ratio below without its guard, each in (0, 1]
            return UnitScores([best / p for p in predicted])
        return [1.0 if p <= 0 else best / p for p in predicted]

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        if not outcome.ok or outcome.ttft_s is None or outcome.ttft_s < 0:
            return
        self.ttft.observe(outcome.endpoint, outcome.ttft_s)
        self.log_ttft.observe(outcome.endpoint, math.log(max(outcome.ttft_s, 1e-6)))

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        self.ttft.forget(keys)
        self.log_ttft.forget(keys)


def _pool(out: list[float], group: list[int]) -> None:
    """Give every member of ``group`` (indices into ``out``) the group's mean, summed in group order."""
    if len(group) > 1:
        mean = sum([out[j] for j in group]) / len(group)
        for j in group:
            out[j] = mean


def factory(name: str, params: Mapping[str, Any], path: str) -> PredictedTtftScorer:
    r = ParamReader(params, path=path)
    plugin = PredictedTtftScorer(
        name=name,
        alpha=r.number("alpha", DEFAULT_ALPHA, minimum=0.0, maximum=1.0),
        noise_z=r.number("noiseZ", DEFAULT_NOISE_Z, minimum=0.0),
    )
    r.finish()
    return plugin
