"""Test oracles: the scheduling code as it read before its per-decision cost was cut.

Each class derives from the plugin it checks and overrides only the methods whose cost was cut, with
the straightforward per-endpoint code (one Python step per candidate, no shared columns, no
incremental state). The fast versions must return exactly the same values, so the equivalence tests
compare with ``==``, never with a tolerance.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence

from igw.scheduling.dispatch_ledger import DispatchLedger
from igw.scheduling.framework import CycleContext
from igw.scheduling.plugins.backlog_ttft_scorer import (
    MIN_FIT_SAMPLES,
    MIN_TOKENS,
    STATE_ONE_KIND,
    STATE_PREDICTED,
    Backlog,
    BacklogTtftScorer,
    LinearFit,
    Predictions,
    kind_pooled,
    kv_capacities,
    slot_price,
    uncached,
)
from igw.scheduling.plugins.decode_balance_scorer import DecodeBalanceScorer, match_share
from igw.scheduling.plugins.kv_cache_scorer import KvCacheScorer
from igw.scheduling.plugins.max_score_picker import MaxScorePicker
from igw.scheduling.plugins.output_affinity_scorer import SPAN, OutputAffinityScorer
from igw.scheduling.plugins.predicted_ttft_scorer import STATE_SCORES, PredictedTtftScorer, PublishedScores
from igw.scheduling.plugins.prefill_admission_scorer import PrefillAdmissionScorer
from igw.scheduling.plugins.prefill_collision_scorer import PrefillCollisionScorer
from igw.scheduling.plugins.prefix_cache_scorer import STATE_ANY_HIT, STATE_MATCH, PrefixCacheScorer
from igw.scheduling.plugins.queue_scorer import QueueScorer
from igw.scheduling.scheduler import Profile, WeightedScorer
from igw.scheduling.types import EndpointKey, EndpointView, RequestOutcome, RoutingRequest


def reference_min_max_inverse(values: Sequence[float | None]) -> list[float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return [None] * len(values)
    lo, hi = min(present), max(present)
    if hi == lo:
        return [None if v is None else 1.0 for v in values]
    span = hi - lo
    return [None if v is None else (hi - v) / span for v in values]


class ReferenceQueueScorer(QueueScorer):
    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        return reference_min_max_inverse(
            [None if e.metrics is None or e.metrics.waiting is None else e.metrics.waiting for e in endpoints]
        )


class ReferenceKvCacheScorer(KvCacheScorer):
    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        return [
            None if e.metrics is None or e.metrics.kv_usage is None else 1.0 - e.metrics.kv_usage
            for e in endpoints
        ]


class ReferencePrefixCacheScorer(PrefixCacheScorer):
    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        hashes = self._hashes(ctx, endpoints)
        if not hashes:
            ctx.state[STATE_ANY_HIT] = False
            return [0.0] * len(endpoints)
        counts = self.index.match(hashes)
        total = len(hashes)
        scores: list[float | None] = [counts.get(e.key, 0) / total for e in endpoints]
        ctx.state[STATE_ANY_HIT] = any(s for s in scores)
        ctx.state[STATE_MATCH] = {e.key: s for e, s in zip(endpoints, scores, strict=True) if s}
        return scores


class ReferencePredictedTtftScorer(PredictedTtftScorer):
    def predicted(self, endpoints: Sequence[EndpointView], cols: object = None) -> list[float]:
        speeds = self.pooled_ttft(endpoints)
        out: list[float] = []
        for t, e in zip(speeds, endpoints, strict=True):
            m = e.metrics
            if m is not None and m.waiting is not None:
                ahead = (m.waiting if m.waiting > 0 else 0) + (
                    e.unreflected_dispatches if e.unreflected_dispatches > 0 else 0
                )
            else:
                ahead = e.inflight if e.inflight > 0 else 0
            out.append(t * (1 + ahead))
        return out

    def pooled_ttft(self, endpoints: Sequence[EndpointView], cols: object = None) -> list[float]:
        return reference_pooled_ttft(self, endpoints)

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        predicted = self.predicted(endpoints)
        best = min(predicted, default=0.0)
        scores: list[float | None] = [1.0 if p <= 0 else best / p for p in predicted]
        ctx.state[STATE_SCORES] = PublishedScores(endpoints, scores)
        return scores


def reference_pooled_ttft(scorer: PredictedTtftScorer, endpoints: Sequence[EndpointView]) -> list[float]:
    """Sort every settled endpoint and walk the groups, from scratch, on every call."""
    lookup = scorer.ttft.values.get
    measured = [lookup(e.key) for e in endpoints]
    present = [v for v in measured if v is not None]
    fallback = sum(present) / len(present) if present else 1.0
    out = [fallback if t is None else t for t in measured]
    if scorer.noise_z <= 0:
        return out
    logs = scorer.log_ttft
    settled = logs.settled_count
    order = sorted(
        (i for i, t in enumerate(measured) if t is not None and logs.count(endpoints[i].key) >= settled),
        key=lambda i: logs.get(endpoints[i].key) or 0.0,
    )
    group: list[int] = []
    first_log, first_se = 0.0, 0.0
    for i in [*order, -1]:
        log_i = 0.0 if i < 0 else logs.get(endpoints[i].key) or 0.0
        se = math.inf if i < 0 else logs.standard_error(endpoints[i].key) or 0.0
        if group and (i < 0 or log_i - first_log > scorer.noise_z * math.hypot(se, first_se)):
            mean = sum(out[j] for j in group) / len(group)
            for j in group:
                out[j] = mean
            group = []
        if not group:
            first_log, first_se = log_i, se
        group.append(i)
    return out


class ReferencePrefillCollisionScorer(PrefillCollisionScorer):
    def _pending_at(self, view: EndpointView, rate: float, now: float) -> float:
        queue = self.recent.get(view.key)
        if not queue:
            return 0.0
        while queue and queue[0][1] / rate <= now - queue[0][0]:
            queue.popleft()
        if not queue:
            del self.recent[view.key]
            return 0.0
        m = view.metrics
        queued = m is not None and m.waiting is not None and m.waiting > 0
        shown_before = view.scraped_at if queued and view.scraped_at is not None else -math.inf
        return sum([max(0.0, tokens / rate - (now - t)) for t, tokens in queue if t > shown_before])

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        values = self.rate.values
        if not values:
            return [1.0] * len(endpoints)
        tokens = max(1, ctx.request.prompt_tokens)
        mean = sum(values.values()) / len(values)
        pooled = self.pool_one_kind and ctx.state.get(STATE_ONE_KIND) is endpoints
        finish: list[float | None] = []
        for e in endpoints:
            rate = mean if pooled else values.get(e.key, mean)
            if rate <= 0:
                finish.append(None)
                continue
            pending = self._pending_at(e, rate, ctx.now) if e.key in self.recent else 0.0
            finish.append(pending + tokens / rate)
        present = [f for f in finish if f is not None]
        if not present:
            return [1.0] * len(endpoints)
        best = min(present)
        return [1.0 if f is None or f <= 0 else best / f for f in finish]


def reference_kv_capacities(endpoints: Sequence[EndpointView]) -> list[float | None]:
    out: list[float | None] = []
    for e in endpoints:
        m = e.metrics
        blocks = None if m is None else m.num_gpu_blocks
        size = None if m is None else m.block_size
        out.append(float(blocks * size) if blocks and size else None)
    return out


def reference_pool(
    models: Mapping[EndpointKey, tuple[float, float]], pool_ratio: float
) -> dict[EndpointKey, tuple[float, float]]:
    """Sort every ``(intercept, slope)`` by slope and walk the groups one endpoint at a time."""
    own = sorted((slope, intercept, k) for k, (intercept, slope) in models.items())
    pooled: dict[EndpointKey, tuple[float, float]] = {}
    group: list[tuple[float, float, EndpointKey]] = []
    for item in [*own, None]:
        if group and (item is None or item[0] > group[0][0] * pool_ratio):
            slope = sum(g[0] for g in group) / len(group)
            intercept = sum(g[1] for g in group) / len(group)
            for g in group:
                pooled[g[2]] = (intercept, slope)
            group = []
        if item is not None:
            group.append(item)
    return pooled


class ReferenceBacklogTtftScorer(BacklogTtftScorer):
    """Every endpoint's regression computed, sorted and grouped from scratch on every call; the fleet's
    best model and slowest mean looked up per endpoint; KV capacities compared one endpoint at a time;
    every candidate's model looked up and its prediction made through the helpers on every call (no
    plan kept between picks, no one-kind-of-hardware answer kept). The drain and learning rules are
    the scorer's own."""

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        self._cycle_models = {}
        adapter = ctx.request.adapter
        capacities = kv_capacities(endpoints)
        known = [c for c in capacities if c is not None]
        unlike = len(known) == len(capacities) > 0 and max(known) > min(known) * self.pool_ratio
        if adapter is not None and (self.adapter_slot_price <= 0 or not unlike):
            return [1.0] * len(endpoints)
        if self.one_speed(endpoints):
            ctx.state[STATE_ONE_KIND] = endpoints
            published = ctx.state.get(STATE_SCORES)
            if adapter is None and self.one_kind_share > 0 and published is not None:
                assert published.endpoints is endpoints
                return [
                    None if v is None else 1.0 - self.one_kind_share * (1.0 - v) for v in published.scores
                ]
            return [1.0] * len(endpoints)
        tokens = max(MIN_TOKENS, ctx.request.prompt_tokens)
        self._adapter_cycle = adapter is not None
        try:
            matched = ctx.state.get(STATE_MATCH)
            predicted = self.predicted(endpoints, tokens=tokens, now=ctx.now, matched=matched)
        finally:
            self._adapter_cycle = False
        if adapter is None:
            idle = [b + sl * tokens for b, sl in (self._cycle_models[e.key] for e in endpoints)]
            measured = [
                (f := self.fits.get(e.key)) is not None and f.count >= MIN_FIT_SAMPLES for e in endpoints
            ]
            ctx.state[STATE_PREDICTED] = Predictions(endpoints, predicted, idle, measured)
        best = min(predicted, default=0.0)
        scores = [1.0 if p <= 0 else best / p for p in predicted]
        if adapter is None and self.prediction_exponent != 1.0:
            label = self.hardware_label
            kinds = [(self._cycle_models[e.key], e.labels.get(label) if label else None) for e in endpoints]
            best_of = {k: min(p for p, k2 in zip(predicted, kinds, strict=True) if k2 == k) for k in kinds}
            scores = [
                1.0 if p <= 0 else (best_of[k] / p) ** self.prediction_exponent * (best / best_of[k])
                for p, k in zip(predicted, kinds, strict=True)
            ]
        if self.speed_preference > 0 and self.fits:
            idle = [b + s * tokens for b, s in (self._cycle_models.get(e.key, (0.0, 0.0)) for e in endpoints)]
            fastest = min(idle)
            if self._cheap_probes:
                probing = self._cheap_probes
                idle = [fastest if e.key in probing else t for e, t in zip(endpoints, idle, strict=True)]
            if fastest > 0:
                scores = [
                    sc * (fastest / t) ** self.speed_preference for sc, t in zip(scores, idle, strict=True)
                ]
        if adapter is not None:
            scores = [
                sc / slot_price(adapter, e, exponent=self.adapter_slot_price)
                for sc, e in zip(scores, endpoints, strict=True)
            ]
        return list[float | None](scores)

    def on_picked(self, ctx: CycleContext, endpoint: EndpointView) -> None:
        """The pick's dispatch through the helpers (before ``on_picked`` wrote them out)."""
        key = endpoint.key
        backlog = self.backlogs.get(key)
        if backlog is None:
            backlog = self.backlogs[key] = Backlog(at=ctx.now)
        ahead = backlog.now(ctx.now, self._drain_of(endpoint, backlog.tokens))
        own = uncached(ctx.request.prompt_tokens, ctx.state.get(STATE_MATCH), key)
        backlog.tokens = ahead + own
        backlog.total += own
        self._prompts += 1
        weight = max(self.alpha, 1.0 / self._prompts)
        self.prompt_mean += weight * (ctx.request.prompt_tokens - self.prompt_mean)
        backlog.at = ctx.now
        label = self.hardware_label
        if label and (kind := endpoint.labels.get(label)) is not None and self._label_of.get(key) != kind:
            self._label_of[key] = kind
            self._labels_version += 1
        rid = ctx.request.request_id
        pending, pending_tokens = self.pending, self.pending_tokens
        if (old := self.dispatched.get(rid)) is not None:
            pending[old[0]] -= 1
            pending_tokens[old[0]] -= old[3]
        floored = own if ctx.request.stream else 0.0
        self.dispatched[rid] = (key, ahead, backlog.total, floored, own)
        pending[key] = pending.get(key, 0) + 1
        pending_tokens[key] = pending_tokens.get(key, 0.0) + floored
        while len(self.dispatched) > self.max_tracked * max(1, len(self.backlogs)):
            gone = self.dispatched.popitem(last=False)[1]
            pending[gone[0]] -= 1
            pending_tokens[gone[0]] -= gone[3]

    def _learn(self, outcome: RequestOutcome, *, now: float) -> None:
        """The outcome's fit and backlog cap through the helpers (before ``_learn`` wrote the drain
        out); the kept speed check is left to the scorer (this reference's ``score`` does not read it)."""
        entry = self.dispatched.pop(outcome.request_id, None)
        if entry is not None:
            self.pending[entry[0]] -= 1
            self.pending_tokens[entry[0]] -= entry[3]
        if entry is None or not outcome.ok or outcome.ttft_s is None or outcome.ttft_s < 0:
            return
        key, ahead, total_after = entry[0], entry[1], entry[2]
        own = max(MIN_TOKENS, outcome.prompt_tokens - outcome.cached_tokens)
        if not math.isfinite(outcome.ttft_s):
            return
        fit = self.fits.get(key)
        if fit is None:
            fit = self.fits[key] = LinearFit()
            self._members_version += 1
        fit.observe(ahead + own, outcome.ttft_s, alpha=self.alpha)
        self.pools.set(key, fit.regression(min_samples=MIN_FIT_SAMPLES, min_spread=self.slope_spread))
        self._fits_version += 1
        backlog = self.backlogs.get(key)
        if backlog is not None:
            model = self._cycle_models.get(key) or self._model(key, self._cycle_pooled)
            drain = self._drain_slope(key, *model, backlog.tokens) if model is not None else 0.0
            backlog.tokens = min(backlog.now(now, drain), backlog.total - total_after)
            backlog.at = now

    def predicted(
        self,
        endpoints: Sequence[EndpointView],
        *,
        tokens: int,
        now: float,
        matched: Mapping[EndpointKey, float] | None = None,
    ) -> list[float]:
        capacities = kv_capacities(endpoints)
        self._cycle_models = {}
        if not self.fits:
            return self._unmeasured(endpoints, capacities, tokens=tokens, now=now, matched=matched)
        pooled = self._pooled()
        self._cycle_pooled = pooled
        largest = max((c for c in capacities if c is not None), default=None)
        out: list[float] = []
        probes: list[int] = []
        self._cheap_probes = set()
        cheap = self.probe_share > 0 and tokens <= self.prompt_mean * self.probe_share
        for i, (e, capacity) in enumerate(zip(endpoints, capacities, strict=True)):
            fit = self.fits.get(e.key)
            stand_in = None if fit is not None else self._alike_measured(capacity, endpoints, capacities)
            if fit is not None and e.key not in pooled:
                model: tuple[float, float] | None = self._reference_anchored(
                    i, fit, endpoints, capacities, pooled
                )
            else:
                model = self._model(e.key if stand_in is None else stand_in, pooled)
            assert model is not None
            intercept, slope = model
            if fit is None and stand_in is None:
                if e.inflight > 0:
                    probes.append(i)
                elif cheap and capacity and largest and largest <= capacity * self.probe_kv_ratio:
                    self._cheap_probes.add(e.key)
                if capacity and largest:
                    factor = max(1.0, largest / capacity)
                    intercept, slope = intercept * factor, slope * factor
            self._cycle_models[e.key] = (intercept, slope)
            backlog = self.backlogs.get(e.key)
            ahead = (
                backlog.now(now, self._drain_slope(e.key, intercept, slope, backlog.tokens))
                if backlog
                else 0.0
            )
            if self.pending_floor > 0:
                ahead = max(ahead, self.pending_floor * self.pending_tokens.get(e.key, 0.0))
            predicted = intercept + slope * (ahead + uncached(tokens, matched, e.key))
            m = e.metrics
            if m is not None and m.waiting is not None and m.waiting > 0:
                # A non-empty backlog explains one waiting request; each further pending dispatch
                # explains 1 - ownWaitingShare of one (a whole one for an adapter request).
                first = 1 if ahead > 0 else 0
                mine = max(self.pending.get(e.key, 0), first)
                explains = 1.0 if self._adapter_cycle else 1.0 - self.own_waiting_share
                unexplained = m.waiting - (first + explains * (mine - first))
                if unexplained > 0:
                    predicted += unexplained * (fit.mean_y if fit is not None else intercept)
            out.append(predicted)
        if probes:
            others = [p for i, p in enumerate(out) if i not in probes]
            worst = max(others, default=self._slowest_mean())
            for i in probes:
                out[i] = max(out[i], worst) * (1 + endpoints[i].inflight)
        return out

    def _reference_anchored(
        self,
        i: int,
        fit: LinearFit,
        endpoints: Sequence[EndpointView],
        capacities: Sequence[float | None],
        pooled: Mapping[EndpointKey, tuple[float, float]],
    ) -> tuple[float, float]:
        """The twin searched afresh on every call (no cache)."""
        capacity = capacities[i]
        label = self.hardware_label
        own_label = endpoints[i].labels.get(label) if label else None
        best: tuple[float, tuple[float, float]] | None = None
        if capacity is not None:
            for j, (e, c) in enumerate(zip(endpoints, capacities, strict=True)):
                if j == i or c is None or (model := pooled.get(e.key)) is None:
                    continue
                other = e.labels.get(label) if label else None
                if own_label is not None and other is not None and other != own_label:
                    continue
                ratio = max(c, capacity) / min(c, capacity)
                if ratio <= self.pool_ratio and (best is None or ratio < best[0]):
                    best = (ratio, model)
        if best is None:
            return fit.mean_y / 2, fit.mean_y / (2 * max(fit.mean_x, MIN_TOKENS))
        slope = best[1][1]
        return max(0.0, fit.mean_y - slope * fit.mean_x), slope

    def _pooled(self) -> dict[EndpointKey, tuple[float, float]]:
        own = {
            k: m
            for k, f in self.fits.items()
            if (m := f.regression(min_samples=MIN_FIT_SAMPLES, min_spread=self.slope_spread))
        }
        pooled = reference_pool(own, self.pool_ratio)
        return kind_pooled(own, pooled, self._label_of) if self._label_of else pooled

    def _model(
        self, key: EndpointKey, pooled: Mapping[EndpointKey, tuple[float, float]]
    ) -> tuple[float, float] | None:
        model = pooled.get(key)
        if model is not None:
            return model
        fit = self.fits.get(key)
        if fit is not None:
            return fit.mean_y / 2, fit.mean_y / (2 * max(fit.mean_x, MIN_TOKENS))
        if not self.fits:
            return None
        known = [m for k in self.fits if (m := self._model(k, pooled)) is not None]
        return min(b for b, _ in known), min(s for _, s in known)

    def _slowest_mean(self) -> float:
        return max((f.mean_y for f in self.fits.values() if f.count), default=0.0)

    def _alike_capacities(self, endpoints: Sequence[EndpointView]) -> bool:
        capacities = reference_kv_capacities(endpoints)
        known = [c for c in capacities if c is not None]
        return bool(known) and len(known) == len(capacities) and max(known) <= min(known) * self.pool_ratio


