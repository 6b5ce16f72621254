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
includes the back-off. Faults supported here: ``slow``, ``error_rate``, ``freeze_metrics`` and ``kill``
(scrapes fail, dispatch fails over to the decision's fallbacks); ``hang`` and ``die_mid_stream`` are
live-only and rejected with a clear error.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from igw.scheduling.types import (
    DecisionKind,
    EndpointKey,
    EndpointView,
    EngineMetrics,
    RequestOutcome,
    RoutingPolicy,
    RoutingRequest,
)
from igw.sim import decode_run
from igw.sim.engine import Batch, Engine, EngineRequest, RequestRejected
from igw.sim.request import SimRequest
from igw.sim.spec import EngineKind, FaultKind, FaultSpec, PodSpec
from igw.sim.tokens import request_block_hashes
from igw.sim.truth import PodTruth


class SimulationError(ValueError):
    """The simulation cannot run as asked (bad input named in the message)."""


@dataclass(slots=True)
class RequestRecord:
    """Outcome of one workload request."""

    request_id: str
    arrival: float
    pod: EndpointKey | None
    status: int
    """200 served; 429 saturated; 503 no endpoints; 400 rejected by the engine; 404 unknown adapter;
    5xx injected errors or a dead pod."""
    prompt_tokens: int
    output_tokens: int = 0
    cached_tokens: int = 0
    ttft: float | None = None
    itl: float | None = None
    e2e: float | None = None
    queue_time: float | None = None
    preemptions: int = 0
    attempts: int = 1
    retry_after_s: float | None = None
    model: str = ""
    group: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def preempted(self) -> bool:
        return self.preemptions > 0

    @property
    def rejected(self) -> bool:
        return self.status in (429, 503)


@dataclass(slots=True)
class PodSeries:
    """Regularly sampled state of one pod (a step function: each value holds until the next sample)."""

    times: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    kv_usage: list[float] = field(default_factory=list)


@dataclass(slots=True)
class SimulationResult:
    records: list[RequestRecord]
    series: dict[EndpointKey, PodSeries]
    pods: dict[EndpointKey, PodSpec]
    policy_name: str
    seed: int
    scrape_interval_s: float
    end_time: float
    steps: int

    def served(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    def summary(self) -> dict[str, Any]:
        """Headline numbers (TTFT/ITL/E2E percentiles over served requests, rejection counts)."""
        served = self.served()
        ttft = sorted(r.ttft for r in served if r.ttft is not None)
        itl = sorted(r.itl for r in served if r.itl is not None)
        e2e = sorted(r.e2e for r in served if r.e2e is not None)
        out_tokens = sum(r.output_tokens for r in served)
        return {
            "policy": self.policy_name,
            "requests": len(self.records),
            "served": len(served),
            "rejected_429": sum(1 for r in self.records if r.status == 429),
            "rejected_503": sum(1 for r in self.records if r.status == 503),
            "errors": sum(1 for r in self.records if not r.ok and not r.rejected),
            "preempted": sum(1 for r in served if r.preempted),
            "ttft_p50": percentile(ttft, 50),
            "ttft_p95": percentile(ttft, 95),
            "ttft_p99": percentile(ttft, 99),
            "itl_p50": percentile(itl, 50),
            "e2e_p50": percentile(e2e, 50),
            "output_tokens_per_s": out_tokens / self.end_time if self.end_time > 0 else 0.0,
            "cached_token_fraction": (
                sum(r.cached_tokens for r in served) / max(1, sum(r.prompt_tokens for r in served))
            ),
            "sim_seconds": self.end_time,
            "engine_steps": self.steps,
        }


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def pod_key(index: int) -> EndpointKey:
    """The DES's stand-in pod address (``10.x.y.z:8000``, like a pod IP and target port)."""
    return f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}:8000"


class _SimPod:
    """One pod inside the DES: engine, scrape state, router bookkeeping."""

    __slots__ = (
        "batch",
        "engine",
        "error_rate",
        "event_seq",
        "frozen",
        "hung",
        "index",
        "inflight",
        "inflight_tokens",
        "key",
        "killed",
        "labels",
        "metrics",
        "next_due",
        "phase",
        "publishes",
        "run",
        "sample_interval",
        "sample_k",
        "scrape_interval",
        "scrape_k",
        "scraped_at",
        "series",
        "spec",
        "stalled",
        "view",
    )

    def __init__(
        self, *, index: int, spec: PodSpec, rng: random.Random, scrape_interval: float, sample_interval: float
    ) -> None:
        self.index = index
        self.spec = spec
        self.key = pod_key(index)
        self.labels = dict(spec.labels)
        self.engine = Engine(
            preset=spec.resolved_preset(),
            rng=random.Random(rng.getrandbits(64)),
            jitter_sigma=spec.jitter_sigma,
            prefix_caching=spec.prefix_caching,
            max_loras=spec.effective_max_loras,
        )
        self.batch: Batch | None = None
        self.inflight = 0
        self.inflight_tokens = 0
        self.scrape_interval = scrape_interval
        self.phase = rng.random() * scrape_interval
        self.scrape_k = -1
        """Index of the last scrape tick taken (ticks at ``phase + k * interval``)."""
        self.sample_k = -1
        """Index of the last sample taken (samples at ``k * sample_interval``)."""
        self.next_due = 0.0
        self.run: decode_run.DecodeRun | None = None
        self.event_seq = 0
        """Heap sequence number of this pod's valid step-end event (older ones are stale)."""
        self.sample_interval = sample_interval
        self.series = PodSeries()
        self.publishes = spec.exposes_metrics
        self.killed = False
        self.frozen = False
        self.error_rate = 0.0
        self.metrics: EngineMetrics | None = None
        self.scraped_at: float | None = None
        self.view: EndpointView | None = None
        self.hung = False
        self.stalled = False
        """A step ended while the pod was hung; it completes when the hang ends."""
        for fault in spec.faults:
            if fault.kind is FaultKind.DIE_MID_STREAM:
                raise SimulationError(
                    f"pod {spec.name!r}: fault {fault.kind.value!r} is only supported by the live fleet"
                )
            if fault.start_s == 0:
                self.set_fault(fault, active=True)

    def set_fault(self, fault: FaultSpec, *, active: bool) -> None:
        """Switch the flags of one fault (side effects on requests are the runner's job)."""
        kind = fault.kind
        if kind is FaultKind.SLOW:
            self.engine.slowdown = fault.factor if active else 1.0
        elif kind is FaultKind.ERROR_RATE:
            self.error_rate = fault.rate if active else 0.0
        elif kind is FaultKind.FREEZE_METRICS:
            self.frozen = active
        elif kind is FaultKind.KILL:
            self.killed = active
        elif kind is FaultKind.HANG:
            self.hung = active
        self.view = None

    def observe(self, now: float) -> None:
        """Take the scrapes/samples due at ticks <= ``now``.

        Must be called before every change of the engine's state at time ``now``. Without a decode run
        the state has been constant since the last change, so the latest scrape tick and the missed
        sample ticks all see the current state. During a decode run the state changes at every step,
        so the run is materialised at each tick in time order first.
        """
        if now < self.next_due:
            return
        interval = self.scrape_interval
        si = self.sample_interval
        k_scrape = math.floor((now - self.phase) / interval)
        k_sample = math.floor(now / si)
        run = self.run
        if run is None:
            if k_scrape > self.scrape_k:
                self._scrape(self.phase + k_scrape * interval)
            if k_sample > self.sample_k:
                first = self.sample_k + 1
                self._sample(first * si)
                if k_sample > first:
                    self._sample(k_sample * si)
        else:
            events = [(k * si, 0) for k in range(self.sample_k + 1, k_sample + 1)]
            if k_scrape > self.scrape_k:
                events.append((self.phase + k_scrape * interval, 1))
            events.sort()
            for tau, kind in events:
                decode_run.advance(self.engine, run, tau)
                if kind:
                    self._scrape(tau)
                else:
                    self._sample(tau)
            decode_run.advance(self.engine, run, now)
        if k_scrape > self.scrape_k:
            self.scrape_k = k_scrape
        if k_sample > self.sample_k:
            self.sample_k = k_sample
        self.next_due = min(self.phase + (self.scrape_k + 1) * interval, (self.sample_k + 1) * si)

    def _scrape(self, tick: float) -> None:
        if self.publishes and not self.killed and not self.hung:
            if not (self.frozen and self.metrics is not None):
                self.metrics = self._snapshot()
            self.scraped_at = tick
            self.view = None

    def _sample(self, t: float) -> None:
        e = self.engine
        s = self.series
        s.times.append(t)
        s.waiting.append(e.num_waiting)
        s.running.append(e.num_running)
        s.kv_usage.append(e.pool.usage)

    def _snapshot(self) -> EngineMetrics:
        e = self.engine
        if self.spec.engine is EngineKind.SGLANG:
            return EngineMetrics(waiting=e.num_waiting, running=e.num_running, kv_usage=e.pool.usage)
        lora = self.spec.effective_max_loras > 0
        return EngineMetrics(
            waiting=e.num_waiting,
            running=e.num_running,
            kv_usage=e.pool.usage,
            active_adapters=e.running_adapters() if lora else None,
            waiting_adapters=e.waiting_adapters() if lora else None,
            max_lora=self.spec.effective_max_loras if lora else None,
            block_size=e.block_size,
            num_gpu_blocks=e.pool.num_blocks,
        )

    def endpoint_view(self) -> EndpointView:
        v = self.view
        if v is None:
            v = EndpointView(
                key=self.key,
                metrics=self.metrics,
                scraped_at=self.scraped_at,
                scrape_failing=self.killed or self.hung or not self.publishes,
                inflight=self.inflight,
                inflight_tokens=self.inflight_tokens,
                labels=self.labels,
            )
            self.view = v
        return v


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
        self.pod: _SimPod | None = None


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
) -> SimulationResult:
    """Run ``requests`` (sorted by arrival) through ``policy`` onto ``pods``; deterministic per ``seed``.

    ``base_model`` is the model name LoRA requests resolve to (default: the first pod's served model).
    ``fast_forward`` collapses pure-decode stretches into one event (:mod:`igw.sim.decode_run`); the
    records are identical either way, it only makes long runs faster.
    """
    if not pods:
        raise SimulationError("pods: at least one pod is required")
    if scrape_interval_s <= 0:
        raise SimulationError("scrape_interval_s must be > 0")
    if sample_interval_s <= 0:
        raise SimulationError("sample_interval_s must be > 0")
    rng = random.Random(seed)
    sim_pods = [
        _SimPod(
            index=i, spec=p, rng=rng, scrape_interval=scrape_interval_s, sample_interval=sample_interval_s
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
    )


class _Runner:
    def __init__(
        self,
        *,
        pods: list[_SimPod],
        by_key: dict[EndpointKey, _SimPod],
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
            for key in (decision.endpoint, *decision.fallbacks):
                target = self.by_key.get(key)
                if target is None:
                    raise SimulationError(f"policy {self.policy.name!r} picked unknown endpoint {key!r}")
                if not target.killed:
                    self._dispatch(p, target, now)
                    return
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

    def _dispatch(self, p: _Pending, pod: _SimPod, now: float) -> None:
        sim = p.sim
        record = p.record
        record.pod = pod.key
        if pod.error_rate and self.rng.random() < pod.error_rate:
            self._fail(p, pod.key, 500, now)
            return
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
        )
        if sim.adapter is not None and sim.adapter not in pod.spec.lora_adapters:
            self._fail(p, pod.key, 404, now)
            return
        try:
            pod.engine.add(ereq)
        except RequestRejected:
            self._fail(p, pod.key, 400, now)
            return
        p.engine_req = ereq
        p.pod = pod
        self.pending[sim.request_id] = p
        pod.inflight += 1
        pod.inflight_tokens += sim.prompt_tokens + sim.output_tokens
        pod.view = None
        if pod.run is not None:
            self._cut_run(pod, now)
        elif pod.batch is None and not pod.hung:
            self._start_step(pod, now)

    def _fail(self, p: _Pending, key: EndpointKey, status: int, now: float) -> None:
        p.record.status = status
        p.record.pod = key
        self.policy.on_complete(
            RequestOutcome(
                request_id=p.sim.request_id, endpoint=key, ok=False, prompt_tokens=p.sim.prompt_tokens
            ),
            now=now,
        )

    # ------------------------------------------------------------------ engines
    def _start_step(self, pod: _SimPod, now: float) -> None:
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
            pod.event_seq = self.push(now + batch.duration, _STEP, pod)

    def _cut_run(self, pod: _SimPod, now: float) -> None:
        """A request joined a pod in a decode run: the step in progress becomes an ordinary batch."""
        run = pod.run
        assert run is not None
        batch = decode_run.cut(pod.engine, run, now)
        pod.run = None
        pod.batch = batch
        pod.event_seq = self.push(run.ends[run.applied], _STEP, pod)

    def _step_end(self, pod: _SimPod, now: float) -> None:
        pod.observe(now)
        if pod.run is not None:
            pod.batch = decode_run.cut(pod.engine, pod.run, now)
            pod.run = None
        if pod.hung:
            pod.stalled = True  # the GPU is stuck: this step completes when the hang ends
            return
        batch = pod.batch
        assert batch is not None
        out = pod.engine.complete(batch, now, collect_emitted=False)
        pod.batch = None
        if out.finished:
            pod.view = None
            for ereq in out.finished:
                self._finish(pod, ereq, now)
        if pod.engine.has_work():
            self._start_step(pod, now)

    # ------------------------------------------------------------------ faults with a time window
    def _fault_event(self, pod: _SimPod, fault: FaultSpec, active: bool, *, now: float) -> None:
        pod.observe(now)
        if pod.run is not None:
            self._cut_run(pod, now)  # its precomputed steps assumed the old speed
        pod.set_fault(fault, active=active)
        if fault.kind is FaultKind.KILL and active:
            self._kill(pod, now)
        elif fault.kind is FaultKind.HANG and not active:
            if pod.stalled:
                pod.stalled = False
                self._step_end(pod, now)
            elif pod.batch is None and pod.engine.has_work():
                self._start_step(pod, now)

    def _kill(self, pod: _SimPod, now: float) -> None:
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

    def _finish(self, pod: _SimPod, ereq: EngineRequest, now: float) -> None:
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
