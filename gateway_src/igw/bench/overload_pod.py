"""The ``overload-priority`` scenario against one model server with its own batch and queue (DES).

The pool model of :mod:`igw.bench.overload_des` hands a freed slot out at once and has no model
server queue, so it cannot show what the per-endpoint places (``maxEndpointQueue``, ``keepSlots``,
``slotWait``) do: there a Critical request never waits behind lower-band requests *at the pod*. This
model has the live benchmark's shape instead: one pod running at most ``batch`` sequences, the rest
waiting in its own first-come queue, each sequence holding its slot for a short prefill and a fixed
decode (a fixed number of output tokens); the gateway in front is the real
:class:`~igw.scheduling.flow_control.FlowController` deciding on every arrival and completion
whether a request goes to the pod or waits in its band's queue (headroom, per-endpoint places with
the pod's batch known and its capacity estimated over a sliding window by
:class:`~igw.scheduling.flow_control.CapacityEstimate`, the higher bands' arrival rates counted on
arrival, TTL and displacement). What it leaves out: scrape lag and the
poll interval (the live gateway sees the pod through its own in-flight count, which has no lag,
and re-checks every ``pollInterval``).

The arms replay the same request list with the default bands (``slot-wait``), with Standard's
``slotWait`` left out (``fixed-slot``: one kept slot, always) and without per-endpoint places
(``no-places``); the unloaded reference is ``slot-wait`` at half the pod's capacity.

Two pod timings: :class:`PodScenario`'s default (a 10-30 ms prefill, as first modelled) and
:data:`LIVE_POD`, the live benchmark's simulated vLLM pod (a first token one engine step after the
step running on arrival, 32 steps in all). The 2x bound is relative to the unloaded time to first
token, so the shorter the pod's own first token, the less of a wait for a batch slot it tolerates;
:func:`kept_slots_markdown` is the trade-off curve (slots kept free for Critical against Critical's
tail and the share of the pod used).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from igw.bench.overload_des import BAND_NAMES, DEFAULT_MIX, Arrival, TrafficClass, poisson_streams
from igw.bench.stats import percentile
from igw.scheduling.engine_priority import EnginePriority
from igw.scheduling.flow_control import (
    CRITICAL,
    DEFAULT_SLOT_WAIT_S,
    STANDARD,
    CapacityEstimate,
    EndpointLoad,
    FlowController,
    FlowControlSettings,
    least_wait,
)

POD_ARMS: Final = ("slot-wait", "fixed-slot", "no-places")
SLOT_WAITS_S: Final = (0.005, 0.010, 0.015, 0.025)
"""The values of Standard's ``slotWait`` the sweep table compares (the default among them)."""
STEER_ARMS: Final = ("slot-wait", "no-steer")
"""The arms of the several-pod variant: the defaults, and the same without sending Critical to the
pod with the smallest predicted wait (the scheduler's pick stands)."""
COMPLETION_WINDOW_S: Final = 30.0
"""How far back completions count towards the pod's measured completion rate (the gateway's
default ``drainWindow``)."""
UNLOADED: Final = 0.5


@dataclass(frozen=True, slots=True)
class PodScenario:
    batch: int = 8
    """Sequences the pod runs at once (the live benchmark's ``max_num_seqs``)."""
    prefill_s: tuple[float, float] = (0.010, 0.030)
    """Uniform range of the time to first token once a request holds a slot."""
    decode_s: float = 0.19
    """The rest of a request's time in its slot (a fixed number of output tokens)."""
    queue_threshold: int = 5
    """The scheduler answers ``SATURATED`` while more than this many wait at the pod."""
    load: float = 1.5
    duration_s: float = 60.0
    mix: tuple[TrafficClass, ...] = DEFAULT_MIX
    pods: int = 1
    """Pods behind the gateway, each with its own batch and queue."""

    @property
    def capacity_rps(self) -> float:
        return self.pods * self.batch / (sum(self.prefill_s) / 2 + self.decode_s)


