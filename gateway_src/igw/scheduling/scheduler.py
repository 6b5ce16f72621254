"""The scheduler: one scheduling profile (filters -> weighted scorers -> picker) behind the shared
:class:`~igw.scheduling.types.RoutingPolicy` interface, plus eligibility and saturation.

Order of one ``pick`` (all in memory, no I/O, time only from ``now``):

1. No endpoints at all -> ``NO_ENDPOINTS`` (503).
2. **Eligibility**: an endpoint is *fresh* when it has a successful scrape, its last scrape did not
   fail, and the scrape is at most ``stale_threshold_s`` old. Stale or failing endpoints are excluded
   (GIE keeps routing to them, their issue #1497) and come back by themselves once fresh metrics
   arrive. If *no* endpoint is fresh, the scheduler does not fail: it ranks every endpoint by the
   gateway's own in-flight counts only (``active-request-scorer``).
   Before that, endpoints ejected for failing the requests sent to them are left out
   (:mod:`igw.scheduling.outliers`, at most a share of the pool).
   Fresh endpoints are annotated with this scheduler's own dispatches since their scrape
   (``unreflected_dispatches``, :mod:`igw.scheduling.dispatch_ledger`), which the speed-aware
   ``predicted-ttft-scorer`` adds to ``waiting`` so picks between two scrapes do not herd.
3. Filters narrow the fresh set; an empty result -> ``NO_ENDPOINTS``.
4. **Saturation**: no candidate with spare capacity -> ``SATURATED`` with a computed Retry-After
   (or, with a saturation-detector plugin in the profile, its saturation level >= 1.0).
5. Scorers: each value clamped to [0, 1], multiplied by its weight, summed (not normalised, as GIE).
   Missing signals (``None``) are imputed with the mean of the candidates that have the signal, and
   a scorer nobody can feed contributes nothing; both are named in ``RoutingDecision.reason``.
6. The picker ranks; the first is the pick, the next ones are connect-failure fallbacks; every
   plugin's ``on_picked`` runs (the prefix index learns the pick) - or, for a pick made with
   ``settle_later``, runs at :meth:`Scheduler.settle`, before anything else reads that state.
   A ``settle_later`` pick given ``on_decided`` whose filters leave one candidate (the forced
   choice) returns that candidate at once and runs steps 5 and 6 at :meth:`Scheduler.settle`.
"""

from __future__ import annotations

import functools
import math
import random
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from igw.scheduling.columns import ScrapeCache
from igw.scheduling.data_flow import require_data_flow_order
from igw.scheduling.dispatch_ledger import DispatchLedger
from igw.scheduling.framework import (
    BoundedIndex,
    CycleContext,
    Filter,
    Picker,
    Plugin,
    PluginHooks,
    SaturationDetector,
    Scorer,
    UnitScores,
    clamp01,
)
from igw.scheduling.outliers import OutlierDetector
from igw.scheduling.pick_notes import LearnCounts, PickNoteOutbox, learn_notes, sharing_plugins
from igw.scheduling.plugins.context_length_filter import fitting, tokens_needed
from igw.scheduling.plugins.inflight_scorer import InflightScorer
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.response_affinity import DISOWNED, ResponseAffinity
from igw.scheduling.retry_policy import RetryPolicy
from igw.scheduling.saturation import DrainTracker, has_capacity, retry_after_seconds
from igw.scheduling.settings import RoutingSettings
from igw.scheduling.slot_init import slot_constructor
from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    EndpointView,
    FirstTokenObserver,
    RequestOutcome,
    RoutingDecision,
    RoutingRequest,
)

TOTAL = "total"
PENDING_SCORES: Mapping[EndpointKey, Mapping[str, float]] = types.MappingProxyType({})
"""The ``scores`` of a forced choice's decision until it settles (:meth:`Scheduler.pick`'s
``on_decided``): told apart by identity (``decision.scores is PENDING_SCORES``)."""
_ANY_CAPACITY = "scheduler.any_capacity"
"""Per-scrape key: whether some candidate is below the built-in saturation thresholds (they read
only the scraped ``waiting`` and KV use, and the thresholds are fixed per scheduler)."""


class _Forced:
    """A forced choice's pick, kept for :meth:`Scheduler.settle`: what its scoring reads."""

    __slots__ = ("candidates", "ctx", "noted", "on_decided", "removed", "stale")

    def __init__(
        self,
        ctx: CycleContext,
        candidates: Sequence[EndpointView],
        stale: int,
        removed: dict[EndpointKey, str],
        noted: bool,
        on_decided: Callable[[RoutingDecision], None],
    ) -> None:
        self.ctx = ctx
        self.candidates = candidates
        self.stale = stale
        self.removed = removed
        self.noted = noted
        self.on_decided = on_decided


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class Profile:
    """One scheduling profile: what runs, in order, for each pick (in data-flow order, or an error)."""

    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker
    detector: SaturationDetector | None = None
    """Admission rule from a saturation-detector plugin; ``None``: the built-in rule (step 4 above)."""

    def __post_init__(self) -> None:
        require_data_flow_order(self.filters, [ws.scorer for ws in self.scorers], self.picker)

    def describe(self) -> dict[str, float]:
        """Scorer name -> weight (for logs, ``/readyz`` and the benchmark's reports)."""
        return {ws.scorer.name: ws.weight for ws in self.scorers}


