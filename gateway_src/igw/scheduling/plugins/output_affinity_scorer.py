"""``output-affinity-scorer``: on one kind of hardware, send a request where the answers in flight
are about as long as its own (``max_tokens``).

Why: on identical pods under bursts (burst-235b) the E2E tail is the longest answers decoding
through steps filled to the token budget with other requests' prompt chunks; a long answer's
decode time is set by how many of its steps carry prefill, hardly by how many requests decode
beside it. Per request, paired over the same workload, the default profile's long answers
(>= 150 output tokens) reached their first token sooner than under least-request but decoded
longer (docs/benchmark.md, routing round 16). Every request brings a prompt; a pod that serves
short answers turns over many prompts per second, a pod that serves long ones few. Grouping
requests by answer length gives the long answers pods that see fewer prompt chunks per decode
step, and puts the prompt traffic on the pods whose answers end after a step or two.

Rule, per pick, only when ``backlog-ttft-scorer`` found the candidates to be one kind of hardware
for a request without an adapter (its ``backlog.one-kind`` state; elsewhere every candidate gets
``None`` and the scheduler leaves the column out of the totals): with ``t`` the request's
``max_tokens`` (the running mean ``m`` of ``max_tokens`` when it sets none) and ``a_i`` the mean
``max_tokens`` of this router's requests in flight on candidate ``i`` (``m`` for a pod with none),
the score is ``1 - f x min(1, |ln((a_i + 1) / (t + 1))| / ln(SPAN))``: 1 where the pod's answers are
as long as this one, 0 where they differ by a factor of :data:`SPAN` or more; ``f = 1 - `` the
request's largest prefix share on any candidate (as ``decode-balance-scorer``: where a shared
prefix buys much the prefix scorer keeps its pull). Until a ``max_tokens`` has been seen, and while
any candidate has not been scraped yet, it abstains (a conservative choice: before its first
scrape nothing about a pod has been measured). It does act on a mixed fleet whenever the candidates
left for a pick are one kind of hardware (mixed-fleet-8b's first picks had two A10G candidates),
so unlike ``decode-balance-scorer`` it changes the picks there (docs/benchmark.md, routing round 16).

Gate on the decode share (``maxDecodeShare``, routing round 17): it acts only while the answers are a
small part of the tokens the pods process, ``o / (o + p) <= maxDecodeShare`` with ``o`` the running
mean of ``max_tokens`` and ``p`` the running mean of the prompt tokens of this router's requests
(abstaining above it). Why: grouping buys the long answers steps with fewer prompt chunks only where
a pod's steps are made of prompt chunks; where answers are a large share of the work, the long
answers' own decode tokens and KV reads are a large part of every step, and grouping them piles that
work onto the same pods without moving the prompt traffic (burst-70b against burst-235b, decomposed
per request and per step in docs/benchmark.md, routing round 17). The default ``1 / SPAN`` reuses
the factor that makes two answer lengths "different": answers at most a sixteenth of the tokens, so
at least 15/16 of the work a pod is sent is prompt chunks. It was set once from that reason, not
searched; the scenarios measured lie far on either side of it (the docs give their shares).
``maxDecodeShare: 1`` turns the gate off (round 16's form).

Gate on the engines' queues (``onlyWhileQueued``, routing round 18): it acts only while every
candidate's scraped ``waiting`` is above 0, abstaining otherwise. Why: grouping's gain was measured
under bursts, where prompts queue on every pod and each step is filled to the token budget with
queued prompt chunks, and grouping moves that chunk work off the long answers' pods. At a light
load (nothing waiting) a new prompt is prefilled in the pod's next step, so grouping sends the short
answers' prompts into the very steps that make up the short answers' one or few inter-token gaps:
on burst-235b at quarter scale, seed 2 (no queue, every request within its SLO), the ITL tail is all
2-5-token answers, and grouping put up to 773k prompt tokens on the pods serving them against 496k
on the long answers' (docs/benchmark.md, routing round 18). Where some candidate has nothing waiting,
a prompt sent there starts at once, so the same holds for that pick. No constant: ``waiting > 0`` on
every candidate is the engines' own statement that prompts queue. ``onlyWhileQueued: false`` acts
at any load (round 17's form).

Cost (routing round 18): each distinct mean answer held by some pod has a slot, and the candidates'
slots are kept per position between picks (only pods whose mean changed are looked up again), so a
pick works the formula out once per slot and reads each candidate's score by list index: the same
floats as one pass over the candidates, without a dict lookup and a float hash per candidate.

``max_tokens`` is a cap, not the answer's length: where clients set it far above what they get
back (or leave it unset), every request looks alike and the rule does little. In the benchmark's
DES every answer runs to exactly ``max_tokens`` (EOS ignored, as benchmarks do), so the numbers it
was judged by are the most it can buy.

Category: affinity. Signal: none (gateway state: ``max_tokens`` of the requests it dispatched).
Parameters: ``maxDecodeShare`` (default ``1 / SPAN``, in (0, 1]), ``onlyWhileQueued`` (default
true). In the default profile at weight 2 since session s18, with both gates (routing rounds 16-18,
docs/benchmark.md; ``predictedLatency: 0`` switches it off with igw's other latency scorers).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from igw.scheduling.columns import Positions
from igw.scheduling.framework import CycleContext, PluginHooks, UnitScores
from igw.scheduling.params import ParamReader
from igw.scheduling.plugins.backlog_ttft_scorer import STATE_ONE_KIND
from igw.scheduling.plugins.decode_balance_scorer import match_share
from igw.scheduling.plugins.prefix_cache_scorer import STATE_MATCH
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome, RoutingRequest

TYPE = "output-affinity-scorer"
MAX_TRACKED = 65_536
"""Bound on requests remembered until their outcome; past it the oldest is forgotten (its tokens
taken off its pod), so a lost completion cannot grow the state without limit."""
MEAN_WINDOW = 64
"""The running mean of ``max_tokens`` weighs a new value ``1 / n`` for the first 64, then 1/64."""
SPAN = 16.0
"""Answers this many times longer or shorter than the request's score 0 (chosen once, not tuned)."""
LOG_SPAN = math.log(SPAN)
DEFAULT_MAX_DECODE_SHARE = 1.0 / SPAN
"""The rule acts while the mean answer is at most this share of a request's tokens (module doc)."""


