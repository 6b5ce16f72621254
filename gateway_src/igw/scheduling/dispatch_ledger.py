"""Staleness compensation: count the router's own dispatches that a scrape cannot show yet.

Why: every pick between two scrapes of an endpoint sees the *same* snapshot, and an engine shows a
new request in ``waiting`` only after it has received it. A deterministic max-score picker therefore
sends every request of that window to the same "best" pod (herding; docs/scheduler-design.md has
the measurement). Serious routers account for their
own dispatches since the snapshot; so does this layer.

Per endpoint the ledger annotates the view with ``unreflected_dispatches``: requests this router
dispatched there at or after ``scraped_at`` *and* less than the endpoint's measured time to first
token ago (an exponentially weighted mean of ``RequestOutcome.ttft_s``). A request older than its
endpoint's TTFT has most likely been scheduled already, so counting it as waiting would over-penalise
fast endpoints: an H100 admits a request far sooner than an A10G, so it carries it for less time.
Without a TTFT measurement yet, every dispatch since the scrape counts.

The scraped metrics themselves are left untouched, so the GIE scorers (queue, KV, prefix, LoRA) keep
their documented semantics; the speed-aware ``predicted-ttft-scorer`` (``predictedLatency``) is the
scorer that reads the annotation. Entries are dropped as soon as a scrape at or after their dispatch
time arrives (the engine then reports them itself), or after ``horizon_s`` for an endpoint that is
no longer scraped, so memory stays bounded without any completion callback.

With ``igw serve --workers N`` every worker's ledger also counts the other workers' dispatches: the
ledger shares its picks (:class:`~igw.scheduling.framework.SharesPicks`; the note is the pick's
time, nothing of the request) and the workers exchange them every few milliseconds
(:mod:`igw.scheduling.pick_notes`). Without it each worker's ledger saw an eighth of the dispatches
since a scrape with eight workers, and they herded onto the same pod between scrapes: in the DES a
ledger shared outright brought eight workers' TTFT p99 on shared-prefix-8b-high-cache from 1.58× to
1.02× one worker's (docs/gateway.md, "Routing quality with N in-flight ledgers", round 8).

Cost: each endpoint's dispatch times are kept sorted, so pruning and counting are binary searches
(``bisect``) rather than a walk over every dispatch since the scrape; a pick costs the same whether
an endpoint got two dispatches since its scrape or two hundred.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Sequence
from typing import cast

from igw.scheduling.cycle import CycleContext
from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

LEDGER_NOTES = "@dispatch-ledger"
"""The name the ledger's pick notes travel under (the ``@`` keeps it apart from plugin names)."""

DEFAULT_TTFT_ALPHA = 0.2


class DispatchLedger:
    """Dispatch times per endpoint not yet reflected in that endpoint's latest scrape."""

    def __init__(self, *, horizon_s: float, ttft_alpha: float = DEFAULT_TTFT_ALPHA) -> None:
        self.name = LEDGER_NOTES
        self.horizon_s = horizon_s
        self.ttft = EndpointEwma(alpha=ttft_alpha)
        self._pending: dict[EndpointKey, list[float]] = {}
        """Dispatch times per endpoint, ascending (``record`` keeps them sorted)."""
        self._copies: dict[EndpointKey, tuple[EndpointView, int, EndpointView]] = {}
        """The last annotated copy per endpoint: (incoming view, count, copy). Reused while the same
        view object comes in with the same count (views are frozen, so the copy is still exact); a
        caller that keeps its views between scrapes thus gets no new copy per pick."""

    def record(self, key: EndpointKey, *, now: float) -> None:
        """Remember one dispatch (called once per successful pick)."""
        times = self._pending.get(key)
        if times is None:
            self._pending[key] = [now]
        elif times[-1] <= now:
            times.append(now)  # the usual case: the caller's clock does not go back
        else:
            insort(times, now)

    def move(self, source: EndpointKey, target: EndpointKey, *, now: float) -> None:
        """Count the latest dispatch to ``source`` as one to ``target`` (a pick sent elsewhere by
        flow control), so it is not phantom load on ``source`` until its next scrape."""
        times = self._pending.get(source)
        if times:
            times.pop()
            if not times:
                del self._pending[source]
        self.record(target, now=now)

    def release(self, key: EndpointKey, *, now: float) -> bool:
        """Forget one dispatch to ``key`` recorded at or before ``now`` (the latest) that was never
        sent: a queued request's client went away in the loop turn its pick was handed to it. Left
        counted, it was phantom load on ``key`` until the next scrape. Whether one was still counted
        (a scrape since may already have dropped it)."""
        times = self._pending.get(key)
        if not times:
            return False
        at = bisect_right(times, now)
        if not at:
            return False
        del times[at - 1]
        if not times:
            del self._pending[key]
        return True

    def pick_note(self, ctx: CycleContext, endpoint: EndpointView) -> object | None:
        """The pick's time: all another worker's ledger needs to count this dispatch."""
        return ctx.now

    def learn_pick(self, endpoint: EndpointKey, note: object) -> None:
        """Count another worker's dispatch to ``endpoint`` at its pick time (``ValueError`` unless
        the note is a finite number)."""
        if type(note) not in (int, float) or not math.isfinite(cast(float, note)):
            raise ValueError(f"{LEDGER_NOTES}: a pick note is the pick's time, a finite number")
        self.record(endpoint, now=float(cast(float, note)))

    def on_complete(self, outcome: RequestOutcome) -> None:
        """Learn the endpoint's time to first token (how long a dispatch is taken to stay waiting)."""
        if outcome.ok and outcome.ttft_s is not None and outcome.ttft_s >= 0:
            self.ttft.observe(outcome.endpoint, outcome.ttft_s)

    def unreflected(self, view: EndpointView, *, now: float) -> int:
        """Dispatches to ``view`` since its scrape and within its TTFT; prunes reflected ones."""
        times = self._pending.get(view.key)
        if not times:
            return 0
        cutoff = now - self.horizon_s
        if view.scraped_at is not None:
            cutoff = max(cutoff, view.scraped_at)
        reflected = bisect_left(times, cutoff)
        if reflected:
            del times[:reflected]
        if not times:
            del self._pending[view.key]
            return 0
        ttft = self.ttft.get(view.key)
        if ttft is None or now - ttft <= cutoff:
            return len(times)
        return len(times) - bisect_left(times, now - ttft)

    def annotate(self, views: Sequence[EndpointView], *, now: float) -> list[EndpointView]:
        """The views with ``unreflected_dispatches`` filled in."""
        pending = self._pending
        copies = self._copies
        out = list(views)
        # Most endpoints of a large pool have no recent dispatch: find those that have one (or arrive
        # with a count, which callers normally leave 0) in one pass, and visit only them.
        visit = [i for i, v in enumerate(out) if v.key in pending or v.unreflected_dispatches]
        horizon_cutoff = now - self.horizon_s
        ttft_of = self.ttft.values.get
        for i in visit:
            v = out[i]
            key = v.key
            times = pending.get(key)
            if not times:
                n = 0
            else:
                # unreflected(), written out (it runs for every recently used endpoint per pick).
                cutoff = horizon_cutoff
                scraped_at = v.scraped_at
                if scraped_at is not None and scraped_at > cutoff:  # max(cutoff, scraped_at)
                    cutoff = scraped_at
                reflected = bisect_left(times, cutoff)
                if reflected:
                    del times[:reflected]
                if not times:
                    del pending[key]
                    n = 0
                else:
                    ttft = ttft_of(key)
                    if ttft is None or now - ttft <= cutoff:
                        n = len(times)
                    else:
                        n = len(times) - bisect_left(times, now - ttft)
            if n != v.unreflected_dispatches:
                made = copies.get(key)
                if made is not None and made[0] is v and made[1] == n:
                    out[i] = made[2]
                else:
                    copy = out[i] = _with_unreflected(v, n)
                    copies[key] = (v, n, copy)
        return out

    def forget(self, keys: Sequence[EndpointKey]) -> None:
        for key in keys:
            self._pending.pop(key, None)
            self._copies.pop(key, None)
        self.ttft.forget(keys)


