"""N gateway workers in the DES: independent schedulers and in-flight ledgers, one shared scrape.

``igw serve --workers N`` runs N processes, each with its own scheduler (its own dispatch ledger) and
its own in-flight counts, all fed by one scraper's snapshots; the kernel hands each new connection
to one of them. :class:`WorkerSplitPolicy` models exactly that on top of any policy: requests go to
the workers round-robin or at random, each worker's scheduler sees the shared scraped metrics but
only *its own* requests in flight (the simulator's views carry the whole fleet's in-flight count,
which is what a single gateway process knows), and each completion goes back to the worker that
dispatched the request.

Mitigations, each on a report per scrape interval (what a channel like ``igw serve --workers``'
scrape channel could carry): ``share="inflight"`` - every worker also counts the other workers'
in-flight requests as last reported; ``share="dispatches"`` - additionally, each worker's dispatch
ledger (:mod:`igw.scheduling.dispatch_ledger`, the herding compensation between scrapes) learns the
other workers' dispatches, with their original dispatch times; ``share="picks"`` - what
``igw serve --workers`` does: only the pick notes of the plugins that share their picks
(:mod:`igw.scheduling.pick_notes`: the prefix scorer's block hashes, the no-hit LRU's cold picks)
reach the other workers' same plugins, through the same outbox and learner the gateway uses,
every ``note_interval_s`` (the gateway's :func:`~igw.scheduling.pick_notes.note_interval`, shorter
than a scrape interval: notes a scrape interval late left the workers' picks colliding).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final

from igw.scheduling.pick_notes import PickNote, PickNoteOutbox
from igw.scheduling.retry_policy import NO_RETRY, RetryPolicy
from igw.scheduling.scheduler import Scheduler
from igw.scheduling.types import (
    EndpointKey,
    EndpointView,
    ModelMissingObserver,
    RequestOutcome,
    RetryingPolicy,
    RoutingDecision,
    RoutingPolicy,
    RoutingRequest,
)

ASSIGNMENTS: Final = ("round-robin", "random")
SHARING: Final = ("none", "inflight", "dispatches", "picks")


class WorkerSplitPolicy:
    """``workers`` copies of a policy behind a connection spreader (see the module docstring)."""

    def __init__(
        self,
        build: Callable[[int], RoutingPolicy],
        *,
        workers: int,
        rng: random.Random,
        assignment: str = "random",
        share: str = "none",
        report_interval_s: float = 0.05,
        note_interval_s: float | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers: must be at least 1 (got {workers})")
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment: one of {', '.join(ASSIGNMENTS)} (got {assignment!r})")
        if share not in SHARING:
            raise ValueError(f"share: one of {', '.join(SHARING)} (got {share!r})")
        self._workers = [build(i) for i in range(workers)]
        self.name = f"{self._workers[0].name}×{workers}"
        self._rng = rng
        self._assignment = assignment
        self._share = share != "none"
        self._share_inflight = share in ("inflight", "dispatches")
        self._share_dispatches = share == "dispatches"
        self._share_picks = share == "picks"
        self._outboxes: list[PickNoteOutbox | None] = [
            policy.share_picks() if share == "picks" and isinstance(policy, Scheduler) else None
            for policy in self._workers
        ]
        self._unreported: list[tuple[float, int, EndpointView]] = []
        """Dispatches (time, worker, endpoint as seen) since the last report."""
        self._interval = report_interval_s
        self._note_interval = report_interval_s if note_interval_s is None else note_interval_s
        self._noted_at = float("-inf")
        self._next = 0
        self._owner: dict[str, tuple[int, EndpointKey, int]] = {}
        """request id -> (worker, endpoint, estimated tokens) while in flight."""
        self._inflight: list[dict[EndpointKey, list[int]]] = [{} for _ in range(workers)]
        """Per worker: endpoint -> [requests, tokens] in flight."""
        self._reported: list[dict[EndpointKey, list[int]]] = [{} for _ in range(workers)]
        self._reported_at = float("-inf")

    def _choose_worker(self) -> int:
        if self._assignment == "random":
            return self._rng.randrange(len(self._workers))
        index = self._next % len(self._workers)
        self._next += 1
        return index

    def _view_for(self, worker: int, view: EndpointView) -> EndpointView:
        own = self._inflight[worker].get(view.key, [0, 0])
        count, tokens = own
        if self._share_inflight:
            for other, reported in enumerate(self._reported):
                if other != worker:
                    seen = reported.get(view.key, [0, 0])
                    count += seen[0]
                    tokens += seen[1]
        return replace(view, inflight=count, inflight_tokens=tokens)

    def pick(
        self, request: RoutingRequest, endpoints: Sequence[EndpointView], *, now: float
    ) -> RoutingDecision:
        if self._share and now - self._reported_at >= self._interval:
            self._report(now)
            self._reported_at = now
        if self._share_picks and now - self._noted_at >= self._note_interval:
            self._exchange_notes(now)
            self._noted_at = now
        worker = self._choose_worker()
        views = [self._view_for(worker, v) for v in endpoints]
        decision = self._workers[worker].pick(request, views, now=now)
        if decision.endpoint is not None:
            tokens = request.prompt_tokens + (request.max_tokens or 0)
            self._owner[request.request_id] = (worker, decision.endpoint, tokens)
            counts = self._inflight[worker].setdefault(decision.endpoint, [0, 0])
            counts[0] += 1
            counts[1] += tokens
            if self._share_dispatches:
                seen = next(v for v in views if v.key == decision.endpoint)
                self._unreported.append((now, worker, seen))
        return decision

    def _report(self, now: float) -> None:
        self._reported = [{k: list(v) for k, v in w.items()} for w in self._inflight]
        for at, source, view in self._unreported:
            for index, policy in enumerate(self._workers):
                ledger = getattr(policy, "ledger", None)
                if index != source and ledger is not None:
                    ledger.record(view.key, now=at)
        self._unreported.clear()

    def _exchange_notes(self, now: float) -> None:
        """Each worker's pick notes since the last exchange, learned by every other worker."""
        notes: list[list[PickNote]] = [[] if box is None else box.drain() for box in self._outboxes]
        for index, policy in enumerate(self._workers):
            if not isinstance(policy, Scheduler):
                continue
            for source, sent in enumerate(notes):
                if source != index and sent:
                    policy.learn_picks(sent, now=now)

    def on_complete(self, outcome: RequestOutcome, *, now: float) -> None:
        owned = self._owner.pop(outcome.request_id, None)
        if owned is None:
            return
        worker, picked, tokens = owned
        counts = self._inflight[worker].get(picked)
        if counts is not None:
            counts[0] -= 1
            counts[1] -= tokens
        self._workers[worker].on_complete(outcome, now=now)

    def on_endpoints_removed(self, keys: Sequence[EndpointKey]) -> None:
        for policy in self._workers:
            policy.on_endpoints_removed(keys)

    def on_model_missing(self, endpoint: EndpointKey, model: str, *, now: float) -> None:
        """Told to every worker, as ``igw serve``'s ``@model-missing`` pick notes pass one worker's
        404 on to the others (a worker that learns it twice keeps one memory)."""
        for policy in self._workers:
            if isinstance(policy, ModelMissingObserver):
                policy.on_model_missing(endpoint, model, now=now)

    @property
    def retry_policy(self) -> RetryPolicy:
        """The workers' retries (alike: one configuration); none behind policies without them. A
        retried attempt's outcome reaches the worker that picked only for its first attempt."""
        first = self._workers[0]
        return first.retry_policy if isinstance(first, RetryingPolicy) else NO_RETRY
