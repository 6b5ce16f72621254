"""One pod inside the DES: its engine, what the router last scraped from it, and its faults.

Scrapes are lazy (see :meth:`SimPod.observe`): a pod is snapshotted only when its state is about to
change after a scrape tick, which is exactly periodic scraping at a fraction of the cost.

With ``idle_limit`` set, a pod is scraped as the gateway paces it (:mod:`igw.gateway.scrape_pacing`):
an idle pod - the snapshot unchanged, nothing queued or running, nothing of the router's in flight,
no dispatch since the scrape before - is scraped ever less often, up to ``idle_limit`` apart, and at
every tick again from the first dispatch.
"""

from __future__ import annotations

import math
import random

from igw.gateway.scrape_pacing import IdlePacing
from igw.scheduling.types import EndpointKey, EndpointView, EngineMetrics
from igw.sim import decode_run
from igw.sim.des_result import PodSeries, SimulationError
from igw.sim.engine import Batch, Engine
from igw.sim.metrics_page import sglang_publishes_capacity
from igw.sim.spec import EngineKind, FaultKind, FaultSpec, PodSpec


def pod_key(index: int) -> EndpointKey:
    """The DES's stand-in pod address (``10.x.y.z:8000``, like a pod IP and target port)."""
    return f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}:8000"


class SimPod:
    """One pod inside the DES: engine, scrape state, router bookkeeping."""

    __slots__ = (
        "batch",
        "engine",
        "error_rate",
        "error_status",
        "event_seq",
        "frozen",
        "hung",
        "idle_limit",
        "index",
        "inflight",
        "inflight_tokens",
        "key",
        "killed",
        "labels",
        "metrics",
        "next_due",
        "pacing",
        "phase",
        "picks",
        "publishes",
        "run",
        "sample_interval",
        "sample_k",
        "scrape_interval",
        "scrape_k",
        "scraped_at",
        "scrapes",
        "series",
        "spec",
        "stalled",
        "step_end",
        "view",
    )

    def __init__(
        self,
        *,
        index: int,
        spec: PodSpec,
        rng: random.Random,
        scrape_interval: float,
        sample_interval: float,
        idle_limit: float | None = None,
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
            priority=spec.priority_scheduling(),
        )
        self.batch: Batch | None = None
        self.inflight = 0
        self.inflight_tokens = 0
        self.picks = 0
        """Requests the router dispatched here, ever (a dispatch ends an idle pace)."""
        self.scrapes = 0
        """Scrape ticks taken: the scrape requests a gateway would have sent (lazily, only the last
        of a run of ticks over which nothing changed is snapshotted)."""
        self.pacing = None if idle_limit is None else IdlePacing()
        self.idle_limit = idle_limit or scrape_interval
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
        self.error_status = 500
        """The status of an ``error_rate`` fault's refusals (its ``status``)."""
        self.metrics: EngineMetrics | None = None
        self.scraped_at: float | None = None
        self.view: EndpointView | None = None
        self.hung = False
        self.stalled = False
        """A step ended while the pod was hung; it completes when the hang ends."""
        self.step_end = 0.0
        """When the step in progress (``batch``) ends: the time of its pending step event."""
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
            self.error_status = fault.status
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
                if self.pacing is None:
                    self.scrapes += k_scrape - self.scrape_k
                    self._scrape(self.phase + k_scrape * interval)
                else:
                    self._paced(k_scrape)
            if k_sample > self.sample_k:
                first = self.sample_k + 1
                self._sample(first * si)
                if k_sample > first:
                    self._sample(k_sample * si)
        else:
            events = [(k * si, 0) for k in range(self.sample_k + 1, k_sample + 1)]
            tick = self.phase + k_scrape * interval
            if k_scrape > self.scrape_k and (
                self.pacing is None
                or self.pacing.due(tick, picks=self.picks, inflight=self.inflight, interval_s=interval)
            ):
                self.scrapes += k_scrape - self.scrape_k  # running: every tick is due
                events.append((tick, 1))
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

    def _paced(self, k_last: int) -> None:
        """Take the scrape ticks in ``(scrape_k, k_last]`` that the gateway's pacing takes; the state
        is constant over them, so where every tick is due (requests in flight, or the pod cannot be
        scraped) only the last one matters."""
        pace, interval = self.pacing, self.scrape_interval
        assert pace is not None
        if self.inflight > 0 or not self._scrapable():
            self.scrapes += k_last - self.scrape_k
            self._scrape(self.phase + k_last * interval)
            return
        k = self.scrape_k + 1
        while k <= k_last:
            tick = self.phase + k * interval
            if pace.due(tick, picks=self.picks, inflight=self.inflight, interval_s=interval):
                self.scrapes += 1
                self._scrape(tick)
                k += 1
            else:  # on to the first tick at which its gap has passed
                k += max(1, math.ceil((pace.started + pace.gap - interval / 2 - tick) / interval - 1e-9))

    def _scrapable(self) -> bool:
        return self.publishes and not self.killed and not self.hung

    def _scrape(self, tick: float) -> None:
        quiet = False
        if self._scrapable():
            if not (self.frozen and self.metrics is not None):
                snapshot = self._snapshot()
                e = self.engine
                quiet = snapshot == self.metrics and not (e.num_waiting or e.num_running or self.inflight)
                self.metrics = snapshot
            self.scraped_at = tick
            self.view = None
        if self.pacing is not None:
            self.pacing.scraped(
                tick, picks=self.picks, quiet=quiet, interval_s=self.scrape_interval, limit_s=self.idle_limit
            )

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
            if not sglang_publishes_capacity(self.spec.version):
                return EngineMetrics(waiting=e.num_waiting, running=e.num_running, kv_usage=e.pool.usage)
            return EngineMetrics(
                waiting=e.num_waiting,
                running=e.num_running,
                kv_usage=e.pool.usage,
                block_size=e.block_size,
                num_gpu_blocks=e.pool.num_blocks,
            )
        if self.spec.engine is EngineKind.TGI:
            return EngineMetrics(waiting=e.num_waiting, running=e.num_running)  # no KV-cache gauge
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
