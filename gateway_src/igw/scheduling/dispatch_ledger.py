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

Cost: each endpoint's dispatch times are kept sorted, so pruning and counting are binary searches
(``bisect``) rather than a walk over every dispatch since the scrape; a pick costs the same whether
an endpoint got two dispatches since its scrape or two hundred.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

DEFAULT_TTFT_ALPHA = 0.2


class DispatchLedger:
    """Dispatch times per endpoint not yet reflected in that endpoint's latest scrape."""

    def __init__(self, *, horizon_s: float, ttft_alpha: float = DEFAULT_TTFT_ALPHA) -> None:
        self.horizon_s = horizon_s
        self.ttft = EndpointEwma(alpha=ttft_alpha)
        self._pending: dict[EndpointKey, list[float]] = {}
        """Dispatch times per endpoint, ascending (``record`` keeps them sorted)."""

    def record(self, key: EndpointKey, *, now: float) -> None:
        """Remember one dispatch (called once per successful pick)."""
        times = self._pending.get(key)
        if times is None:
            self._pending[key] = [now]
        elif times[-1] <= now:
            times.append(now)  # the usual case: the caller's clock does not go back
        else:
            insort(times, now)

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
        out = list(views)
        # Most endpoints of a large pool have no recent dispatch: find those that have one (or arrive
        # with a count, which callers normally leave 0) in one pass, and visit only them.
        visit = [i for i, v in enumerate(out) if v.key in pending or v.unreflected_dispatches]
        for i in visit:
            v = out[i]
            n = self.unreflected(v, now=now) if v.key in pending else 0
            if n != v.unreflected_dispatches:
                out[i] = _with_unreflected(v, n)
        return out

    def forget(self, keys: Sequence[EndpointKey]) -> None:
        for key in keys:
            self._pending.pop(key, None)
        self.ttft.forget(keys)


def _with_unreflected(v: EndpointView, n: int) -> EndpointView:
    """``dataclasses.replace(v, unreflected_dispatches=n)``, spelled out: ``replace`` re-inspects the
    dataclass's fields on every call, and this runs once per recently used endpoint per pick."""
    return EndpointView(
        key=v.key,
        metrics=v.metrics,
        scraped_at=v.scraped_at,
        scrape_failing=v.scrape_failing,
        inflight=v.inflight,
        inflight_tokens=v.inflight_tokens,
        labels=v.labels,
        max_model_len=v.max_model_len,
        unreflected_dispatches=n,
    )