LIVE_STEP_S: Final = 0.0066
"""The live benchmark pod's engine step (``llama-3.1-8b/h100`` at a batch of 8 or fewer short
sequences: 6.60 ms with no sequence running, 6.61 ms with eight, so prefill contention is nil)."""
LIVE_POD: Final = PodScenario(prefill_s=(LIVE_STEP_S, 2 * LIVE_STEP_S), decode_s=31 * LIVE_STEP_S)
"""The live benchmark's pod: the first token comes at the end of the step after the one running on
arrival (one to two steps), the other 31 tokens one step each."""
KEPT_SLOTS: Final = tuple(range(8))
"""The fixed ``keepSlots`` values of the trade-off table (every one an 8-sequence pod allows)."""


def pod_arrivals(scenario: PodScenario, seed: int) -> list[Arrival]:
    """One Poisson stream per traffic class at ``load`` times the pod's capacity."""
    rng = random.Random(seed)
    timed = poisson_streams(rng, scenario.load * scenario.capacity_rps, scenario.duration_s, scenario.mix)
    out = []
    for index, (at, tenant, priority) in enumerate(timed):
        prefill = rng.uniform(*scenario.prefill_s)
        out.append(Arrival(index, at, tenant, priority, prefill, prefill + scenario.decode_s))
    return out


def arm_settings(arm: str) -> FlowControlSettings:
    """The flow-control settings of one arm (see the module docstring)."""
    settings = FlowControlSettings()
    if arm in ("slot-wait", "no-steer"):
        return settings
    if arm == "fixed-slot":
        bands = {p: dataclasses.replace(b, slot_wait_s=None) for p, b in settings.bands.items()}
    elif arm == "no-places":
        bands = {
            p: dataclasses.replace(b, slot_wait_s=None, keep_slots=0, max_endpoint_queue=None)
            for p, b in settings.bands.items()
        }
    else:
        raise ValueError(
            f"unknown pod arm {arm!r}; expected one of {', '.join((*POD_ARMS, *STEER_ARMS[1:]))}"
        )
    return dataclasses.replace(settings, bands=bands)


@dataclass(slots=True)
class PodOutcome:
    ttft_s: dict[int, float] = dataclasses.field(default_factory=dict)
    """Request index -> time to first token, for requests that were served."""
    shed: set[int] = dataclasses.field(default_factory=set)
    started_in_window: int = 0
    """Requests that got a batch slot while traffic was offered."""
    most_running: int = 0
    preemptions: int = 0
    """Running requests the engine preempted for a more important one (``engine``)."""
    decode_s: dict[int, float] = dataclasses.field(default_factory=dict)
    """Request index -> time from its first token to its last, for requests that finished (a
    preempted request's pause and recompute included)."""


_ARRIVE: Final = 0
_FINISH: Final = 1


class _Pod:
    """The model server: ``batch`` slots and a first-come queue (ordered by band, most important
    first, where the engine schedules by priority)."""

    def __init__(self, batch: int, *, by_priority: bool = False) -> None:
        self.batch = batch
        self.running = 0
        self.queue: deque[Arrival] = deque()
        self.by_priority = by_priority
        self.finished: deque[float] = deque()
        self.capacity = CapacityEstimate(COMPLETION_WINDOW_S)
        self.slots: dict[int, tuple[Arrival, float]] = {}
        """Running requests: index -> (request, when it ends)."""
        self.bands: collections.Counter[int] = collections.Counter()
        """Requests the gateway sent here that have not finished, per band (its in-flight ledger)."""

    def enqueue(self, request: Arrival, *, front: bool = False) -> None:
        if not self.by_priority:
            if front:
                self.queue.appendleft(request)
            else:
                self.queue.append(request)
            return
        key = (-request.priority, request.index)
        i = len(self.queue)
        while i > 0 and (-self.queue[i - 1].priority, self.queue[i - 1].index) > key:
            i -= 1
        self.queue.insert(i, request)

    @property
    def occupancy(self) -> int:
        return self.running + len(self.queue)

    def completion_rate(self, now: float) -> float | None:
        while self.finished and self.finished[0] < now - COMPLETION_WINDOW_S:
            self.finished.popleft()
        if not self.finished:
            return None
        return len(self.finished) / min(COMPLETION_WINDOW_S, max(now, 1.0))

    def load(self, now: float) -> EndpointLoad:
        occupancy = self.occupancy
        rate = self.capacity.capacity(now, completion_rate=self.completion_rate(now), batch=self.batch)
        return EndpointLoad(
            waiting=max(0, occupancy - self.batch),
            occupancy=occupancy,
            batch=self.batch,
            completion_rate=rate,
            pool_completion_rate=rate,
        )