class Scheduler:
    """The gateway's endpoint picker for one model (one ``spec.schedulers[]`` entry)."""

    def __init__(
        self,
        *,
        name: str,
        profile: Profile,
        settings: RoutingSettings | None = None,
        rng: random.Random,
        compensate_dispatches: bool = True,
    ) -> None:
        self.name = name
        self.profile = profile
        self.settings = settings or RoutingSettings()
        self.rng = rng
        self.drain = DrainTracker(window_s=self.settings.drain_window_s)
        self.ledger: DispatchLedger | None = (
            DispatchLedger(horizon_s=self.settings.stale_threshold_s) if compensate_dispatches else None
        )
        """Own dispatches not yet visible in a scrape (see :mod:`igw.scheduling.dispatch_ledger`);
        ``None`` leaves ``unreflected_dispatches`` at 0."""
        self.outliers = OutlierDetector(self.settings.outlier_detection)
        """Endpoints ejected for failing the requests sent to them (:mod:`igw.scheduling.outliers`)."""
        self.responses = ResponseAffinity()
        """Which endpoint stored which response (:mod:`igw.scheduling.response_affinity`)."""
        self._scrape = ScrapeCache()
        """Values derived from the candidates' scrapes, kept between picks (:class:`ScrapeCache`)."""
        self._profile_weights = tuple([ws.weight for ws in profile.scorers])
        self._profile_names = tuple([ws.scorer.name for ws in profile.scorers])
        self._profile_kernel = _sum_kernel(self._profile_weights) if self._profile_weights else None
        """The weighted sum of a pick where every scorer of the profile scored (the usual case)."""
        self._profile_rows = (
            _rows_kernel(self._profile_names, self._profile_weights)
            if self._profile_weights and not NATIVE_SUM
            else None
        )
        """The decision's score rows of such a pick (:func:`_rows_kernel`); ``None`` in the compiled
        build, where the pick calls :func:`_native_rows_of` instead."""
        self._left_out_kernels: dict[tuple[int, ...], tuple[Callable[..., list[float]], _RowsKernel]] = {}
        """The weighted sum and the score rows of a pick where the profile's scorers at these
        positions scored nothing (e.g. ``prefill-admission-scorer``, which abstains on short
        prompts), made on first use: the kernels for the remaining scorers, without a look-up."""
        self._left_out_columns: dict[tuple[int, ...], tuple[tuple[str, ...], tuple[float, ...]]] = {}
        """The names and weights of such a pick's columns, for the compiled build's direct native
        sum and rows (:meth:`_left_out_named`)."""
        self._fallback_scorer = InflightScorer(name="active-request-scorer(all-stale fallback)")
        self._plugins: tuple[Plugin, ...] = (
            *profile.filters,
            *(ws.scorer for ws in profile.scorers),
            profile.picker,
        )
        self._on_picked = tuple(p for p in self._plugins if _overrides(p, "on_picked"))
        """The plugins whose ``on_picked`` does something (most inherit the no-op of PluginHooks)."""
        self._on_not_sent = tuple(
            p
            for p in self._plugins
            if callable(getattr(p, "on_not_sent", None)) and _overrides(p, "on_not_sent")
        )
        """The plugins that take back, or move, a pick not sent where it was picked (``on_not_sent``:
        the prefix index and the plugins counting picks in flight), told by :meth:`release_dispatch`
        and :meth:`move_dispatch`."""
        self._on_complete = tuple(p for p in self._plugins if _overrides(p, "on_complete"))
        """The plugins whose ``on_complete`` does something, in profile order (the others' no-op
        calls cost a Python call each per outcome, for nothing)."""
        self._model_missing = tuple(
            p
            for p in self._plugins
            if callable(getattr(p, "on_model_missing", None)) and _overrides(p, "on_model_missing")
        )
        """The plugins that remember which endpoint lacks which adapter (``on_model_missing``)."""
        self._first_token_plugins = tuple(
            p for p in self._plugins if isinstance(p, FirstTokenObserver) and _overrides(p, "on_first_token")
        )
        """Plugins with an ``on_first_token`` hook that does something (any defining one that does not
        derive from PluginHooks; plugins written to the bare :class:`Plugin` protocol may lack it): not
        the no-op inherited from PluginHooks, an interpreted call per plugin per stream for nothing
        (``framework`` stays interpreted in the compiled build)."""
        self._model_missing_notes = _ModelMissingNotes(self) if self._model_missing else None
        """Shares ``on_model_missing`` with the other workers (``None``: no plugin keeps it)."""
        self._event_sharers: tuple[object, ...] = (self.outliers, self._model_missing_notes, self.responses)
        """Sharers whose notes are events sent as they happen (an ejection, a 404 for an adapter),
        not notes of each pick: learned like the others, left out of the per-pick outbox."""
        self._sharing = sharing_plugins(
            p
            for p in (*self._plugins, self.ledger, self.outliers, self._model_missing_notes, self.responses)
            if p is not None
        )
        """The plugins that share their picks, by name, found once (the profile's plugins do not
        change): an ``isinstance`` check against the runtime-checkable ``SharesPicks`` protocol walks
        the protocol's attributes, which learning each batch of the other workers' notes paid again
        for every plugin."""
        self.pick_notes: PickNoteOutbox | None = None
        """Where each pick's notes for the other workers go (``igw serve --workers``, see
        :mod:`igw.scheduling.pick_notes`); ``None``: not noted."""
        self._unsettled: tuple[CycleContext, EndpointView, bool] | None = None
        """The last pick's own bookkeeping (the ledger's record, ``on_picked``, the pick notes when
        the third item is true) when that pick was made with ``settle_later``: still to run, by
        :meth:`settle`."""
        self._forced: _Forced | None = None
        """The last pick's scoring and bookkeeping when it was a forced choice made with
        ``on_decided``: still to run, by :meth:`settle`."""
        self._settle_later = False
        """The ``settle_later`` of the pick running (set by every :meth:`pick`)."""
        self._forced_exact = type(profile.picker) is MaxScorePicker
        """Whether a forced choice may wait: the max-score picker ranks one candidate without a
        draw, so its ranking can run later without moving anyone else's draws on the shared random
        stream (the random pickers draw even for one candidate, so theirs must run in order)."""

    def share_picks(self) -> PickNoteOutbox:
        """Note every later pick from a pool of more than one endpoint for the other workers
        (``igw serve --workers``; see :mod:`igw.scheduling.pick_notes`, "Which pools note"); the
        outbox the notes collect in, the same one on every call."""
        self.settle()
        if self.pick_notes is None:
            self.pick_notes = PickNoteOutbox(
                p for p in self._sharing.values() if not any(p is e for e in self._event_sharers)
            )
        return self.pick_notes

    def move_dispatch(
        self,
        source: EndpointKey,
        target: EndpointKey,
        *,
        now: float,
        request_id: str | None = None,
        sent_to: EndpointView | None = None,
    ) -> None:
        """The last pick's dispatch to ``source`` went to ``target`` instead (flow control steered
        it): the dispatch ledger counts it at ``target``, and so does the ledger's pick note, still in
        the outbox, so the other workers' ledgers agree with this one's (they counted phantom load on
        ``source`` and none on ``target`` until the next scrapes).

        With ``request_id`` (the pick's ``RoutingRequest.request_id``) and ``sent_to`` (``target``'s
        view), the plugins with ``on_not_sent`` move the pick too, and so do their notes still in the
        outbox: the prefix index places the prompt on the pod that got it, not on the pod that never
        saw it (until session s41 it stayed on ``source``, and the next requests with that prefix
        were sent there), and the plugins that count picks in flight count it at ``target`` (the
        backlog scorer's fit learns the first token of the pod that served it). The plugins
        without the hook keep ``source``. Also called when the connection to ``source`` failed and
        the request went to the next candidate (``igw.gateway.inference``)."""
        self.settle()
        if request_id is not None and sent_to is not None:
            for plugin in self._on_not_sent:
                moved = plugin.on_not_sent(request_id, source, sent_to=sent_to)  # type: ignore[attr-defined]
                if moved and self.pick_notes is not None:
                    self.pick_notes.retarget(plugin.name, source, target)
        if self.ledger is None:
            return
        self.ledger.move(source, target, now=now)
        if self.pick_notes is not None:
            self.pick_notes.retarget(self.ledger.name, source, target)

    def release_dispatch(self, key: EndpointKey, *, now: float, request_id: str | None = None) -> None:
        """A pick's dispatch to ``key`` that was never sent (flow control picked for a queued request
        and then left it queued, or handed it its pick in the loop turn its client went away): the
        dispatch ledger forgets it, and its pick note is withdrawn while still in the outbox, so
        neither this worker's saturation and flow control nor the other workers' count phantom load
        on ``key`` until its next scrape (a note already sent stays counted there until then).

        With ``request_id`` (the pick's ``RoutingRequest.request_id``) the plugins with
        ``on_not_sent`` take the pick back too, and their notes still in the outbox are withdrawn:
        the prefix index no longer places the prompt on a pod that never saw it, and the plugins
        that count picks in flight (backlog, prefill work, answers, adapter requests) no longer count
        one whose outcome will never come. The plugins without the hook keep the pick. Also called
        when no attempt of the request could connect (``igw.gateway.inference``)."""
        self.settle()
        if request_id is not None:
            for plugin in self._on_not_sent:
                taken = plugin.on_not_sent(request_id, key, sent_to=None)  # type: ignore[attr-defined]
                if taken and self.pick_notes is not None:
                    self.pick_notes.withdraw(plugin.name, key)
        if self.ledger is None:
            return
        self.ledger.release(key, now=now)
        if self.pick_notes is not None:
            self.pick_notes.withdraw(self.ledger.name, key)

    def record_dispatch(self, key: EndpointKey, *, now: float) -> None:
        """A dispatch to ``key`` that no pick chose (flow control sent a saturated pick's request to
        an engine that preempts a lower band for it): the dispatch ledger counts it, and its note
        goes to the other workers as a pick's would, so their ledgers count it too (their flow
        control and saturation detection read those counts). Noted whatever the pool's size: it is
        rare, and a one-endpoint pool's flow control reads the same count."""
        self.settle()
        if self.ledger is None:
            return
        self.ledger.record(key, now=now)
        if self.pick_notes is not None:
            self.pick_notes.add(now, self.ledger.name, key, now)

    def pick_sent(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointView],
        key: EndpointKey,
        *,
        now: float,
        on_decided: Callable[[RoutingDecision], None] | None = None,
    ) -> bool:
        """A request sent to ``key``, one of ``endpoints`` (this scheduler's pool), that no pick of
        this scheduler chose (a continuation's search asked a pod of another canary version's pool,
        ``igw.gateway.inference``): picked as a pick among ``key`` alone would be, so its bookkeeping
        is a pick's - the dispatch ledger, every plugin's ``on_picked`` (the prefix index places the
        prompt there, the backlog counts it in flight) and, in a pool of more than one endpoint, the
        pick notes. Until session s49 only the ledger counted it (:meth:`record_dispatch`), and the
        next request with that prompt drawn to this pool was not steered to the pod that cached it.

        ``False`` when the pick would not choose ``key`` (a filter or outlier detection leaves it
        out, or it is saturated): the ledger alone counts it, as :meth:`record_dispatch`. Taken back
        like a pick, by :meth:`release_dispatch` with ``request.request_id``.

        ``on_decided``: told that pick's decision, whatever it chose (the gateway's decision log
        records it as the pick of a pod asked alone); not called when ``key`` is not in
        ``endpoints``."""
        self.settle()
        only = [e for e in endpoints if e.key == key]
        if only:
            self._settle_later = False
            decision = self._pick(request, only, now=now, noted_alone=len(endpoints) > 1)
            if on_decided is not None:
                on_decided(decision)
            if decision.kind is DecisionKind.PICKED and decision.endpoint == key:
                return True
        self.record_dispatch(key, now=now)
        return False

    def learn_picks(
        self, notes: Sequence[Sequence[object]], *, now: float, counts: LearnCounts | None = None
    ) -> LearnCounts:
        """Teach this scheduler's sharing plugins another worker's pick notes; notes older than the
        stale threshold are dropped (see :mod:`igw.scheduling.pick_notes`)."""
        self.settle()
        return learn_notes(
            self._sharing, notes, now=now, max_age_s=self.settings.stale_threshold_s, counts=counts
        )

    def is_fresh(self, endpoint: EndpointView, now: float) -> bool:
        if endpoint.metrics is None or endpoint.scraped_at is None or endpoint.scrape_failing:
            return False
        return now - endpoint.scraped_at <= self.settings.stale_threshold_s

    def utilisation(self, endpoints: Sequence[EndpointView], *, now: float) -> float:
        """The pool's load as a fraction of its saturation point (1.0: saturated), read by flow
        control's per-band headroom (``dispatchBelow``).

        With a saturation-detector plugin: its level over the fresh endpoints. Otherwise the mean over
        fresh endpoints of ``max((waiting + unreflected dispatches) / (queue threshold + 1), KV / KV
        threshold)``, each capped at 1 - so 1.0 exactly when the built-in rule finds no endpoint with
        spare capacity, and dispatches the scrapes have not shown yet count as queued (a burst is not
        let through on stale pages). No fresh endpoint: 1.0.
        """
        self.settle()  # the ledger's dispatches count
        if self.outliers.ejected:  # an ejected endpoint takes no requests: its idleness is no headroom
            endpoints = self.outliers.admit(endpoints, now=now)
        fresh = [e for e in endpoints if self.is_fresh(e, now)]
        if not fresh:
            return 1.0
        if self.ledger is not None:
            fresh = self.ledger.annotate(fresh, now=now)
        detector = self.profile.detector
        if detector is not None:
            return min(1.0, detector.saturation(fresh, now=now))
        s = self.settings
        slots = s.queue_depth_threshold + 1
        kv_thr = s.kv_cache_util_threshold
        total = 0.0
        for e in fresh:
            m = e.metrics
            assert m is not None  # fresh endpoints have metrics
            queued = max(0, m.waiting or 0) + max(0, e.unreflected_dispatches)
            load = queued / slots
            if m.kv_usage is not None and kv_thr > 0:
                load = max(load, m.kv_usage / kv_thr)
            total += min(1.0, load)
        return total / len(fresh)

    def pick(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointView],
        *,
        now: float,
        settle_later: bool = False,
        on_decided: Callable[[RoutingDecision], None] | None = None,
    ) -> RoutingDecision:
        """Pick an endpoint for ``request`` (the module docstring's steps).

        ``settle_later``: the pick's own bookkeeping - the dispatch ledger's record, every plugin's
        ``on_picked``, the pick notes - is kept, not run, until :meth:`settle`; a caller that sends
        the request first takes that work off the request's way to the model server (``igw serve``:
        off a streamed request's time to first token). Every later call on this scheduler that
        reads or changes what the bookkeeping changes (the next pick, ``on_first_token``,
        ``on_complete``, ``on_endpoints_removed``, ``utilisation``, the pick sharing) settles first,
        so each of them finds the same state, and each pick makes the same decision, as without it.
        Direct reads of ``ledger`` or a plugin's state in between see the pick not yet recorded.

        ``on_decided`` (with ``settle_later``): the forced choice. When the filters leave exactly
        one candidate with capacity and the picker is the max-score one, no score can change the
        choice, so the pick returns that candidate at once - a decision whose ``scores`` is
        :data:`PENDING_SCORES`, with no fallbacks and no reason - and the scoring, the ranking and
        the bookkeeping run at :meth:`settle`, which hands the complete decision (the one the pick
        would have returned) to ``on_decided``. Every other pick returns its complete decision and
        does not call ``on_decided``."""
        if self._unsettled is not None or self._forced is not None:
            self.settle()
        self._settle_later = settle_later  # read by _score_and_pick; every pick sets it
        if settle_later and on_decided is not None and self._forced_exact:
            return self._pick(request, endpoints, now=now, on_decided=on_decided)
        return self._pick(request, endpoints, now=now)

    def settle(self) -> None:
        """Run what the last pick made with ``settle_later`` left to run (its bookkeeping; for a
        forced choice its scoring too, then its ``on_decided``), if still due."""
        forced = self._forced
        if forced is not None:
            self._forced = None
            decision = self._score_and_pick(
                forced.ctx,
                forced.candidates,
                self.profile.scorers,
                stale=forced.stale,
                removed=forced.removed,
                noted=forced.noted,
            )
            forced.on_decided(decision)
        unsettled = self._unsettled  # a forced choice's bookkeeping too (its pick's settle_later)
        if unsettled is not None:
            self._unsettled = None
            self._picked(*unsettled)

    def _picked(self, ctx: CycleContext, chosen: EndpointView, noted: bool) -> None:
        """A pick's own bookkeeping: the ledger's record, ``on_picked``, the pick notes."""
        if self.ledger is not None:
            self.ledger.record(chosen.key, now=ctx.now)
        for plugin in self._on_picked:
            plugin.on_picked(ctx, chosen)
        if noted and self.pick_notes is not None:
            self.pick_notes.record(ctx, chosen)

    def _pick(
        self,
        request: RoutingRequest,
        endpoints: Sequence[EndpointView],
        *,
        now: float,
        on_decided: Callable[[RoutingDecision], None] | None = None,
        noted_alone: bool = False,
    ) -> RoutingDecision:
        """:meth:`pick`'s steps; ``noted_alone``: the pick is noted for the other workers even from
        one endpoint (:meth:`pick_sent`: one endpoint of a larger pool)."""
        if not endpoints:
            return RoutingDecision(kind=DecisionKind.NO_ENDPOINTS, reason="no endpoints discovered")
        removed: dict[EndpointKey, str] = {}
        if request.previous_response_id is not None and len(endpoints) > 1:
            # A continuation: only the endpoint that stored the response can answer it.
            holder = self.responses.endpoint_of(request.previous_response_id)
            if holder is not None:
                pinned = [e for e in endpoints if e.key == holder]
                if pinned:
                    _note_removed(removed, endpoints, pinned, "the previous response is stored elsewhere")
                    endpoints = pinned
        # Notes only where another worker's pick could differ: a pool of one endpoint (as discovered,
        # before any per-request narrowing) leaves every worker's pick to that endpoint alone, so its
        # notes would change no ranking (see pick_notes, "Which pools note"). Checked per pick, so
        # the notes resume as soon as the pool grows.
        noted = self.pick_notes is not None and (len(endpoints) > 1 or noted_alone)
        fits = fitting(request, endpoints)  # before everything, the all-stale fallback included
        if len(fits) != len(endpoints):
            _note_removed(removed, endpoints, fits, "context window too small")
        endpoints = fits
        if not endpoints:
            return RoutingDecision(
                kind=DecisionKind.NO_ENDPOINTS,
                reason=f"no endpoint's context window holds {tokens_needed(request)} tokens",
                removed=removed,
            )
        if self.outliers.ejected:  # one attribute read while nothing is ejected
            admitted = self.outliers.admit(endpoints, now=now)
            if len(admitted) != len(endpoints):
                _note_removed(removed, endpoints, admitted, "ejected: failed requests in a row")
            endpoints = admitted
        if request.avoid:  # this very request failed there moments ago: another endpoint, if any
            elsewhere = [e for e in endpoints if e.key not in request.avoid]
            if elsewhere:
                _note_removed(removed, endpoints, elsewhere, "this request failed there moments ago")
                endpoints = elsewhere
        # Positionally, with its fresh state dict (keywords and the default factory cost twice).
        ctx = CycleContext(request, now, self.rng, {}, self._scrape)
        threshold = self.settings.stale_threshold_s
        # is_fresh, inlined: this runs once per endpoint per request.
        fresh = [
            e
            for e in endpoints
            if (scraped_at := e.scraped_at) is not None
            and now - scraped_at <= threshold
            and e.metrics is not None
            and not e.scrape_failing
        ]
        if not fresh:
            return self._pick_all_stale(ctx, endpoints, removed, noted=noted)
        if len(fresh) != len(endpoints):
            _note_removed(removed, endpoints, fresh, "stale or failing metrics")
        if self.ledger is not None:
            fresh = self.ledger.annotate(fresh, now=now)
        candidates = fresh
        for f in self.profile.filters:
            kept = f.filter(ctx, candidates)
            if len(kept) != len(candidates):
                _note_removed(removed, candidates, kept, f"filter {f.name}")
            candidates = kept
            if not candidates:
                return RoutingDecision(
                    kind=DecisionKind.NO_ENDPOINTS,
                    reason=f"filter {f.name!r} removed every endpoint",
                    removed=removed,
                )
        s = self.settings
        q_thr, kv_thr = s.queue_depth_threshold, s.kv_cache_util_threshold
        detector = self.profile.detector
        if detector is not None:
            level = detector.saturation(candidates, now=now)
            if level >= 1.0:
                retry = retry_after_seconds(candidates, drain=self.drain, now=now, queue_threshold=q_thr,
                                            min_s=s.retry_after_min_s, max_s=s.retry_after_max_s)  # fmt: skip
                return RoutingDecision(
                    kind=DecisionKind.SATURATED,
                    retry_after_s=float(retry),
                    reason=f"{detector.name}: saturation {level:.2f} >= 1.0 over {len(candidates)} endpoints",
                    removed=removed,
                )
        elif not ctx.columns(candidates).per_scrape(
            (_ANY_CAPACITY, q_thr, kv_thr),
            lambda: any(has_capacity(e, queue_threshold=q_thr, kv_threshold=kv_thr) for e in candidates),
        ):
            retry = retry_after_seconds(
                candidates,
                drain=self.drain,
                now=now,
                queue_threshold=q_thr,
                min_s=s.retry_after_min_s,
                max_s=s.retry_after_max_s,
            )
            return RoutingDecision(
                kind=DecisionKind.SATURATED,
                retry_after_s=float(retry),
                reason=f"all {len(candidates)} fresh endpoints are over queue {q_thr} or KV {kv_thr}",
                removed=removed,
            )
        stale = len(endpoints) - len(fresh)
        if on_decided is not None and len(candidates) == 1:
            # The forced choice: the one candidate is the pick whatever it scores (see pick).
            self._forced = _Forced(ctx, candidates, stale, removed, noted, on_decided)
            return _decision(DecisionKind.PICKED, candidates[0].key, (), PENDING_SCORES, None, "", removed)
        return self._score_and_pick(
            ctx,
            candidates,
            self.profile.scorers,
            stale=stale,
            removed=removed,
            noted=noted,
        )

    def _pick_all_stale(
        self,
        ctx: CycleContext,
        endpoints: Sequence[EndpointView],
        removed: dict[EndpointKey, str],
        *,
        noted: bool,
    ) -> RoutingDecision:
        decision = self._score_and_pick(
            ctx,
            endpoints,
            (WeightedScorer(self._fallback_scorer, 1.0),),
            stale=0,
            removed=removed,
            noted=noted,
        )
        return RoutingDecision(
            kind=decision.kind,
            endpoint=decision.endpoint,
            fallbacks=decision.fallbacks,
            scores=decision.scores,
            removed=removed,
            reason=f"all {len(endpoints)} endpoints have stale or failing metrics: "
            "ranked by the gateway's own in-flight counts",
        )

    def _score_and_pick(
        self,
        ctx: CycleContext,
        candidates: Sequence[EndpointView],
        scorers: Sequence[WeightedScorer],
        *,
        stale: int,
        removed: Mapping[EndpointKey, str] | None = None,
        noted: bool = False,
    ) -> RoutingDecision:
        """Score ``candidates``, pick, and tell the pick's plugins (and, when ``noted``, the other
        workers through :attr:`pick_notes`)."""
        n = len(candidates)
        value_lists: list[list[float]] = []
        notes: list[str] = []
        left_out: list[int] | None = None
        for position, ws in enumerate(scorers):
            scorer = ws.scorer
            raw = scorer.score(ctx, candidates)
            if type(raw) is UnitScores:  # vouched complete and in range: no checks
                values: list[float] = raw  # type: ignore[assignment]  # holds no None (UnitScores)
            else:
                checked = _checked_scores(raw, n, scorer, notes)
                if checked is None:
                    if left_out is None:
                        left_out = [position]
                    else:
                        left_out.append(position)
                    continue
                values = checked
            value_lists.append(values)
        # (name, weight, values) of each scorer that scored: made only where the profile's kernels
        # do not serve (another scorer list, a NaN to clamp, the general rows loop).
        columns: list[tuple[str, float, list[float]]] | None = None
        rows: _RowsKernel | None = None
        # Compiled build: the names and weights of the columns scored, summed and made into rows
        # by direct native calls (not through the kernels' ``functools.partial``).
        native: tuple[tuple[str, ...], tuple[float, ...]] | None = None
        if scorers is not self.profile.scorers or self._profile_kernel is None:
            columns = _named_columns(scorers, left_out, value_lists)
            totals = _weighted_sum(columns, n)
        elif left_out is None:
            if NATIVE_SUM:
                native = (self._profile_names, self._profile_weights)
                totals = _native_sum_of(self._profile_weights, value_lists)
            else:
                totals = self._profile_kernel(*value_lists)  # every scorer scored: the profile's kernel
                rows = self._profile_rows
        elif value_lists:
            positions = tuple(left_out)
            if NATIVE_SUM:
                native = self._left_out_columns.get(positions) or self._left_out_named(positions)
                totals = _native_sum_of(native[1], value_lists)
            else:
                total_kernel, rows = self._left_out_kernels.get(positions) or self._left_out_kernel(positions)
                totals = total_kernel(*value_lists)
        else:
            totals = [0.0] * n  # no scorer scored: what _weighted_sum gives for no columns
        check = sum(totals)
        if check != check:  # NaN: some column held a NaN the range check let through
            if columns is None:
                columns = _named_columns(scorers, left_out, value_lists)
            columns = [(name, w, _clamped(values)) for name, w, values in columns]
            value_lists = [values for _, _, values in columns]
            totals = _weighted_sum(columns, n)
        ranked = self.profile.picker.rank(ctx, totals)
        chosen = candidates[ranked[0]]
        if self._settle_later:
            self._unsettled = (ctx, chosen, noted)
        else:
            self._picked(ctx, chosen, noted)
        scores: dict[EndpointKey, dict[str, float]]
        if rows is not None:
            scores = rows(candidates, ranked, totals, *value_lists)
        elif native is not None:
            scores = _native_rows_of(native[0], native[1], candidates, ranked, totals, value_lists)
        else:
            if columns is None:
                columns = _named_columns(scorers, left_out, value_lists)
            scores = {}
            for i in ranked:
                row = scores[candidates[i].key] = {name: w * vals[i] for name, w, vals in columns}
                row[TOTAL] = totals[i]
        if stale:
            notes.append(f"{stale} stale endpoints excluded")
        return _decision(
            DecisionKind.PICKED,
            chosen.key,
            tuple([candidates[i].key for i in ranked[1:]]) if len(ranked) > 1 else (),
            scores,
            None,
            "; ".join(notes) if notes else "",
            removed if removed is not None else {},
        )

    def _left_out_kernel(self, left_out: tuple[int, ...]) -> tuple[Callable[..., list[float]], _RowsKernel]:
        """The profile's weighted sum and score rows without the columns at ``left_out`` (kept per
        scheduler)."""
        kernels = self._left_out_kernels.get(left_out)
        if kernels is None:
            weights = tuple([w for i, w in enumerate(self._profile_weights) if i not in left_out])
            names = tuple([m for i, m in enumerate(self._profile_names) if i not in left_out])
            kernels = self._left_out_kernels[left_out] = (_sum_kernel(weights), _rows_kernel(names, weights))
        return kernels

    def _left_out_named(self, left_out: tuple[int, ...]) -> tuple[tuple[str, ...], tuple[float, ...]]:
        """The names and weights of the profile's columns without those at ``left_out`` (kept per
        scheduler): what the compiled build sums and makes rows of by direct native calls."""
        named = self._left_out_columns.get(left_out)
        if named is None:
            weights = tuple([w for i, w in enumerate(self._profile_weights) if i not in left_out])
            names = tuple([m for i, m in enumerate(self._profile_names) if i not in left_out])
            named = self._left_out_columns[left_out] = (names, weights)
        return named

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        if self._unsettled is not None or self._forced is not None:
            self.settle()
        self.drain.record(outcome.endpoint, now)
        if self.ledger is not None:
            self.ledger.on_complete(outcome)
        if outcome.pod_fault:
            self._failed(outcome.endpoint, now, outcome.request_digest)
        elif outcome.ok:
            self.outliers.succeeded(outcome.endpoint)
            if outcome.response_id is not None:
                self.remember_response(outcome.response_id, outcome.endpoint, now=now)
        for plugin in self._on_complete:
            plugin.on_complete(outcome, now=now)

    def remember_response(self, response_id: str, endpoint: EndpointKey, *, now: float) -> None:
        """``endpoint`` stores the response ``response_id`` (it answered the request that made it, or
        a search for it): its continuations go there, here and in the group's other workers."""
        self.responses.remember(response_id, endpoint)
        if self.pick_notes is not None:
            self.pick_notes.add(now, self.responses.name, endpoint, [response_id])

    def disown_response(self, response_id: str, endpoint: EndpointKey, *, now: float) -> None:
        """``endpoint``, remembered as ``response_id``'s, answered its retrieval with another response:
        forgotten there, here and (when it was remembered here) in the group's other workers."""
        if self.responses.disown(response_id, endpoint) and self.pick_notes is not None:
            self.pick_notes.add(now, self.responses.name, endpoint, [response_id, DISOWNED])

    @property
    def retry_policy(self) -> RetryPolicy:
        """The retries ``igw serve`` makes behind this scheduler (its ``retry`` settings; the DES's
        :class:`~igw.scheduling.types.RetryingPolicy`)."""
        return self.settings.retry

    def on_connect_failed(self, key: EndpointKey, *, now: float) -> None:
        """``key`` refused (or did not accept in time) the connection of a request it was picked for:
        a failure for outlier detection (the request itself goes to the next candidate)."""
        self.settle()
        self._failed(key, now)

    def _failed(self, key: EndpointKey, now: float, digest: int | None = None) -> None:
        """Outlier detection counts a failure of ``key`` (of the request ``digest``, when given); an
        ejection it makes goes to the other workers' schedulers too (``igw serve --workers``)."""
        ejection = self.outliers.failed(key, now=now, digest=digest)
        if ejection is not None and self.pick_notes is not None:
            self.pick_notes.add(now, self.outliers.name, key, list(ejection))

    def on_model_missing(self, key: EndpointKey, model: str, *, now: float) -> None:
        """``key`` answered 404 to a request for the LoRA adapter ``model`` (it does not serve it):
        the plugins that steer adapter requests remember it (``lora-slot-filter``)."""
        self.settle()
        self._tell_model_missing(key, model, now=now)
        if self._model_missing_notes is not None and self.pick_notes is not None:
            self.pick_notes.add(now, self._model_missing_notes.name, key, [model, now])

    def models_missing(self, now: float) -> list[tuple[EndpointKey, str, float]]:
        """Every 404 for an adapter a plugin still remembers at ``now`` (``missing_in_force``), as
        ``(endpoint, adapter, when it was answered)``, the latest per pair: the memory a worker of a
        group that joins late is told (:mod:`igw.gateway.pick_share`)."""
        latest: dict[tuple[EndpointKey, str], float] = {}
        for plugin in self._model_missing:
            in_force = getattr(plugin, "missing_in_force", None)
            if callable(in_force):
                for key, model, at in in_force(now):
                    latest[(key, model)] = max(at, latest.get((key, model), at))
        return sorted((key, model, at) for (key, model), at in latest.items())

    def _tell_model_missing(self, key: EndpointKey, model: str, *, now: float) -> None:
        for plugin in self._model_missing:
            plugin.on_model_missing(key, model, now=now)  # type: ignore[attr-defined]

    def on_first_token(self, outcome: RequestOutcome, *, now: float) -> None:
        """A dispatched request's first token arrived (``outcome.ttft_s``); ``on_complete`` follows."""
        if self._unsettled is not None or self._forced is not None:
            self.settle()
        for plugin in self._first_token_plugins:
            plugin.on_first_token(outcome, now=now)

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        """Every plugin of the profile (filters, scorers, picker, ...), once each."""
        return self._plugins

    def bound_indexes(self, blocks: int | None) -> None:
        """Share ``blocks`` equally among the plugins whose state grows with the pool
        (:class:`~igw.scheduling.framework.BoundedIndex`); ``None`` lifts the bound."""
        bounded = [p for p in self._plugins if isinstance(p, BoundedIndex)]
        for plugin in bounded:
            plugin.bound_index(None if blocks is None else max(1, blocks // len(bounded)))

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        self.settle()
        for key in keys:
            self.drain.forget(key)
        self.outliers.forget(keys)
        self.responses.forget(keys)
        if self.ledger is not None:
            self.ledger.forget(keys)
        for plugin in self._plugins:
            plugin.on_endpoints_removed(keys)


MODEL_MISSING_NOTES: Final = "@model-missing"
"""The name a 404 for an adapter travels under between the workers of a group (not a plugin's)."""


class _ModelMissingNotes:
    """What :meth:`Scheduler.on_model_missing` learned, for the other workers' schedulers (as outlier
    detection shares its ejections): a note ``[model, when]`` per 404, which another worker takes in
    as if its own request had been answered so. Without it each worker of a group paid its own 404
    per pod and adapter."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.name = MODEL_MISSING_NOTES
        self._scheduler = scheduler

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """Picks teach it nothing: its notes are sent as the 404s arrive."""
        return None

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """``note`` is ``[model, when]`` (``ValueError`` otherwise)."""
        if not isinstance(note, list | tuple) or len(note) != 2:
            raise ValueError(f"{MODEL_MISSING_NOTES}: a note is [model, when]")
        model, at = note
        if not isinstance(model, str) or type(at) not in (int, float) or not math.isfinite(at):
            raise ValueError(f"{MODEL_MISSING_NOTES}: a note is [model, when], a name and a finite time")
        self._scheduler._tell_model_missing(endpoint, model, now=float(at))


def _named_columns(
    scorers: Sequence[WeightedScorer], left_out: list[int] | None, value_lists: list[list[float]]
) -> list[tuple[str, float, list[float]]]:
    """``(name, weight, values)`` of each scorer that scored, in profile order: ``value_lists``
    holds one list per scorer not ``left_out``."""
    if left_out is None:
        scored: Sequence[WeightedScorer] = scorers
    else:
        scored = [ws for position, ws in enumerate(scorers) if position not in left_out]
    return [(ws.scorer.name, ws.weight, values) for ws, values in zip(scored, value_lists, strict=True)]


def _overrides(plugin: Plugin, hook: str) -> bool:
    """Whether ``plugin``'s ``hook`` is its own rather than the no-op inherited from PluginHooks (a
    plugin that does not derive from PluginHooks always counts as overriding)."""
    return getattr(type(plugin), hook, None) is not getattr(PluginHooks, hook)


def _checked_scores(
    raw: Sequence[float | None], n: int, scorer: Scorer, notes: list[str]
) -> list[float] | None:
    """A scorer's plain (not vouched) list made ready to sum: values in [0, 1] as they are, others
    clamped as :func:`clamp01` does, missing ones imputed with the mean of the present ones (and
    noted); ``None`` when no candidate has a value (noted when the scorer names its signal)."""
    if n and type(raw) is list and raw.count(None) == n:
        # No candidate scored (a scorer abstaining, e.g. prefill-admission-scorer on a short
        # prompt): one C-level count instead of the range check's raised TypeError.
        if scorer.signal:
            notes.append(f"{scorer.name}: no candidate publishes {scorer.signal}, not scored")
        return None
    in_range = _in_unit_range(raw)
    if in_range is not None:
        # Hot path (every candidate scored): values already in [0, 1] are used as they are, others
        # clamped as clamp01 does. A NaN can slip past the range check (min and max do not see it
        # reliably); it then makes the totals NaN, which the scheduler catches.
        scored: list[float] = raw  # type: ignore[assignment]  # no None: _in_unit_range said so
        return scored if in_range else _clamped(scored)
    present = [clamp01(v) for v in raw if v is not None]
    if not present:
        if scorer.signal:
            notes.append(f"{scorer.name}: no candidate publishes {scorer.signal}, not scored")
        return None
    if len(present) == n:
        return present
    mean = sum(present) / len(present)
    if scorer.signal:
        notes.append(
            f"{scorer.name}: {scorer.signal} missing on {n - len(present)} endpoints, imputed with the mean"
        )
    return [mean if v is None else clamp01(v) for v in raw]


def _in_unit_range(values: Sequence[float | None]) -> bool | None:
    """Whether every value is in [0, 1] (the usual case: scorers already return clamped values, so
    the per-value clamp can be skipped); ``None`` when a value is missing. Two C-level passes: a
    ``None`` makes ``min`` or the comparison after it raise, which is how it is detected. NaN is
    not detected here."""
    try:
        return not values or (min(values) >= 0.0 and max(values) <= 1.0)  # type: ignore[type-var,operator]
    except TypeError:
        return None


def _clamped(values: Sequence[float]) -> list[float]:
    """clamp01 of every value, inline: ``not v >= 0`` is true for negatives and NaN, both clamp to 0."""
    return [0.0 if not v >= 0.0 else 1.0 if v > 1.0 else v for v in values]


def _weighted_sum(columns: Sequence[tuple[str, float, Sequence[float]]], n: int) -> list[float]:
    """``0.0 + v1[i] * w1 + v2[i] * w2 + ...`` for every i, added left to right in column order.

    All columns in one pass over the candidates, by a kernel made for the profile's weights
    (:func:`_sum_kernel`): Python evaluates ``0.0 + a * w1 + b * w2`` as ``(0.0 + a * w1) + b * w2``,
    so the totals are bit for bit those of adding one column at a time."""
    if not columns:
        return [0.0] * n
    kernel = _sum_kernel(tuple([w for _, w, _ in columns]))
    return kernel(*[values for _, _, values in columns])


@functools.lru_cache(maxsize=256)
def _sum_kernel(weights: tuple[float, ...]) -> Callable[..., list[float]]:
    """A function adding its column arguments, weighted by ``weights``, in one comprehension.

    Why generated: one pass over every column at once costs about a quarter less than a pass per
    column (each pass builds a list of floats), and no library adds Python float lists this way
    without changing the rounding. A weight of 1.0 is left out (``v * 1.0`` is ``v`` for every
    float, NaN and infinities included); the weights themselves are bound as default arguments,
    never written into the source, so any float is safe. Cached per tuple of weights: a scheduler
    has one profile, so in practice one kernel per scheduler."""
    names = [f"c{i}" for i in range(len(weights))]
    terms = " + ".join(f"v{i}" if w == 1.0 else f"v{i} * w{i}" for i, w in enumerate(weights))
    args = ", ".join([*names, *(f"w{i}=w{i}" for i in range(len(weights)))])
    loop = ", ".join(f"v{i}" for i in range(len(weights)))
    source = (
        f"def kernel({args}):\n"
        f"    return [0.0 + {terms} for {loop}, in zip({', '.join(names)}, strict=True)]\n"
    )
    if NATIVE_SUM:
        return functools.partial(_native_weighted_sum, weights)
    namespace: dict[str, Any] = {f"w{i}": w for i, w in enumerate(weights)}
    exec(compile(source, "<igw weighted sum>", "exec"), namespace)  # the source holds names and indices only
    return cast("Callable[..., list[float]]", namespace["kernel"])


def _native_weighted_sum(weights: tuple[float, ...], *columns: list[float]) -> list[float]:
    """What :func:`_sum_kernel`'s generated function returns for ``columns``, as loops the mypyc
    build compiles to native code (:data:`NATIVE_SUM`).

    Each total is accumulated in one float, ``0.0`` and then ``+ v * w`` column by column: the
    generated comprehension's operations in its order (its ``v`` for a weight of 1.0 is ``v * 1.0``
    here, the same float for every float, NaN and infinities included), so the same floats.
    Columns of unequal length raise ``ValueError``, as its ``zip(strict=True)`` does. Why: the
    generated function is ``exec``-made, so it stays interpreted in the compiled build, where on
    a 1,000-endpoint pool it was a fifth of the pick; compiled, a total is summed in a C double,
    with one float object made per candidate instead of two per column."""
    return _native_sum_of(weights, list(columns))


def _native_sum_of(weights: tuple[float, ...], columns: list[list[float]]) -> list[float]:
    """:func:`_native_weighted_sum` of the columns in a list: what the scheduler calls directly in
    the compiled build (one native call, no ``functools.partial`` and no argument tuple)."""
    count = len(columns)
    n = len(columns[0]) if count else 0
    for column in columns:
        if len(column) != n:
            raise ValueError("weighted sum: columns of different lengths")
    totals: list[float] = []
    for i in range(n):
        total = 0.0
        for j in range(count):
            total = total + columns[j][i] * weights[j]
        totals.append(total)
    return totals


NATIVE_SUM = not isinstance(_native_weighted_sum, types.FunctionType)
"""Whether this module runs compiled (mypyc makes its functions native, not Python functions):
then :func:`_sum_kernel` hands out :func:`_native_weighted_sum`, which interpreted is slower than
the generated comprehension."""


_RowsKernel = Callable[..., dict[EndpointKey, dict[str, float]]]
"""``rows(candidates, ranked, totals, *columns)``: a decision's score rows (:func:`_rows_kernel`)."""


