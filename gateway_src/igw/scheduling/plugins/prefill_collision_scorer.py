"""``prefill-collision-scorer``: avoid sending a request to a pod that is still prefilling our last one.

Why: an engine batches every prompt that arrives while it is prefilling into the same (longer) step,
so two requests reaching one pod a few milliseconds apart both see a longer time to first token.
Round-robin spaces requests evenly and rarely collides; a load-aware picker, which sees the same
scraped snapshot for several picks, can send the next request to a pod that got one a moment ago
(docs/scheduler-design.md has the measured rates). Scraped
``waiting`` does not show it (a request being prefilled is already *running*), and the dispatch
ledger drops a dispatch as soon as a scrape reflects it.

Model: per endpoint, this scheduler's own recent dispatches (time, prompt tokens). Each is worked off
*independently* at the endpoint's measured prompt rate (an exponentially weighted mean of
``prompt_tokens / ttft_s`` over ``RequestOutcome``; unmeasured endpoints take the mean of the measured
ones): ``left = max(0, tokens / rate - age)``. Independently, not one after another, because an engine
prefills the prompts of one step together. A dispatch that a scrape already shows while requests
are *waiting* there stops counting: it is queued rather than prefilling, and the queue scorers see
that queue (this also keeps most of a burst's queue-inflated rates out of the sum).
Score: ``finish_i = pending_i + tokens / rate_i`` (when this request's prefill would end there) and
``min(finish) / finish_i``, a ratio of finish times rather than a penalty alone, so an idle A10G
does not outscore an H100 with a little pending work. Until any endpoint has a measured rate every
endpoint scores 1.0. Category: balance. Signal: none (gateway state). Default weight 2
(``igw.scheduling.factory``).

**One kind of hardware: one rate.** When ``backlog-ttft-scorer`` found this pick's candidates to be
one kind of hardware (its ``backlog.one-kind`` state), every candidate takes the mean of the measured
rates. A rate measured as ``prompt_tokens / ttft_s`` is no speed on identical pods: TTFT has a fixed
part, so a pod that has just served long prompts measures a higher rate, and the rates of identical
pods scatter far apart. With its own rate an idle pod scored ``rate_i / fastest rate``, so the
luckiest pod drew more than its share of every request, long prompts most of all; the prompt tokens
bunched there shared its decode steps and made the gateway's ITL tail on identical pods worse than
least-request's (measured in docs/benchmark.md, routing round 8). Without the backlog scorer in the
profile, or with ``poolOneKind: false``, each endpoint keeps its own rate.

**Work ahead counted in a rate sample** (``countAhead``, off by default). A request's TTFT covers
the prompt work of this scheduler's earlier dispatches to the same endpoint not yet worked off when
it was sent (the engine prefills them in the same steps) as well as its own, so a sample is ``(prompt_tokens +
tokens ahead at dispatch) / ttft_s``, the tokens ahead taken from this scorer's own dispatch record
at the rate known then (none before any rate is measured). Read as ``prompt_tokens / ttft_s`` alone,
a short prompt queued behind a long one measured the queue: an H200 that took two such samples
early learnt about a third of its peers' rate, drew almost no request for the rest of the run, and the
long prompts it did not take bunched on the other pods, whose short answers then decoded beside
their chunked prefills and missed the time-per-token SLO (docs/benchmark.md, routing round 9).
Switched on it won that draw's SLO goodput (76.9 to 83.3 %, the oracle 92.3 %) but lengthened the
TTFT tail of two other draws beyond 15 % of the oracle's (random-1-03, -14; on -14 the H200 drew a
burst whose first tokens took up to 1.3 s: a rate that counts the queue no longer reads a busy pod
as a slow one, which probably had held bursts off it, not yet decomposed); so it stays a parameter.

Design alternatives that did not work (a serial virtual prefill queue; zeroing the whole pending
sum of an endpoint that shows requests waiting) and the measurements with and without this scorer
are in docs/scheduler-design.md.

Parameters: ``alpha`` (EWMA weight of a new rate sample, default 0.2), ``poolOneKind`` (one rate for
candidates of one kind of hardware, default true), ``countAhead`` (a rate sample counts the prompt
tokens still ahead at dispatch, default false: ``prompt_tokens / ttft_s``).
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.columns import MeasuredColumn, Positions
from igw.scheduling.ewma import EndpointEwma
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome

TYPE = "prefill-collision-scorer"
DEFAULT_ALPHA = 0.2
MIN_PROMPT_TOKENS = 1
"""A request is never counted as zero work (an empty prompt still costs one step)."""
PLAIN_SUM = sys.version_info < (3, 12)
"""Whether the built-in ``sum`` of floats is a plain running total (before Python 3.12; later
versions compensate rounding), so a loop adding in the same order gives the same float."""
DEFAULT_POOL_ONE_KIND = True
"""``poolOneKind``: candidates ``backlog-ttft-scorer`` found to be one kind of hardware share one rate."""
MAX_TRACKED_DISPATCHES = 256
"""Bound on remembered dispatches per endpoint (before any rate is measured nothing is pruned)."""
DEFAULT_COUNT_AHEAD = False
"""``countAhead``: a rate sample counts the prompt work of this scheduler's dispatches still ahead
(off by default: on the benchmark's random family it won random-1-13's goodput and lost two draws'
TTFT tails, docs/benchmark.md, routing round 9)."""
MAX_TRACKED_AHEAD = 4096
"""Bound on dispatches remembered until their outcome (their prompt tokens ahead at dispatch)."""


class PrefillCollisionScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ONE_KIND})

    def __init__(
        self,
        *,
        name: str = TYPE,
        alpha: float = DEFAULT_ALPHA,
        pool_one_kind: bool = DEFAULT_POOL_ONE_KIND,
        count_ahead: bool = DEFAULT_COUNT_AHEAD,
    ) -> None:
        self.name = name
        self.pool_one_kind = pool_one_kind
        self.count_ahead = count_ahead
        self.ahead: OrderedDict[str, float] = OrderedDict()
        """Per dispatched request id: prompt tokens of this scheduler's earlier dispatches to the same
        endpoint not yet worked off when it was dispatched (``countAhead``)."""
        self.rate = EndpointEwma(alpha=alpha, track_changes=True)
        """Prompt tokens per second of measured TTFT, per endpoint."""
        self._rates = MeasuredColumn(self.rate)
        """Each candidate's rate (the mean of the measured ones for the others), kept between picks."""
        self.recent: dict[EndpointKey, deque[tuple[float, int]]] = {}
        """This scheduler's own dispatches per endpoint (time, prompt tokens) still being prefilled."""
        self._positions = Positions()
        self._last: tuple[str, EndpointKey, tuple[float, int]] | None = None
        """The latest pick (request id, endpoint, its entry in ``recent``): what :meth:`on_not_sent`
        takes back. Flow control gives a pick back, or steers it, right after making it."""

    def rate_of(self, key: EndpointKey) -> float | None:
        """Measured prefill rate; unmeasured endpoints take the mean of the measured ones."""
        own = self.rate.get(key)
        if own is not None:
            return own
        values = self.rate.values
        return sum(values.values()) / len(values) if values else None

    def pending_s(self, view: EndpointView, *, now: float) -> float:
        """Prefill work (seconds at the endpoint's rate) left of this scheduler's recent dispatches.

        Each dispatch is worked off independently at the measured rate (an engine prefills the
        prompts of one step together, it does not queue them one after another), so one dispatch
        counts for at most its own prefill time; fully worked-off dispatches are dropped. A dispatch
        the endpoint's scrape already shows while requests wait there is queued, not prefilling, and
        the queue scorers see it, so it is left out.
        """
        rate = self.rate_of(view.key)
        if rate is None or rate <= 0:
            return 0.0
        return self._pending_at(view, rate, now)

    def _pending_at(self, view: EndpointView, rate: float, now: float) -> float:
        """:meth:`pending_s` with the endpoint's rate (positive) already looked up."""
        queue = self.recent.get(view.key)
        if not queue:
            return 0.0
        while queue and queue[0][1] / rate <= now - queue[0][0]:
            queue.popleft()  # the oldest are dropped once worked off (prompts of similar size)
        if not queue:
            del self.recent[view.key]
            return 0.0
        m = view.metrics
        queued = m is not None and m.waiting is not None and m.waiting > 0
        shown_before = view.scraped_at if queued and view.scraped_at is not None else -math.inf
        # The positive ``max(0.0, left)`` only (NaN included among the zeros): adding 0.0 to a sum of
        # non-negative floats leaves it unchanged, plainly or compensated (Python 3.12's ``sum``).
        return sum(
            [left for t, tokens in queue if t > shown_before and (left := tokens / rate - (now - t)) > 0.0],
            0.0,
        )

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        values = self.rate.values
        if not values:
            return UnitScores([1.0] * len(endpoints))  # nothing measured yet: no endpoint can be told apart
        tokens = max(MIN_PROMPT_TOKENS, ctx.request.prompt_tokens)
        mean = sum(values.values()) / len(values)  # rate_of's fallback, computed once per cycle
        recent = self.recent
        now = ctx.now
        keys = ctx.columns(endpoints).keys
        pooled = self.pool_one_kind and ctx.state.get(STATE_ONE_KIND) is endpoints
        try:
            if pooled:
                # One rate for every candidate: one division, the same float for each (what the
                # per-candidate comprehension below gives on a list of equal rates).
                rates = [mean] * len(keys)
                work = [tokens / mean] * len(keys)
            else:
                rates = self._rates.of(keys, mean)
                work = [tokens / r for r in rates]
        except ZeroDivisionError:  # a zero rate: the guarded loop below
            work = []
        if work and min(work) > 0:
            # Every rate positive and finite (``tokens / rate > 0``; the usual case): the loop below
            # without its guards; pending work only for the endpoints that still have dispatches
            # of this scheduler prefilling.
            index = self._positions.of(keys)
            if index is None:  # a key listed twice: find the candidates with dispatches by key
                visit = [i for i, k in enumerate(keys) if k in recent]
            else:  # usually few endpoints have dispatches still prefilling: visit only those
                visit = [i for k in recent if (i := index.get(k)) is not None]
            for i in visit:
                # _pending_at, written out (it runs for most candidates of every pick): the same
                # expressions in the same order, so the same floats.
                view, rate = endpoints[i], rates[i]
                queue = recent.get(view.key)
                if not queue:  # a key listed twice: its queue emptied at its first position
                    continue
                while queue and queue[0][1] / rate <= now - queue[0][0]:
                    queue.popleft()
                if not queue:
                    del recent[view.key]
                    continue  # no pending work: ``0.0 + work[i]`` is ``work[i]``
                m = view.metrics
                if m is not None and (waiting := m.waiting) is not None and waiting > 0:
                    scraped_at = view.scraped_at
                    shown_before = scraped_at if scraped_at is not None else -math.inf
                else:
                    shown_before = -math.inf
                if PLAIN_SUM:
                    # What ``sum([...], 0.0)`` below adds up, added in the same order: before
                    # Python 3.12 ``sum`` of floats is a plain running total from its start, so
                    # the same float, without a comprehension call per endpoint.
                    pending = 0.0
                    for t, queued in queue:  # not ``tokens``: that is the request's own, used below
                        if t > shown_before and (left := queued / rate - (now - t)) > 0.0:
                            pending += left
                else:  # compensated ``sum`` (Python 3.12+): summed by it, as before
                    pending = sum(
                        [
                            left
                            for t, tokens in queue
                            if t > shown_before and (left := tokens / rate - (now - t)) > 0.0
                        ],
                        0.0,
                    )
                work[i] = pending + work[i]
            fastest = min(work)
            if fastest > 0:  # each ratio in (0, 1]
                return UnitScores([fastest / f for f in work])
        finish: list[float | None] = []
        for e in endpoints:
            rate = mean if pooled else values.get(e.key, mean)
            if rate <= 0:
                finish.append(None)
                continue
            pending = self._pending_at(e, rate, now) if e.key in recent else 0.0
            finish.append(pending + tokens / rate)
        present = [f for f in finish if f is not None]
        if not present:
            return [1.0] * len(endpoints)
        best = min(present)
        return [1.0 if f is None or f <= 0 else best / f for f in finish]

    def tokens_ahead(self, key: EndpointKey, *, now: float) -> float:
        """Prompt tokens of this scheduler's dispatches to ``key`` not yet worked off at ``now`` at the
        endpoint's rate (0 until any rate is measured: nothing tells how much of them is done)."""
        queue = self.recent.get(key)
        rate = self.rate_of(key)
        if not queue or rate is None or rate <= 0:
            return 0.0
        return sum([left for t, tokens in queue if (left := tokens - (now - t) * rate) > 0.0], 0.0)

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        tokens = max(MIN_PROMPT_TOKENS, ctx.request.prompt_tokens)
        if self.count_ahead:
            self.ahead[ctx.request.request_id] = self.tokens_ahead(endpoint.key, now=ctx.now)
            if len(self.ahead) > MAX_TRACKED_AHEAD:
                self.ahead.popitem(last=False)
        queue = self.recent.setdefault(endpoint.key, deque())
        entry = (ctx.now, tokens)
        queue.append(entry)
        self._last = (ctx.request.request_id, endpoint.key, entry)
        if len(queue) > MAX_TRACKED_DISPATCHES:
            queue.popleft()

    def on_not_sent(self, request_id: str, endpoint: EndpointKey, *, sent_to: EndpointView | None) -> bool:
        """Take the latest pick, ``request_id``'s on ``endpoint``, off the pod's prefill work (the
        pod never got its prompt), and with ``sent_to`` count it there. Left in place, the flow
        control pump, which picks a queued request's pod at every poll, added the prompt's prefill
        to that pod at each one (until session s41: 10 entries after 10 polls, the pod scored as
        prefilling ten prompts). A pick other picks followed (a connection that failed later) is
        left: its entry is worked off within the prompt's prefill time."""
        last = self._last
        if last is None or last[0] != request_id or last[1] != endpoint:
            return False
        self._last = None
        entry = last[2]
        queue = self.recent.get(endpoint)
        # equal, not identical: the compiled build keeps the tuple unboxed and boxes a new one per use
        if queue is None or not queue or queue[-1] != entry:
            return False
        queue.pop()
        if not queue:
            del self.recent[endpoint]
        if sent_to is None:
            if self.count_ahead:
                self.ahead.pop(request_id, None)
            return True
        if self.count_ahead:
            self.ahead[request_id] = self.tokens_ahead(sent_to.key, now=entry[0])
        self.recent.setdefault(sent_to.key, deque()).append(entry)
        return True

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        ahead = self.ahead.pop(outcome.request_id, 0.0) if self.count_ahead else 0.0
        if not outcome.ok or outcome.ttft_s is None or outcome.ttft_s <= 0 or outcome.prompt_tokens <= 0:
            return
        self.rate.observe(outcome.endpoint, (outcome.prompt_tokens + ahead) / outcome.ttft_s)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        self.rate.forget(keys)
        self._rates.forget()
        for key in keys:
            self.recent.pop(key, None)


def factory(name: str, params: Mapping[str, Any], path: str) -> PrefillCollisionScorer:
    r = ParamReader(params, path=path)
    plugin = PrefillCollisionScorer(
        name=name,
        alpha=r.number("alpha", DEFAULT_ALPHA, minimum=0.0, maximum=1.0),
        pool_one_kind=r.boolean("poolOneKind", DEFAULT_POOL_ONE_KIND),
        count_ahead=r.boolean("countAhead", DEFAULT_COUNT_AHEAD),
    )
    r.finish()
    return plugin