def simulate_pod(
    scenario: PodScenario,
    requests: Sequence[Arrival],
    settings: FlowControlSettings,
    *,
    steer: bool = True,
    seed: int = 0,
    engine: EnginePriority | None = None,
) -> PodOutcome:
    """Replay ``requests`` through the gateway's flow control in front of ``scenario.pods`` pods;
    virtual time.

    The scheduler is modelled as ranking the pods that are not saturated in a random order (a
    stand-in for scorers that look at other things than free batch slots, such as prefix-cache
    affinity); with ``steer``, a request of the top band then goes to the candidate with the
    smallest predicted wait (:func:`~igw.scheduling.flow_control.least_wait`), as in the gateway.
    A pick onto a pod without a place for the band is not sent (the request waits), as in the gate.

    With ``engine`` (``enginePriority``), the pod's engine schedules by the requests' bands as
    SGLang's priority scheduler does: its queue is ordered by band, and a request that finds the
    batch full preempts the least important (then latest started) running request its band
    preempts; the preempted request goes back to the queue and, when it runs again, recomputes its
    prompt and output (a prefill) and then finishes the rest of its decode. The gateway then keeps
    no slots (:meth:`FlowController.slots_kept`), and a top-band request that finds every pod
    saturated goes to one running a lower band with fewer top-band requests than its batch.
    """
    outcome = PodOutcome()
    controller = FlowController(settings, engine_priority=engine)
    preempting = engine is not None and engine.preempts_for_slot
    pods = {f"pod-{i}": _Pod(scenario.batch, by_priority=engine is not None) for i in range(scenario.pods)}
    ranking = random.Random(seed)
    by_index = {r.index: r for r in requests}
    where: dict[int, _Pod] = {}
    events: list[tuple[float, int, int, int]] = [(r.at, _ARRIVE, r.index, 0) for r in requests]
    heapq.heapify(events)
    runs: dict[int, int] = {}
    """Request index -> its current run (a preempted request's finish event of an earlier run is stale)."""
    left_s: dict[int, float] = {}
    """A preempted request's decode still to do."""
    first_token: dict[int, float] = {}

    def start(pod: _Pod, request: Arrival, now: float) -> None:
        index = request.index
        pod.running += 1
        pod.capacity.observe(now, pod.running)
        outcome.most_running = max(outcome.most_running, pod.running)
        run = runs.get(index, 0) + 1
        runs[index] = run
        if run == 1:
            outcome.started_in_window += now < scenario.duration_s
            service = request.service_s
        else:  # recompute the prompt and what was generated, then the rest of the decode
            service = request.prefill_s + left_s.pop(index)
        if index not in first_token:
            first_token[index] = now + request.prefill_s
            outcome.ttft_s[index] = now - request.at + request.prefill_s
        where[index] = pod
        pod.slots[index] = (request, now + service)
        heapq.heappush(events, (now + service, _FINISH, index, run))

    def preempt(pod: _Pod, request: Arrival, now: float) -> bool:
        """Free a slot for ``request`` by preempting a running request its band preempts."""
        assert engine is not None
        victims = [r for r, _ in pod.slots.values() if engine.preempts(request.priority, r.priority)]
        if not victims:
            return False
        victim = min(victims, key=lambda r: (r.priority, -pod.slots[r.index][1]))
        _, ends = pod.slots.pop(victim.index)
        runs[victim.index] += 1  # its pending finish event is stale now
        pod.running -= 1
        pod.capacity.observe(now, pod.running)
        if first_token[victim.index] > now:  # still in its prefill: its first token is yet to come
            del first_token[victim.index]
            del outcome.ttft_s[victim.index]
            left_s[victim.index] = victim.service_s - victim.prefill_s
        else:
            left_s[victim.index] = ends - now
        outcome.preemptions += 1
        pod.enqueue(victim)
        return True

    def send(pod: _Pod, request: Arrival, now: float) -> None:
        pod.bands[request.priority] += 1
        if pod.running < pod.batch or (preempting and preempt(pod, request, now)):
            start(pod, request, now)
        else:
            pod.enqueue(request)

    def preemptible(priority: int) -> _Pod | None:
        """The pod a saturated top-band request goes to where the engine preempts for it."""
        if not preempting or not controller.steers(priority):
            return None
        assert engine is not None
        best: tuple[int, _Pod] | None = None
        for pod in pods.values():
            lower = sum(n for band, n in pod.bands.items() if engine.preempts(priority, band))
            above = sum(n for band, n in pod.bands.items() if band >= priority)
            if lower > 0 and above < pod.batch and (best is None or lower > best[0]):
                best = (lower, pod)
        return None if best is None else best[1]

    def loads(now: float) -> dict[str, EndpointLoad]:
        each = {key: pod.load(now) for key, pod in pods.items()}
        rates = [load.completion_rate for load in each.values() if load.completion_rate is not None]
        pool = sum(rates) if rates else None
        return {key: dataclasses.replace(load, pool_completion_rate=pool) for key, load in each.items()}

    def placed(priority: int, now: float) -> _Pod | None:
        """The pod a request of ``priority`` goes to now, or ``None`` when it must wait."""
        open_pods = [key for key, pod in pods.items() if len(pod.queue) <= scenario.queue_threshold]
        if not open_pods:
            return preemptible(priority)  # the scheduler answers SATURATED
        utilisation = sum(
            min(1.0, len(pod.queue) / (scenario.queue_threshold + 1)) for pod in pods.values()
        ) / len(pods)
        if not controller.admits(priority, utilisation):
            return preemptible(priority)
        now_loads = loads(now)
        if not any(controller.admits_to(priority, load, now=now) for load in now_loads.values()):
            return None
        ranking.shuffle(open_pods)
        pick = open_pods[0]
        if steer and controller.steers(priority):
            pick = least_wait(open_pods, now_loads) or pick
        return pods[pick] if controller.admits_to(priority, now_loads[pick], now=now) else None

    def pump(now: float) -> None:
        while (item := controller.peek(now)) is not None and (pod := placed(item.priority, now)) is not None:
            controller.take(item, now)
            send(pod, by_index[int(item.request_id)], now)

    while events:
        now, kind, index, run = heapq.heappop(events)
        outcome.shed.update(int(s.request.request_id) for s in controller.expire(now))
        if kind == _FINISH:
            if runs.get(index) != run:
                continue  # the run was preempted
            pod = where.pop(index)
            pod.running -= 1
            pod.slots.pop(index, None)
            pod.bands[by_index[index].priority] -= 1
            outcome.decode_s[index] = now - first_token[index]
            pod.finished.append(now)
            pod.capacity.observe(now, pod.running)
            if pod.queue:
                start(pod, pod.queue.popleft(), now)
            pump(now)
            continue
        request = by_index[index]
        controller.arrived(request.priority, now)
        if not controller.queued_at_or_above(request.priority):
            target = placed(request.priority, now)
            if target is not None:
                send(target, request, now)
                continue
        offer = controller.offer(
            request_id=str(index), priority=request.priority, tenant=request.tenant, size_bytes=1024, now=now
        )
        outcome.shed.update(int(s.request.request_id) for s in offer.displaced)
        if not offer.queued:
            outcome.shed.add(index)
    outcome.shed.update(int(s.request.request_id) for s in controller.expire(math.inf))  # never placed
    return outcome


