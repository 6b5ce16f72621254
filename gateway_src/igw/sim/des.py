"""Discrete-event fleet simulator: a workload through a :class:`RoutingPolicy` onto simulated engines.

What the policy sees is what a gateway can see (``igw.scheduling.types``): for every pod an
:class:`EndpointView` built from the last *scrape* - a snapshot of the pod's published signals taken at
scrape ticks every ``scrape_interval_s`` (each pod with its own random phase) - with ``scraped_at`` set
to that tick, plus the router's own in-flight counts, which are exact. Scrapes are taken lazily: the
state at a tick equals the state just before the first engine change after it, so the simulator only
snapshots a pod when something happened (exactly the periodic-scrape semantics, at a fraction of the cost).

Published signals follow each pod's engine and version like the live ``/metrics`` page: vLLM publishes
queue, running, KV usage (old or new name - the gateway reads either), cache config and, with LoRA
enabled, ``lora_requests_info``; SGLang publishes queue, running and token usage only with
``--enable-metrics`` >= 0.3.5.post1, otherwise every scrape fails.

Rejections: ``SATURATED`` is recorded as HTTP 429 and ``NO_ENDPOINTS`` as 503. With
``max_retries > 0`` the request is offered again after ``retry_after_s`` (or ``default_retry_after_s``)
like a well-behaved client, up to that many times; its record keeps the original arrival, so TTFT
includes the back-off. Faults (from t=0 or in a ``start_s``/``end_s`` window): ``slow``,
``error_rate``, ``freeze_metrics``, ``kill`` (in-flight requests fail with 502, dispatch fails over to
the decision's fallbacks, the pod returns with an empty cache) and ``hang`` (scrapes fail, the engine
stops until the window ends); ``die_mid_stream`` is live-only and rejected with a clear error.

Modules: this one runs the event loop; :mod:`igw.sim.des_pod` holds a pod's scrape state and faults;
:mod:`igw.sim.des_result` the records and series; :mod:`igw.sim.decode_run` the exact fast-forward.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from igw.scheduling.retry_policy import refusal_condition, retried_for
from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    FirstTokenObserver,
    ModelMissingObserver,
    RequestOutcome,
    RetryingPolicy,
    RoutingPolicy,
    RoutingRequest,
)
from igw.sim import decode_run
from igw.sim.des_pod import SimPod, pod_key
from igw.sim.des_result import PodSeries, RequestRecord, SimulationError, SimulationResult, percentile
from igw.sim.engine import EngineRequest, RequestRejected
from igw.sim.request import SimRequest
from igw.sim.spec import FaultKind, FaultSpec, PodSpec
from igw.sim.tokens import request_block_hashes
from igw.sim.truth import PodTruth

__all__ = [
    "PodSeries",
    "RequestRecord",
    "SimulationError",
    "SimulationResult",
    "percentile",
    "pod_key",
    "simulate",
]


_ARRIVAL = 0
_STEP = 1
_FAULT = 2


class _Pending:
    """A request between arrival and completion (first arrival kept across retries)."""

    __slots__ = ("attempts", "engine_req", "pod", "record", "sim")

    def __init__(self, sim: SimRequest, record: RequestRecord) -> None:
        self.sim = sim
        self.record = record
        self.attempts = 1
        self.engine_req: EngineRequest | None = None
        self.pod: SimPod | None = None


def simulate(
    *,
    pods: Sequence[PodSpec],
    requests: Iterable[SimRequest],
    policy: RoutingPolicy,
    seed: int,
    scrape_interval_s: float = 0.05,
    sample_interval_s: float = 1.0,
    max_retries: int = 0,
    default_retry_after_s: float = 1.0,
    base_model: str | None = None,
    fast_forward: bool = True,
    idle_scrape_limit_s: float | None = None,
) -> SimulationResult:
    """Run ``requests`` (sorted by arrival) through ``policy`` onto ``pods``; deterministic per ``seed``.

    ``base_model`` is the model name LoRA requests resolve to (default: the first pod's served model).
    ``fast_forward`` collapses pure-decode stretches into one event (:mod:`igw.sim.decode_run`); the
    records are identical either way, it only makes long runs faster. ``idle_scrape_limit_s`` paces
    scrapes as the gateway does (idle pods less often, at most that far apart; :mod:`igw.sim.des_pod`);
    ``None`` scrapes every pod every interval.
    """
    if not pods:
        raise SimulationError("pods: at least one pod is required")
    for i, pod in enumerate(pods):
        if pod.dp_size > 1:
            # one DES pod is one engine; a silently single-rank pod would halve its capacity
            raise SimulationError(
                f"pods[{i}].dp_size: {pod.dp_size} data-parallel ranks are simulated by live pods only "
                "(igw sim fleet); in the DES, list the ranks as separate pods"
            )
    if scrape_interval_s <= 0:
        raise SimulationError("scrape_interval_s must be > 0")
    if sample_interval_s <= 0:
        raise SimulationError("sample_interval_s must be > 0")
    rng = random.Random(seed)
    sim_pods = [
        SimPod(
            index=i,
            spec=p,
            rng=rng,
            scrape_interval=scrape_interval_s,
            sample_interval=sample_interval_s,
            idle_limit=idle_scrape_limit_s,
        )
        for i, p in enumerate(pods)
    ]
    by_key = {p.key: p for p in sim_pods}
    base = base_model or pods[0].model_name
    bind = getattr(policy, "bind_oracle", None)
    if callable(bind):
        truths = {p.key: PodTruth(key=p.key, spec=p.spec, engine=p.engine) for p in sim_pods}
        lookup: Callable[[EndpointKey], PodTruth] = truths.__getitem__
        bind(lookup)
    runner = _Runner(
        pods=sim_pods,
        by_key=by_key,
        policy=policy,
        rng=rng,
        base_model=base,
        max_retries=max_retries,
        default_retry_after_s=default_retry_after_s,
        fast_forward=fast_forward,
    )
    end = runner.run(iter(requests))
    for record in runner.records:
        if record.status == 0:
            record.status = 504  # dispatched to a pod that never answered (hung to the end)
    for p in sim_pods:
        p.observe(end)
    return SimulationResult(
        records=runner.records,
        series={p.key: p.series for p in sim_pods},
        pods={p.key: p.spec for p in sim_pods},
        policy_name=getattr(policy, "name", type(policy).__name__),
        seed=seed,
        scrape_interval_s=scrape_interval_s,
        end_time=end,
        steps=sum(p.engine.counters.steps for p in sim_pods),
        scrapes=sum(p.scrapes for p in sim_pods),
    )


class _Runner:
    def __init__(
        self,
        *,
        pods: list[SimPod],
        by_key: dict[EndpointKey, SimPod],
        policy: RoutingPolicy,
        rng: random.Random,
        base_model: str,
        max_retries: int,
        default_retry_after_s: float,
        fast_forward: bool,
    ) -> None:
        self.fast_forward = fast_forward
        self.pods = pods
        self.by_key = by_key
        self.policy = policy
        self.first_token_observer = policy if isinstance(policy, FirstTokenObserver) else None
        self.model_missing_observer = policy if isinstance(policy, ModelMissingObserver) else None
        self.retry = policy.retry_policy if isinstance(policy, RetryingPolicy) else None
        """The gateway's retries of refused attempts behind ``policy`` (``None``: none; a killed pod's
        connect failure is failed over to the next fallback whatever the policy)."""
        """The policy, when it wants to hear of each first token (the gateway learns TTFT from it)."""
        self.rng = rng
        self.base_model = base_model
        self.max_retries = max_retries
        self.default_retry_after_s = default_retry_after_s
        self.records: list[RequestRecord] = []
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.work_events = 0
        """Step and retry events in the heap: fault events alone do not keep the run going."""
        self.pending: dict[str, _Pending] = {}
        for pod in pods:
            for fault in pod.spec.faults:
                if fault.start_s > 0:
                    self.push(fault.start_s, _FAULT, (pod, fault, True))
                if fault.end_s is not None:
                    self.push(fault.end_s, _FAULT, (pod, fault, False))

    def push(self, t: float, kind: int, payload: Any) -> int:
        if kind != _FAULT:
            self.work_events += 1
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, payload))
        return self.seq

    def run(self, it: Iterator[SimRequest]) -> float:
        heap = self.heap
        now = 0.0
        last_arrival = -math.inf
        seen: set[str] = set()
        nxt = next(it, None)
        while True:
            if nxt is not None and (not heap or nxt.arrival <= heap[0][0]):
                if nxt.arrival < last_arrival:
                    raise SimulationError(
                        f"requests must be sorted by arrival: {nxt.request_id!r} at {nxt.arrival}"
                        f" comes after {last_arrival}"
                    )
                if nxt.arrival < 0 or nxt.prompt_tokens <= 0 or nxt.output_tokens <= 0:
                    raise SimulationError(
                        f"request {nxt.request_id!r}: arrival must be >= 0 and token counts > 0"
                    )
                last_arrival = now = nxt.arrival
                if nxt.request_id in seen:
                    raise SimulationError(f"duplicate request_id {nxt.request_id!r}")
                seen.add(nxt.request_id)
                record = RequestRecord(
                    request_id=nxt.request_id,
                    arrival=nxt.arrival,
                    pod=None,
                    status=0,
                    prompt_tokens=nxt.prompt_tokens,
                    model=nxt.model,
                    group=nxt.group,
                )
                self.records.append(record)
                self._route(_Pending(nxt, record), now)
                nxt = next(it, None)
            elif heap and (self.work_events or self.pending):
                t, seq, kind, payload = heapq.heappop(heap)
                if kind != _FAULT:
                    self.work_events -= 1
                if kind == _FAULT:
                    now = t
                    self._fault_event(*payload, now=t)
                elif kind == _STEP:
                    if seq != payload.event_seq:
                        continue  # superseded (a decode run cut short by an arrival)
                    now = t
                    self._step_end(payload, t)
                else:
                    now = t
                    self._route(payload, t)
            else:
                return now

    # ------------------------------------------------------------------ routing
    def _route(self, p: _Pending, now: float) -> None:
        sim = p.sim
        views = []
        for pod in self.pods:
            pod.observe(now)
            views.append(pod.endpoint_view())
        rr = RoutingRequest(
            request_id=sim.request_id,
            model=sim.model,
            base_model=self.base_model,
            prefix_text=sim.prompt_text,
            prompt_tokens=sim.prompt_tokens,
            max_tokens=sim.output_tokens,
            adapter=sim.adapter,
            priority=sim.priority,
            tenant=sim.tenant,
        )
        decision = self.policy.pick(rr, views, now=now)
        if decision.kind is DecisionKind.PICKED and decision.endpoint is not None:
            retry = self.retry
            answered = 0  # attempts a pod answered (a killed pod's is a connect failure)
            for key in (decision.endpoint, *decision.fallbacks):
                target = self.by_key.get(key)
                if target is None:
                    raise SimulationError(f"policy {self.policy.name!r} picked unknown endpoint {key!r}")
                if target.killed:
                    continue
                refused = self._dispatch(p, target, now)
                answered += 1
                if refused is None or retry is None or answered >= retry.attempts:
                    return
                condition = refusal_condition(refused)
                if condition is None or not retried_for(condition, retry.retry_on):
                    return
                p.record.retried += 1
            if not answered:
                self._fail(p, decision.endpoint, 502, now)
            return
        status = 429 if decision.kind is DecisionKind.SATURATED else 503
        p.record.status = status
        p.record.retry_after_s = decision.retry_after_s
        if p.attempts <= self.max_retries:
            p.attempts += 1
            p.record.attempts = p.attempts
            delay = decision.retry_after_s if decision.retry_after_s else self.default_retry_after_s
            self.push(now + max(delay, 1e-6), _ARRIVAL, p)

    def _dispatch(self, p: _Pending, pod: SimPod, now: float) -> int | None:
        """Send ``p`` to ``pod``; the status of the pod's refusal (recorded, and told to the policy
        as the gateway tells its scheduler), or ``None`` once the engine took the request."""
        sim = p.sim
        record = p.record
        record.pod = pod.key
        if pod.error_rate and self.rng.random() < pod.error_rate:
            self._fail(p, pod.key, pod.error_status, now)
            return pod.error_status
        ereq = EngineRequest(
            request_id=sim.request_id,
            prompt_tokens=sim.prompt_tokens,
            max_output_tokens=sim.output_tokens,
            block_hashes=request_block_hashes(
                sim.prompt_text,
                output_tokens=sim.output_tokens,
                block_size=pod.engine.block_size,
                salt=sim.adapter or "",
            ),
            adapter=sim.adapter,
            arrival=now,
            priority=sim.priority,
        )
        if sim.adapter is not None and sim.adapter not in pod.spec.lora_adapters:
            self._fail(p, pod.key, 404, now)
            if self.model_missing_observer is not None:  # as igw serve tells its scheduler
                self.model_missing_observer.on_model_missing(pod.key, sim.adapter, now=now)
            return 404
        try:
            pod.engine.add(ereq)
        except RequestRejected:
            self._fail(p, pod.key, 400, now)
            return 400
        p.engine_req = ereq
        p.pod = pod
        self.pending[sim.request_id] = p
        pod.inflight += 1
        pod.picks += 1
        pod.inflight_tokens += sim.prompt_tokens + sim.output_tokens
        pod.view = None
        if pod.run is not None:
            self._cut_run(pod, now)
        elif pod.batch is None and not pod.hung:
            self._start_step(pod, now)
        return None

    def _fail(self, p: _Pending, key: EndpointKey, status: int, now: float) -> None:
        p.record.status = status
        p.record.pod = key
        self.policy.on_complete(
            RequestOutcome(
                request_id=p.sim.request_id,
                endpoint=key,
                ok=False,
                prompt_tokens=p.sim.prompt_tokens,
                pod_fault=status >= 500,  # the pod's error or its death; a 4xx is the request's
            ),
            now=now,
        )

    # ------------------------------------------------------------------ engines
    def _start_step(self, pod: SimPod, now: float) -> None:
        if self.fast_forward:
            run = decode_run.begin(pod.engine, now)
            if run is not None:
                pod.run = run
                pod.batch = None
                pod.event_seq = self.push(run.end, _STEP, pod)
                return
        batch = pod.engine.schedule(now)
        pod.batch = batch
        if batch is not None:
            pod.step_end = now + batch.duration
            pod.event_seq = self.push(pod.step_end, _STEP, pod)

    def _cut_run(self, pod: SimPod, now: float) -> None:
        """A request joined a pod in a decode run: the step in progress becomes an ordinary batch."""
        run = pod.run
        assert run is not None
        batch = decode_run.cut(pod.engine, run, now)
        pod.run = None
        pod.batch = batch
        pod.step_end = run.ends[run.applied]
        pod.event_seq = self.push(pod.step_end, _STEP, pod)

    def _step_end(self, pod: SimPod, now: float) -> None:
        pod.observe(now)
        if pod.run is not None:
            pod.batch = decode_run.cut(pod.engine, pod.run, now)
            pod.run = None
        if pod.hung:
            pod.stalled = True  # the GPU is stuck: this step completes when the hang ends
            return
        batch = pod.batch
        assert batch is not None
        observer = self.first_token_observer
        out = pod.engine.complete(batch, now, collect_emitted=observer is not None)
        pod.batch = None
        if observer is not None:
            for ereq in out.emitted:
                if ereq.output_tokens == 1 and ereq.first_token_at == now:
                    self._first_token(observer, pod, ereq, now)
        if out.finished:
            pod.view = None
            for ereq in out.finished:
                self._finish(pod, ereq, now)
        if pod.engine.has_work():
            self._start_step(pod, now)

    # ------------------------------------------------------------------ faults with a time window
    def _fault_event(self, pod: SimPod, fault: FaultSpec, active: bool, *, now: float) -> None:
        pod.observe(now)
        if pod.run is not None:
            self._cut_run(pod, now)  # its precomputed steps assumed the old speed
        factor = pod.engine.slowdown
        pod.set_fault(fault, active=active)
        new = pod.engine.slowdown
        if new != factor and pod.batch is not None and not pod.stalled and pod.step_end > now:
            # the step in progress runs what is left of it at the new speed (the part already run
            # keeps the old one), as the live pod does (igw.sim.server LivePod._step_end): without
            # that a step started under factor=1000 kept its slowed length after the window ended
            pod.step_end = now + (pod.step_end - now) * new / factor
            pod.event_seq = self.push(pod.step_end, _STEP, pod)
        if fault.kind is FaultKind.KILL and active:
            self._kill(pod, now)
        elif fault.kind is FaultKind.HANG and not active:
            if pod.stalled:
                pod.stalled = False
                self._step_end(pod, now)
            elif pod.batch is None and pod.engine.has_work():
                self._start_step(pod, now)

    def _kill(self, pod: SimPod, now: float) -> None:
        """The pod dies: its requests fail (502, connection reset), it restarts with an empty cache."""
        victims = [p for p in self.pending.values() if p.pod is pod]
        for p in victims:
            del self.pending[p.sim.request_id]
            pod.engine.abort(p.sim.request_id, now=now)
            pod.inflight -= 1
            pod.inflight_tokens -= p.sim.prompt_tokens + p.sim.output_tokens
            self._fail(p, pod.key, 502, now)
        pod.batch = None
        pod.run = None
        pod.stalled = False
        pod.event_seq = -1
        pod.engine.pool.reset_prefix_cache()
        pod.view = None

    def _first_token(
        self, observer: FirstTokenObserver, pod: SimPod, ereq: EngineRequest, now: float
    ) -> None:
        """Tell the policy the request's first token arrived (a streaming gateway sees it now)."""
        p = self.pending.get(ereq.request_id)
        if p is None:
            return
        observer.on_first_token(
            RequestOutcome(
                request_id=p.sim.request_id,
                endpoint=pod.key,
                ok=True,
                ttft_s=now - ereq.arrival,
                prompt_tokens=p.sim.prompt_tokens,
                output_tokens=1,
                cached_tokens=ereq.cached_tokens,
            ),
            now=now,
        )

    def _finish(self, pod: SimPod, ereq: EngineRequest, now: float) -> None:
        p = self.pending.pop(ereq.request_id)
        sim = p.sim
        record = p.record
        record.status = 200
        record.output_tokens = ereq.output_tokens
        record.cached_tokens = ereq.cached_tokens
        record.preemptions = ereq.preemptions
        record.ttft = None if ereq.first_token_at is None else ereq.first_token_at - record.arrival
        record.itl = ereq.mean_itl
        record.e2e = now - record.arrival
        if ereq.first_scheduled_at is not None:
            record.queue_time = ereq.first_scheduled_at - ereq.arrival
        pod.inflight -= 1
        pod.inflight_tokens -= sim.prompt_tokens + sim.output_tokens
        self.policy.on_complete(
            RequestOutcome(
                request_id=sim.request_id,
                endpoint=pod.key,
                ok=True,
                ttft_s=None if ereq.first_token_at is None else ereq.first_token_at - ereq.arrival,
                itl_s=record.itl,
                prompt_tokens=sim.prompt_tokens,
                output_tokens=ereq.output_tokens,
                cached_tokens=ereq.cached_tokens,
            ),
            now=now,
        )
