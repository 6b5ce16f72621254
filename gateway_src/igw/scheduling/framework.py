"""Contracts of the scheduling framework: filters, scorers and pickers, and the per-pick context.

The framework is a pure library: no I/O, no clock reads, no global random state. Everything a plugin
needs arrives in :class:`CycleContext` (the request, the caller's ``now``, the injected random source
and a scratch dict shared by the plugins of one pick). This is what lets the discrete-event simulator
run the gateway's scheduler unchanged in virtual time.

Shape of one decision (see :mod:`igw.scheduling.scheduler`)::

    candidates = filters(endpoints)                     # each Filter narrows the list
    total[i]   = sum(weight_s * clamp(score_s[i]))      # each Scorer returns one value per candidate
    ranking    = picker(candidates, total)              # best first; the rest become fallbacks
    for plugin in plugins: plugin.on_picked(ctx, chosen)  # e.g. the prefix index learns the pick

Scorers return ``None`` for a candidate whose signal is missing (an engine that does not publish it).
The framework never turns that into a silent zero: it imputes the mean of the scored candidates (or
leaves the scorer out of the sum when nobody has the signal) and reports the imputation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

from igw.scheduling.cycle import CycleContext as CycleContext
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome


class PluginHooks:
    """No-op lifecycle hooks and empty data-flow declarations; plugins override what they need.

    ``consumes`` / ``produces`` name the :attr:`CycleContext.state` keys the plugin reads / writes
    during a pick; the framework orders a profile's plugins by them (:mod:`igw.scheduling.data_flow`).
    A plugin that does not derive from this class may declare them the same way, or not at all.
    """

    consumes: frozenset[str] = frozenset()
    produces: frozenset[str] = frozenset()

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """Called once per successful pick with the chosen endpoint (GIE's PreRequest). It may run
        after the pick has returned (``Scheduler.pick``'s ``settle_later``: ``igw serve`` sends the
        request first), but always before the scheduler's next pick or hook call; so it reads only
        ``ctx``, ``endpoint`` and the plugin's own state."""

    def on_not_sent(self, request_id: str, endpoint: EndpointKey, *, sent_to: EndpointView | None) -> bool:
        """Called when the pick of request ``request_id`` (``RoutingRequest.request_id``) on
        ``endpoint`` was not sent there: given back (``sent_to`` ``None``: flow control left the
        request queued after picking for it, or its client went away before it was sent) or sent to
        ``sent_to`` instead (flow control steered it). A plugin whose ``on_picked`` took the pick
        for a request sent takes it back, or moves it, where it still can; whether it did (then the
        scheduler withdraws, or moves, the plugin's latest note about ``endpoint`` still unsent: the
        pick's). Optional: a plugin that does not derive from this class need not have it."""
        return False

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        """Called when a dispatched request finishes (GIE's ResponseComplete)."""

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        """Called when a dispatched request's first token arrives, before ``on_complete`` (GIE's
        ResponseStreaming for the first chunk); ``outcome`` carries ``ttft_s``."""

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        """Called when endpoints leave the pool, so per-endpoint state can be dropped."""

    def on_model_missing(self, endpoint: EndpointKey, model: str, *, now: float) -> None:
        """Called when ``endpoint`` answered 404 to a request for the LoRA adapter ``model``: it does
        not serve that adapter (loaded on some pods only, or not yet)."""


@runtime_checkable
class Plugin(Protocol):
    type_name: str
    name: str

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None: ...

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None: ...

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None: ...


@runtime_checkable
class BoundedIndex(Protocol):
    """Optional hook of a plugin whose state grows with the pool (the prefix index: an entry per KV
    block of every endpoint). :meth:`bound_index` gives it the blocks it may hold in all (``None``:
    no bound); it shares them among its endpoints, so a larger pool makes each endpoint's share
    smaller instead of the process larger (see :func:`igw.gateway.memory.memory_plan`)."""

    def bound_index(self, blocks: int | None) -> None: ...


@runtime_checkable
class SharesPicks(Protocol):
    """Optional hook of a plugin whose state is a pure function of the picks it is told about.

    ``igw serve --workers N`` runs N schedulers, each told only its own picks. A plugin with this
    hook lets the others catch up: after each pick (after ``on_picked``) :meth:`pick_note` returns a
    compact JSON-able note of what the pick taught it (``None``: nothing), and another worker's
    instance of the same plugin takes it in with :meth:`learn_pick` as if it had made the pick. A
    note never holds request text, tokens or credentials, only derived values (hashes, flags).

    Only state that picks alone build may be shared: a plugin that counts in-flight work, which only
    the worker owning the request sees complete, must not learn other workers' picks (its counts
    would never come down). Plugins without the hook keep working; they just do not share
    (:mod:`igw.scheduling.pick_notes` lists which of the built-in plugins share and why).
    """

    name: str

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None: ...

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Take in another worker's note of a pick of ``endpoint``; raise ``ValueError`` when the
        note is malformed (it came over a channel)."""
        ...


@runtime_checkable
class Filter(Plugin, Protocol):
    """Narrows the candidate list. Returning an empty list means "no endpoint can serve this"."""

    def filter(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[EndpointView]: ...


class UnitScores(list[float | None]):
    """Scores a scorer vouches for: one per candidate, none missing, each within [0, 1].

    A scorer may return its scores in this list type instead of a plain list; the scheduler then
    skips its per-value checks (missing signals, the range clamp), which on a large pool cost as
    much as the scoring itself. Only the cost differs: a plain list gets the same result through
    the checks. (Typed ``float | None`` only to fit :meth:`Scorer.score`; it holds no ``None``.)
    """

    __slots__ = ()


@runtime_checkable
class Scorer(Plugin, Protocol):
    """Scores every candidate in [0, 1] (higher is better), aligned with ``endpoints``.

    ``None`` marks a candidate whose required signal is missing. ``signal`` names that signal for
    reports (``"kv_usage"``...); ``""`` for scorers that only use the gateway's own state. Scores
    returned as :class:`UnitScores` skip the scheduler's checks.
    """

    signal: str

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]: ...


@runtime_checkable
class Picker(Plugin, Protocol):
    """Orders candidates best-first from their total scores (ties and randomness via ``ctx.rng``)."""

    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]: ...

    """Indices into the candidate list, best first. May be shorter than the candidate list."""


@runtime_checkable
class SaturationDetector(Plugin, Protocol):
    """Decides admission: the candidates are saturated when :meth:`saturation` is >= 1.0 (GIE v1.5)."""

    def saturation(self, endpoints: Sequence[EndpointView], *, now: float) -> float: ...


def clamp01(value: float) -> float:
    """The framework's score range: anything outside [0, 1] (or NaN) is clamped, as in GIE."""
    if value != value:  # NaN
        return 0.0
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def min_max_inverse(
    values: Sequence[float | None], *, bounds: tuple[float, float] | None = None
) -> list[float | None]:
    """``(max - v) / (max - min)`` over the values present; all equal -> 1.0 (GIE queue scorer).

    ``bounds``: ``(min, max)`` of ``values`` when the caller already has them and no value is
    ``None`` (:attr:`igw.scheduling.columns.Columns.waiting`).
    """
    if bounds is None and None not in values:
        full = cast("Sequence[float]", values)
        bounds = (min(full, default=0.0), max(full, default=0.0))
    if bounds is not None:
        # Every value present (the usual case): the same arithmetic without the per-value test.
        lo, hi = bounds
        if hi == lo:
            return UnitScores([1.0] * len(values))
        span = hi - lo
        return UnitScores([(hi - v) / span for v in cast("Sequence[float]", values)])
    present = [v for v in values if v is not None]
    if not present:
        return [None] * len(values)
    lo, hi = min(present), max(present)
    if hi == lo:
        return [None if v is None else 1.0 for v in values]
    span = hi - lo
    return [None if v is None else (hi - v) / span for v in values]