def _rows_kernel(names: tuple[str, ...], weights: tuple[float, ...]) -> _RowsKernel:
    """A function making a decision's ``scores`` for columns named ``names`` with ``weights``.

    For each ranked candidate ``i``, in rank order, ``{key: {name: weight * column[i], ...,
    TOTAL: totals[i]}}``: what the loop it replaces builds (``{name: w * vals[i] for ...}``, then
    ``row[TOTAL] = totals[i]``) as one dict display per row, whose keys are inserted in the same
    order with the same override rules (a repeated name or key keeps its first position and takes
    its last value). Why generated: per decision the display saves the comprehension's per-column
    tuple unpacking and its call. Every weight is multiplied, 1.0 included (``1.0 * v`` is kept
    exactly as before); names and weights are bound as default arguments, never written into the
    source. Interpreted build only: the compiled build's pick calls :func:`_native_rows_of`, the
    same rows (see there), since an ``exec``-made function stays interpreted there."""
    count = len(names)
    entries = ", ".join(f"n{i}: w{i} * c{i}[i]" for i in range(count))
    columns = "".join(f", c{i}" for i in range(count))
    bound = "".join(f", n{i}=n{i}, w{i}=w{i}" for i in range(count))
    source = (
        f"def rows(candidates, ranked, totals{columns}{bound}, total=total):\n"
        f"    return {{candidates[i].key: {{{entries}, total: totals[i]}} for i in ranked}}\n"
    )
    namespace: dict[str, Any] = {"total": TOTAL}
    namespace.update({f"n{i}": name for i, name in enumerate(names)})
    namespace.update({f"w{i}": w for i, w in enumerate(weights)})
    exec(compile(source, "<igw score rows>", "exec"), namespace)  # the source holds names and indices only
    return cast("_RowsKernel", namespace["rows"])


