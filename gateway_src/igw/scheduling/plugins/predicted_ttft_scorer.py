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

Publishes its scores of each pick (``predicted-ttft.scores``, a :class:`PublishedScores`) for
``backlog-ttft-scorer``, which leans on them on fleets of one kind of hardware.

A sample arrives with the request's first token when the caller streams (``on_first_token``), else
at its completion: the endpoint's speed is known one TTFT after dispatch, not one whole response
later, and the work of taking the sample in (two EWMAs, the pool's re-sort) is done in the stream's
gaps instead of after its end, where a client's next request waits for it. ``on_complete`` then
skips the request (the ids heard are kept, bounded, until their completion).

Parameters: ``alpha`` (EWMA weight of a new TTFT sample, default 0.2), ``noiseZ`` (how many
standard errors apart two endpoints must be to count as different speeds, default 2; 0 compares
raw means).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from igw.scheduling.columns import Columns
from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.ttft_pool import TtftPool
from igw.scheduling.slot_init import slot_constructor
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "predicted-ttft-scorer"
DEFAULT_ALPHA = 0.2
DEFAULT_NOISE_Z = 2.0
STATE_SCORES = "predicted-ttft.scores"
"""Cycle-state key of this pick's :class:`PublishedScores`."""
HEARD_LIMIT = 65_536
"""Most request ids kept between their first token and their completion (the oldest dropped: a
completion that never comes, its endpoint gone, must not grow the table)."""


@dataclass(slots=True, init=False, unsafe_hash=True)
class PublishedScores:
    """The scores :meth:`PredictedTtftScorer.score` gave in one pick.

    Read-only, with a written-out ``__init__`` (as :class:`~igw.scheduling.values.RoutingRequest`'s:
    one is made per pick, and a generated ``__init__`` stays interpreted in the compiled build)."""

    endpoints: Final[Sequence[EndpointView]]
    """The candidate list scored (the same object every scorer of the pick receives)."""
    scores: Final[Sequence[float | None]]
    """Score per candidate, in ``endpoints`` order."""

    def __init__(self, endpoints: Sequence[EndpointView], scores: Sequence[float | None]) -> None:
        self.endpoints = endpoints
        self.scores = scores


_published = slot_constructor(PublishedScores)
"""``PublishedScores(endpoints, scores)`` by slot writes (made once per pick)."""


class PredictedTtftScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    produces = frozenset({STATE_SCORES})

    def __init__(
        self, *, name: str = TYPE, alpha: float = DEFAULT_ALPHA, noise_z: float = DEFAULT_NOISE_Z
    ) -> None:
        self.name = name
        self.noise_z = noise_z
        self.ttft = EndpointEwma(alpha=alpha, track_changes=True)
        self.log_ttft = EndpointEwma(alpha=alpha, track_changes=True)
        """The same samples in log space, where their noise is compared (TTFT noise is relative)."""
        self.pool = TtftPool(self.ttft, self.log_ttft, noise_z=noise_z)
        self._heard: dict[str, None] = {}
        """Requests whose TTFT ``on_first_token`` took (insertion order: the oldest first)."""

    def predicted(self, endpoints: Sequence[EndpointView], cols: Columns | None = None) -> list[float]:
        """Predicted TTFT per endpoint in the units of the measurements (1.0 when none yet).

        ``cols``: the pick's shared reads of ``endpoints`` (:meth:`CycleContext.columns`), if any.
        """
        cols = cols or Columns(endpoints)
        speeds = self.pool.pooled(cols.keys)  # pooled_ttft, without its call
        waiting = cols.waiting
        if waiting is not None and waiting.lo >= 0:
            unreflected = cols.unreflected
            # ``min(unreflected, default=0) >= 0`` without the keyword (which makes the compiled
            # build's call go through the generic keyword path): the same answer for a list of ints.
            if not unreflected or min(unreflected) >= 0:
                # The usual case (every endpoint publishes ``waiting``, no negative count): the
                # formula below without its per-endpoint guards.
                queued = zip(speeds, waiting.values, unreflected, strict=True)
                return [t * (1 + (w + u)) for t, w, u in queued]
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
        (1.0 when none is measured); unsettled ones keep their own mean. Kept up to date between
        picks by :class:`~igw.scheduling.plugins.ttft_pool.TtftPool`.
        """
        return self.pool.pooled((cols or Columns(endpoints)).keys)

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        predicted = self.predicted(endpoints, ctx.columns(endpoints))
        best = min(predicted) if predicted else 0.0  # no keyword: a generic keyword call compiled
        scores: list[float | None]
        if best > 0:  # every prediction positive: the ratio below without its guard, each in (0, 1]
            scores = UnitScores([best / p for p in predicted])
        else:
            scores = [1.0 if p <= 0 else best / p for p in predicted]
        ctx.state[STATE_SCORES] = _published(endpoints, scores)
        return scores

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        """Take in a streamed request's TTFT as soon as its first token is relayed."""
        ttft = outcome.ttft_s
        if ttft is None or ttft < 0:
            return
        heard = self._heard
        heard[outcome.request_id] = None
        if len(heard) > HEARD_LIMIT:
            del heard[next(iter(heard))]
        self._learn(outcome.endpoint, ttft)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        """Take in a completed request's TTFT, unless its first token already gave it."""
        if self._heard and self._heard.pop(outcome.request_id, 0) is None:
            return
        if not outcome.ok or outcome.ttft_s is None or outcome.ttft_s < 0:
            return
        self._learn(outcome.endpoint, outcome.ttft_s)

    def _learn(self, key: EndpointKey, ttft_s: float) -> None:
        self.ttft.observe(key, ttft_s)
        self.log_ttft.observe(key, math.log(max(ttft_s, 1e-6)))
        self.pool.catch_up()  # the sorted means and groups move now, not in the next pick

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        self.ttft.forget(keys)
        self.log_ttft.forget(keys)
        self.pool.forget()


def factory(name: str, params: Mapping[str, Any], path: str) -> PredictedTtftScorer:
    r = ParamReader(params, path=path)
    plugin = PredictedTtftScorer(
        name=name,
        alpha=r.number("alpha", DEFAULT_ALPHA, minimum=0.0, maximum=1.0),
        noise_z=r.number("noiseZ", DEFAULT_NOISE_Z, minimum=0.0),
    )
    r.finish()
    return plugin