@dataclass(frozen=True, slots=True)
class PodRow:
    arm: str
    critical_p99_s: float | None
    served: dict[str, float]
    """Band name -> share of its offered requests that were served."""
    started_per_capacity: float


def pod_rows(
    scenario: PodScenario, seed: int, arms: Sequence[str] = POD_ARMS
) -> tuple[list[PodRow], float | None]:
    """One row per arm under overload, and the unloaded Critical P99 TTFT (``slot-wait``)."""
    requests = pod_arrivals(scenario, seed)
    rows = [_row(arm, scenario, requests, seed) for arm in arms]
    calm_scenario = dataclasses.replace(scenario, load=UNLOADED)
    calm = _row("slot-wait", calm_scenario, pod_arrivals(calm_scenario, seed), seed)
    return rows, calm.critical_p99_s


def _row(arm: str, scenario: PodScenario, requests: Sequence[Arrival], seed: int) -> PodRow:
    return _measured(scenario, requests, arm_settings(arm), seed, arm=arm)


def _measured(
    scenario: PodScenario,
    requests: Sequence[Arrival],
    settings: FlowControlSettings,
    seed: int,
    *,
    arm: str = "slot-wait",
) -> PodRow:
    outcome = simulate_pod(scenario, requests, settings, steer=arm != "no-steer", seed=seed)
    critical = sorted(
        outcome.ttft_s[r.index] for r in requests if r.priority == CRITICAL and r.index in outcome.ttft_s
    )
    served: dict[str, float] = {}
    for priority, band in BAND_NAMES.items():
        mine = [r for r in requests if r.priority == priority]
        served[band] = sum(r.index in outcome.ttft_s for r in mine) / max(len(mine), 1)
    rate = outcome.started_in_window / scenario.duration_s
    return PodRow(arm, percentile(critical, 99) if critical else None, served, rate / scenario.capacity_rps)