class ReferenceMaxScorePicker(MaxScorePicker):
    def rank(self, ctx: CycleContext, totals: Sequence[float]) -> list[int]:
        n = len(totals)
        if n <= 1 or self.max_endpoints == 1:
            return super().rank(ctx, totals)  # code the cost work left unchanged
        rnd = ctx.rng.random
        tiebreak = [rnd() for _ in range(n)]
        top = heapq.nlargest(self.max_endpoints, zip(totals, tiebreak, range(n), strict=True))
        return [i for _, _, i in top]


class ReferenceDispatchLedger(DispatchLedger):
    """Dispatch times in a deque, counted one by one."""

    def __init__(self, *, horizon_s: float) -> None:
        super().__init__(horizon_s=horizon_s)
        self.times: dict[str, deque[float]] = {}

    def record(self, key: str, *, now: float) -> None:
        self.times.setdefault(key, deque()).append(now)

    def unreflected(self, view: EndpointView, *, now: float) -> int:
        queue = self.times.get(view.key)
        if not queue:
            return 0
        cutoff = now - self.horizon_s
        if view.scraped_at is not None:
            cutoff = max(cutoff, view.scraped_at)
        while queue and queue[0] < cutoff:
            queue.popleft()
        ttft = self.ttft.get(view.key)
        admitted_before = cutoff if ttft is None else max(cutoff, now - ttft)
        return sum(1 for t in queue if t >= admitted_before)

    def annotate(self, views: Sequence[EndpointView], *, now: float) -> list[EndpointView]:
        out: list[EndpointView] = []
        for v in views:
            n = self.unreflected(v, now=now) if v.key in self.times else 0
            out.append(
                v if n == v.unreflected_dispatches else dataclasses.replace(v, unreflected_dispatches=n)
            )
        return out

    def forget(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.times.pop(key, None)
        self.ttft.forget(keys)


class ReferenceOutputAffinityScorer(OutputAffinityScorer):
    """Each candidate's mean answer from ``owed / count`` at pick time and the formula once per
    candidate (no slots, no column kept between picks)."""

    def score(self, ctx: CycleContext, endpoints: Sequence[EndpointView]) -> list[float | None]:
        if not self.acts(ctx, endpoints):  # the guard is not the cost work's: shared
            return [None] * len(endpoints)
        m = self.mean_max_tokens
        factor = 1.0 - match_share(ctx.state.get(STATE_MATCH))
        t1 = self.expected_output(ctx.request) + 1.0
        scores: list[float | None] = []
        for e in endpoints:
            n = self.count.get(e.key, 0)
            a = self.owed.get(e.key, 0.0) / n if n > 0 else m
            scores.append(1.0 - factor * min(1.0, abs(math.log((a + 1.0) / t1)) / math.log(SPAN)))
        return scores


REFERENCES: dict[type, type] = {
    QueueScorer: ReferenceQueueScorer,
    KvCacheScorer: ReferenceKvCacheScorer,
    PrefixCacheScorer: ReferencePrefixCacheScorer,
    PredictedTtftScorer: ReferencePredictedTtftScorer,
    PrefillCollisionScorer: ReferencePrefillCollisionScorer,
    BacklogTtftScorer: ReferenceBacklogTtftScorer,
    PrefillAdmissionScorer: PrefillAdmissionScorer,  # no fast path of its own: it is its reference
    DecodeBalanceScorer: DecodeBalanceScorer,  # no fast path of its own either
    OutputAffinityScorer: ReferenceOutputAffinityScorer,
}


def reference_profile(profile: Profile) -> Profile:
    """``profile`` with every built-in scorer and the max-score picker replaced by its reference
    (same names, weights and default parameters; the profile must use default parameters)."""
    scorers = tuple(
        WeightedScorer(REFERENCES[type(ws.scorer)](name=ws.scorer.name), ws.weight) for ws in profile.scorers
    )
    assert isinstance(profile.picker, MaxScorePicker)
    picker = ReferenceMaxScorePicker(max_endpoints=profile.picker.max_endpoints)
    return Profile(filters=profile.filters, scorers=scorers, picker=picker, detector=profile.detector)


def reference_fitting(request: RoutingRequest, endpoints: Sequence[EndpointView]) -> Sequence[EndpointView]:
    need = request.prompt_tokens + (request.max_tokens or 0)
    if all(e.max_model_len is None or e.max_model_len >= need for e in endpoints):
        return endpoints
    fit = [e for e in endpoints if e.max_model_len is None or e.max_model_len >= need]
    if any(e.max_model_len is not None for e in fit):
        return fit
    # no known window holds the estimate: the largest known windows (and the unknown) decide
    largest = max(e.max_model_len for e in endpoints if e.max_model_len is not None)
    return [e for e in endpoints if e.max_model_len is None or e.max_model_len == largest]