class OutputAffinityScorer(PluginHooks):
    type_name = TYPE
    signal = ""
    consumes = frozenset({STATE_ONE_KIND, STATE_MATCH})

    def __init__(
        self,
        *,
        name: str = TYPE,
        max_decode_share: float = DEFAULT_MAX_DECODE_SHARE,
        only_while_queued: bool = True,
    ) -> None:
        self.name = name
        self.max_decode_share = max_decode_share
        self.only_while_queued = only_while_queued
        """Act only while every candidate's scraped ``waiting`` is above 0 (module doc)."""
        self.owed: dict[EndpointKey, float] = {}
        """Output tokens owed per endpoint by this router's requests in flight there."""
        self.count: dict[EndpointKey, int] = {}
        """This router's requests in flight per endpoint (those counted in ``owed``)."""
        self.mean_owed: dict[EndpointKey, float] = {}
        """``owed / count`` per endpoint, worked out when either changes (the same float the score
        would compute per pick; kept so a pick reads one value per candidate)."""
        self.tracked: OrderedDict[str, tuple[EndpointKey, float]] = OrderedDict()
        """Per request in flight: its endpoint and the tokens it added there."""
        self.mean_max_tokens = 0.0
        self.seen = 0
        self.mean_prompt_tokens = 0.0
        """Running mean of the prompt tokens of the requests that set ``max_tokens`` (same window)."""
        # Slots: each distinct mean answer held by some pod gets a slot number (slot 0 stands for
        # "nothing in flight", whose mean is the running mean, written at each pick), so that a pick
        # works the formula out once per slot and hands each candidate its slot's score by list
        # index, where a dict keyed by float means would hash every candidate's float per pick.
        self.slot_of: dict[float, int] = {}
        """A mean answer held by some pod -> its slot (1 and up)."""
        self.slot_mean: list[float] = [0.0]
        """Each slot's mean answer (a freed slot keeps its last one until reused)."""
        self.slot_refs: list[int] = [0]
        """Pods holding each slot's mean."""
        self.free_slots: list[int] = []
        self.pod_slot: dict[EndpointKey, int] = {}
        """Per pod with this router's requests in flight: its mean answer's slot."""
        self.moved: set[EndpointKey] = set()
        """Pods whose slot changed since the column of slots was last brought up to date."""
        self._positions = Positions()
        self._column: list[int] = []
        """Each candidate's slot, by position in the candidate list the positions were taken from."""
        self._version = -1

    def expected_output(self, request: RoutingRequest) -> float:
        """The request's ``max_tokens`` when it sets one (at least 1), else the running mean."""
        if request.max_tokens is not None and request.max_tokens > 0:
            return float(request.max_tokens)
        return self.mean_max_tokens

    def learn(self, max_tokens: int | None, prompt_tokens: int = 0) -> None:
        """Move the running means of ``max_tokens`` and of the prompt tokens toward one more
        request's values (requests without ``max_tokens`` are left out of both, so the two means
        describe the same requests)."""
        if max_tokens is None or max_tokens <= 0:
            return
        self.seen += 1
        step = 1.0 / min(self.seen, MEAN_WINDOW)
        self.mean_max_tokens += step * (max_tokens - self.mean_max_tokens)
        self.mean_prompt_tokens += step * (max(0, prompt_tokens) - self.mean_prompt_tokens)

    def decode_share(self) -> float:
        """``o / (o + p)``: the running mean answer over the running mean request (0 before any)."""
        o = self.mean_max_tokens
        return o / (o + self.mean_prompt_tokens) if o > 0 else 0.0

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        request = ctx.request
        self.learn(request.max_tokens, request.prompt_tokens)
        tokens = self.expected_output(request)
        old = self.tracked.pop(request.request_id, None)
        if old is not None:  # a request id picked again (a retry): its earlier dispatch is over
            self._release(*old)
        if tokens <= 0:
            return
        key = endpoint.key
        self.tracked[request.request_id] = (key, tokens)
        owed = self.owed[key] = self.owed.get(key, 0.0) + tokens
        n = self.count[key] = self.count.get(key, 0) + 1
        self._set_mean(key, owed / n)
        if len(self.tracked) > MAX_TRACKED:
            _, (key, dropped) = self.tracked.popitem(last=False)
            self._release(key, dropped)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        entry = self.tracked.pop(outcome.request_id, None)
        if entry is not None:
            self._release(*entry)

    def on_not_sent(self, request_id: str, endpoint: EndpointKey, *, sent_to: EndpointView | None) -> bool:
        """Take the answer of ``request_id`` off ``endpoint``'s answers in flight (the pod never got
        it), and with ``sent_to`` count it there. Left in place, a pick whose request never came back
        (flow control gave it back and the client left, or no attempt connected) stayed in the pod's
        mean answer until ``MAX_TRACKED`` later picks, and a pick sent elsewhere (steered, or its
        connection failed) counted on the pod that never saw it (until session s41)."""
        entry = self.tracked.get(request_id)
        if entry is None or entry[0] != endpoint:
            return False
        del self.tracked[request_id]
        self._release(*entry)
        if sent_to is not None:
            key, tokens = sent_to.key, entry[1]
            self.tracked[request_id] = (key, tokens)
            owed = self.owed[key] = self.owed.get(key, 0.0) + tokens
            n = self.count[key] = self.count.get(key, 0) + 1
            self._set_mean(key, owed / n)
        return True

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        gone = set(keys)
        for key in gone:
            self.owed.pop(key, None)
            self.count.pop(key, None)
            self._set_mean(key, None)
        # Removed pods leave ``moved`` at once (with pod churn and the gates closed it would
        # otherwise keep every key ever removed); the column is rebuilt at the next scored pick.
        self.moved -= gone
        self._version = -1
        for rid in [rid for rid, (key, _) in self.tracked.items() if key in gone]:
            del self.tracked[rid]

    def _release(self, key: EndpointKey, tokens: float) -> None:
        n = self.count.get(key)
        if n is None:
            return
        if n <= 1:  # the pod's last request: nothing owed (no float remainder left behind)
            del self.count[key]
            self.owed.pop(key, None)
            self._set_mean(key, None)
        else:
            self.count[key] = n - 1
            owed = self.owed[key] = self.owed.get(key, 0.0) - tokens
            self._set_mean(key, owed / (n - 1))

    def _set_mean(self, key: EndpointKey, mean: float | None) -> None:
        """Record ``key``'s mean answer (``None``: nothing in flight there) in ``mean_owed`` and in
        the slots: the pod leaves its old slot (freed when no pod holds it) and joins the slot of
        its new mean, a new one if no pod holds that mean yet."""
        old = self.pod_slot.pop(key, 0)
        if old:
            self.slot_refs[old] -= 1
            if not self.slot_refs[old]:
                del self.slot_of[self.slot_mean[old]]
                self.free_slots.append(old)
        self.moved.add(key)
        if mean is None:
            self.mean_owed.pop(key, None)
            return
        self.mean_owed[key] = mean
        slot = self.slot_of.get(mean)
        if slot is None:
            if self.free_slots:
                slot = self.free_slots.pop()
                self.slot_mean[slot] = mean
                self.slot_refs[slot] = 1
            else:
                slot = len(self.slot_mean)
                self.slot_mean.append(mean)
                self.slot_refs.append(1)
            self.slot_of[mean] = slot
        else:
            self.slot_refs[slot] += 1
        self.pod_slot[key] = slot

    def _slot_column(self, keys: list[EndpointKey]) -> list[int] | None:
        """Each of ``keys``' slot, kept between picks while the candidate keys stay the same (only
        the pods in ``moved`` are looked up again); ``None`` when a key is listed twice."""
        index = self._positions.of(keys)
        moved = self.moved
        if index is None:
            self._version = -1
            return None
        pod_slot = self.pod_slot
        if self._version != self._positions.version:
            self._version = self._positions.version
            self._column = [pod_slot.get(k, 0) for k in keys]
        elif moved:
            column = self._column
            for k in moved:
                i = index.get(k)
                if i is not None:
                    column[i] = pod_slot.get(k, 0)
        moved.clear()
        return self._column

    def acts(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> bool:
        """Whether the rule scores this pick (module doc: a ``max_tokens`` seen, the decode-share
        gate open, no adapter, one kind of hardware, every candidate scraped and, with
        ``onlyWhileQueued``, every candidate with a request waiting); otherwise every score is
        ``None``."""
        if (
            self.mean_max_tokens <= 0
            or self.decode_share() > self.max_decode_share
            or ctx.request.adapter is not None
            or ctx.state.get(STATE_ONE_KIND) is not endpoints
        ):
            return False
        if self.only_while_queued:
            # The pick's shared column, kept per scrape; ``None`` when a candidate is not scraped
            # yet or lacks the gauge (then the queue gate cannot be read: abstain).
            waiting = ctx.columns(endpoints).waiting
            return waiting is not None and waiting.lo > 0
        return all(e.metrics is not None for e in endpoints)

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if not self.acts(ctx, endpoints):
            return [None] * len(endpoints)
        m = self.mean_max_tokens
        factor = 1.0 - match_share(ctx.state.get(STATE_MATCH))
        t1 = self.expected_output(ctx.request) + 1.0
        slot_mean = self.slot_mean
        if len(slot_mean) <= 2 * len(endpoints):  # the table at most twice one pass's formulas
            column = self._slot_column(ctx.columns(endpoints).keys)
            if column is not None:
                # The formula once per slot (slot 0: pods with nothing in flight, at the running
                # mean), each candidate's score read by its slot: the same floats as one pass.
                slot_mean[0] = m
                table = [1.0 - factor * min(1.0, abs(math.log((a + 1.0) / t1)) / LOG_SPAN) for a in slot_mean]
                return UnitScores(map(table.__getitem__, column))
        # Over twice as many slots as candidates (a few candidates of a larger pool) or a key listed twice:
        # one pass over the candidates' means.
        mean_owed = self.mean_owed
        means = [mean_owed.get(e.key, m) for e in endpoints]
        return UnitScores([1.0 - factor * min(1.0, abs(math.log((a + 1.0) / t1)) / LOG_SPAN) for a in means])


def factory(name: str, params: Mapping[str, Any], path: str) -> OutputAffinityScorer:
    r = ParamReader(params, path=path)
    plugin = OutputAffinityScorer(
        name=name,
        max_decode_share=r.number("maxDecodeShare", DEFAULT_MAX_DECODE_SHARE, minimum=1e-9, maximum=1.0),
        only_while_queued=r.boolean("onlyWhileQueued", True),
    )
    r.finish()
    return plugin