def pod_markdown(
    scenario: PodScenario, seed: int, arms: Sequence[str] = POD_ARMS, *, title: str | None = None
) -> str:
    """The pod model's table: Critical P99 against the unloaded one, what each band was served."""
    rows, calm_p99 = pod_rows(scenario, seed, arms)
    if title is None:
        title = "One pod" if scenario.pods == 1 else f"{scenario.pods} pods, each"
    lines = [
        "",
        f"## {title} with its own batch and queue (seed {seed})",
        "",
        f"Pods: {scenario.pods}, batch {scenario.batch}, capacity {scenario.capacity_rps:.1f} req/s, offered "
        f"{scenario.load:.0%} of it for {scenario.duration_s:g} s. Unloaded ({UNLOADED:.0%}) Critical "
        f"P99 TTFT: {'-' if calm_p99 is None else f'{calm_p99:.3f}'} s.",
        "",
        "| arm | Critical P99 TTFT s | / unloaded | Critical served | Standard served | Sheddable served "
        "| started / capacity |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p99 = "-" if r.critical_p99_s is None else f"{r.critical_p99_s:.3f}"
        ratio = "-" if r.critical_p99_s is None or not calm_p99 else f"{r.critical_p99_s / calm_p99:.2f}x"
        lines.append(
            f"| {r.arm} | {p99} | {ratio} | {r.served['Critical']:.1%} | {r.served['Standard']:.1%} "
            f"| {r.served['Sheddable']:.1%} | {r.started_per_capacity:.1%} |"
        )
    return "\n".join(lines) + "\n"


def with_slot_wait(slot_wait_s: float) -> FlowControlSettings:
    """The default bands with Standard's ``slotWait`` set to ``slot_wait_s``."""
    settings = FlowControlSettings()
    bands = dict(settings.bands)
    bands[STANDARD] = dataclasses.replace(bands[STANDARD], slot_wait_s=slot_wait_s)
    return dataclasses.replace(settings, bands=bands)


def slot_wait_markdown(scenario: PodScenario, seed: int, waits: Sequence[float] = SLOT_WAITS_S) -> str:
    """Critical's P99 against the unloaded one, and the pod used, for each ``slotWait`` of Standard
    (the measurements behind its default)."""
    requests = pod_arrivals(scenario, seed)
    calm_scenario = dataclasses.replace(scenario, load=UNLOADED)
    calm_requests = pod_arrivals(calm_scenario, seed)
    lines = [
        "",
        f"## Standard's slotWait, one pod (seed {seed})",
        "",
        "| slotWait | Critical P99 TTFT s | unloaded s | / unloaded | Standard served | started / capacity |",
        "|---|---|---|---|---|---|",
    ]
    for wait in waits:
        settings = with_slot_wait(wait)
        hot = _measured(scenario, requests, settings, seed)
        calm = _measured(calm_scenario, calm_requests, settings, seed)
        ratio = (
            "-"
            if hot.critical_p99_s is None or not calm.critical_p99_s
            else (f"{hot.critical_p99_s / calm.critical_p99_s:.2f}x")
        )
        default = " (default)" if wait == DEFAULT_SLOT_WAIT_S else ""
        p99s = f"{_seconds(hot.critical_p99_s)} | {_seconds(calm.critical_p99_s)}"
        lines.append(
            f"| {wait * 1000:g} ms{default} | {p99s} "
            f"| {ratio} | {hot.served['Standard']:.1%} | {hot.started_per_capacity:.1%} |"
        )
    return "\n".join(lines) + "\n"


def with_kept_slots(kept: int) -> FlowControlSettings:
    """The default bands with Standard and Sheddable keeping exactly ``kept`` batch slots (no
    ``slotWait``)."""
    settings = FlowControlSettings()
    bands = {
        p: dataclasses.replace(b, slot_wait_s=None, keep_slots=kept) if p < CRITICAL else b
        for p, b in settings.bands.items()
    }
    return dataclasses.replace(settings, bands=bands)


def kept_slots_markdown(
    scenario: PodScenario, seed: int, kept: Sequence[int] = KEPT_SLOTS, *, title: str = "One pod"
) -> str:
    """The trade-off curve: for each fixed number of slots kept for Critical, its P99 against the
    unloaded one (the defaults at half the capacity), what Standard was served and the pod used;
    the defaults (``slotWait``) last for comparison."""
    requests = pod_arrivals(scenario, seed)
    calm_scenario = dataclasses.replace(scenario, load=UNLOADED)
    calm = _measured(calm_scenario, pod_arrivals(calm_scenario, seed), FlowControlSettings(), seed)
    lines = [
        "",
        f"## Slots kept for Critical against its tail, {title.lower()} (seed {seed})",
        "",
        f"Capacity {scenario.capacity_rps:.1f} req/s, batch {scenario.batch}, first token "
        f"{scenario.prefill_s[0] * 1000:g}-{scenario.prefill_s[1] * 1000:g} ms after a slot; unloaded "
        f"Critical P99 TTFT {_seconds(calm.critical_p99_s)} s.",
        "",
        "| keepSlots | Critical P99 TTFT s | / unloaded | Standard served | started / capacity |",
        "|---|---|---|---|---|",
    ]
    variants = [(str(k), with_kept_slots(k)) for k in kept if k < scenario.batch]
    variants.append((f"slotWait {DEFAULT_SLOT_WAIT_S * 1000:g} ms (default)", FlowControlSettings()))
    for label, settings in variants:
        hot = _measured(scenario, requests, settings, seed)
        ratio = (
            "-"
            if hot.critical_p99_s is None or not calm.critical_p99_s
            else f"{hot.critical_p99_s / calm.critical_p99_s:.2f}x"
        )
        lines.append(
            f"| {label} | {_seconds(hot.critical_p99_s)} | {ratio} | {hot.served['Standard']:.1%} "
            f"| {hot.started_per_capacity:.1%} |"
        )
    return "\n".join(lines) + "\n"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