_VIEW_FIELDS = (
    "key",
    "metrics",
    "scraped_at",
    "scrape_failing",
    "inflight",
    "inflight_tokens",
    "labels",
    "max_model_len",
    "unreflected_dispatches",
)
"""The fields the slot copy below writes; it is used only while ``EndpointView`` has exactly these
slots and no ``__post_init__`` (otherwise ``dataclasses.replace``, which copies whatever fields
there are)."""


def _replace_unreflected(v: EndpointView, n: int) -> EndpointView:
    return dataclasses.replace(v, unreflected_dispatches=n)


def _slot_copier() -> Callable[[EndpointView, int], EndpointView]:
    """``dataclasses.replace(v, unreflected_dispatches=n)`` with each slot written directly.

    Why: ``replace`` re-inspects the fields on every call, and a frozen dataclass's ``__init__``
    parses keyword arguments and sets every field through ``object.__setattr__`` (together about
    2.5 times the cost of the slot writes); this runs once per recently used endpoint per pick."""
    (
        set_key,
        set_metrics,
        set_scraped_at,
        set_failing,
        set_inflight,
        set_inflight_tokens,
        set_labels,
        set_max_model_len,
        set_unreflected,
    ) = (getattr(EndpointView, name).__set__ for name in _VIEW_FIELDS)
    new = object.__new__

    def copy(v: EndpointView, n: int) -> EndpointView:
        o = new(EndpointView)
        set_key(o, v.key)
        set_metrics(o, v.metrics)
        set_scraped_at(o, v.scraped_at)
        set_failing(o, v.scrape_failing)
        set_inflight(o, v.inflight)
        set_inflight_tokens(o, v.inflight_tokens)
        set_labels(o, v.labels)
        set_max_model_len(o, v.max_model_len)
        set_unreflected(o, n)
        return o

    return copy


def _constructed_unreflected(v: EndpointView, n: int) -> EndpointView:
    """``dataclasses.replace(v, unreflected_dispatches=n)`` by the constructor, every field
    positionally: how a compiled ``EndpointView`` (a native class, no slot descriptors to write;
    :mod:`igw.compiled`) is copied fastest. Used only while its fields are :data:`_VIEW_FIELDS`."""
    return EndpointView(
        v.key,
        v.metrics,
        v.scraped_at,
        v.scrape_failing,
        v.inflight,
        v.inflight_tokens,
        v.labels,
        v.max_model_len,
        n,
    )


FAST_COPY = getattr(EndpointView, "__slots__", ()) == _VIEW_FIELDS and not hasattr(
    EndpointView, "__post_init__"
)
"""Whether annotated views are made by the slot copy (a test checks it stays so)."""
FIELDS_AS_LISTED = tuple(f.name for f in dataclasses.fields(EndpointView)) == _VIEW_FIELDS
"""Whether ``EndpointView``'s fields are exactly :data:`_VIEW_FIELDS`, in order (the positional copy)."""
_with_unreflected = (
    _slot_copier() if FAST_COPY else _constructed_unreflected if FIELDS_AS_LISTED else _replace_unreflected
)