def _native_rows_of(
    names: tuple[str, ...],
    weights: tuple[float, ...],
    candidates: Sequence[EndpointView],
    ranked: list[int],
    totals: list[float],
    columns: list[list[float]],
) -> dict[EndpointKey, dict[str, float]]:
    """What :func:`_rows_kernel`'s generated function returns for ``columns``, as loops the mypyc
    build compiles to native code: what the scheduler calls directly in the compiled build (as
    :func:`_native_sum_of`; where :data:`NATIVE_SUM`).

    Each row's keys are inserted one by one in the display's order (the names, then ``TOTAL``), and
    each row is stored under its candidate's key in rank order: a repeated name or key keeps its
    first position and takes its last value, as in the display and the comprehension; each score is
    the same product ``weight * column[i]``. Why: the generated function is ``exec``-made, so in
    the compiled build it ran interpreted (two Python frames, the function and its comprehension)
    on every pick."""
    count = len(names)
    out: dict[EndpointKey, dict[str, float]] = {}
    for i in ranked:
        row: dict[str, float] = {}
        for j in range(count):
            row[names[j]] = weights[j] * columns[j][i]
        row[TOTAL] = totals[i]
        out[candidates[i].key] = row
    return out


_decision = slot_constructor(RoutingDecision)
"""``RoutingDecision(kind, endpoint, fallbacks, scores, retry_after_s, reason, removed)`` by slot
writes (:mod:`igw.scheduling.slot_init`): made once per pick."""


def _note_removed(
    removed: dict[EndpointKey, str],
    before: Sequence[EndpointView],
    after: Sequence[EndpointView],
    why: str,
) -> None:
    """Record which endpoints a step dropped (called only when it dropped some: no hot-path cost)."""
    kept = {e.key for e in after}
    for e in before:
        if e.key not in kept:
            removed.setdefault(e.key, why)
