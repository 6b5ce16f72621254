"""The ``overload-priority`` scenario in virtual time: one pool offered more than it can serve.

A pool of ``slots`` concurrent sequences receives Poisson arrivals from several tenants in three
bands (Critical chat, Standard, Sheddable batch) at a multiple of its capacity. The same request list
(common random numbers) is replayed under three admission policies:

* ``flow-control``: the gateway's real :class:`~igw.scheduling.flow_control.FlowController` (band
  queues, tenant round-robin, capacity limits, TTL, displacement) decides who waits, who is shed and
  who goes next when a slot frees;
* ``flow-control-no-headroom``: the same with every band's ``dispatch_below`` at 1.0, so lower bands
  fill the pool up to saturation and a Critical arrival waits for a slot to finish;
* ``no-flow-control``: today's gateway without ``flowControl``: a request that finds the pool
  saturated gets 429 at once, whatever its band;
* ``round-robin``: no admission at all; the model servers queue everything in arrival order.

The pool is saturated exactly when every slot is busy, and a freed slot is handed out at once: the
live gateway sees saturation through scraped metrics and re-checks every ``pollInterval``, which
this model leaves out on purpose (it compares policies, not the scrape loop).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from igw.scheduling.flow_control import (
    CRITICAL,
    SHEDDABLE,
    STANDARD,
    FlowController,
    FlowControlSettings,
    Shed,
)


class Admission(StrEnum):
    FLOW_CONTROL = "flow-control"
    NO_HEADROOM = "flow-control-no-headroom"
    NO_FLOW_CONTROL = "no-flow-control"
    ROUND_ROBIN = "round-robin"


BAND_NAMES: Final = {CRITICAL: "Critical", STANDARD: "Standard", SHEDDABLE: "Sheddable"}


@dataclass(frozen=True, slots=True)
class TrafficClass:
    """One tenant's share of the offered load, in one band."""

    tenant: str
    priority: int
    share: float


DEFAULT_MIX: Final = (
    TrafficClass("chat", CRITICAL, 0.20),
    TrafficClass("team-a", STANDARD, 0.30),
    TrafficClass("team-b", STANDARD, 0.125),
    TrafficClass("team-c", STANDARD, 0.075),
    TrafficClass("batch-1", SHEDDABLE, 0.21),
    TrafficClass("batch-2", SHEDDABLE, 0.09),
)
"""20 % Critical, 50 % Standard (three tenants, unequal demand), 30 % Sheddable (two tenants)."""


@dataclass(frozen=True, slots=True)
class OverloadScenario:
    slots: int = 32
    """Concurrent sequences the pool serves."""
    prefill_s: tuple[float, float] = (0.04, 0.12)
    """Uniform range of the time to first token once a request holds a slot."""
    decode_mean_s: float = 1.5
    """Mean (exponential) of the rest of a request's service time."""
    load: float = 1.5
    """Offered load as a multiple of the pool's capacity."""
    duration_s: float = 300.0
    mix: tuple[TrafficClass, ...] = DEFAULT_MIX
    sample_every_s: float = 1.0

    @property
    def capacity_rps(self) -> float:
        return self.slots / (sum(self.prefill_s) / 2 + self.decode_mean_s)


@dataclass(frozen=True, slots=True)
class Arrival:
    index: int
    at: float
    tenant: str
    priority: int
    prefill_s: float
    service_s: float


@dataclass(slots=True)
class Outcome:
    """What happened to each request under one policy, plus queue depths sampled over time."""

    admission: Admission
    ttft_s: dict[int, float] = field(default_factory=dict)
    """Request index -> time to first token, for requests that were served."""
    wait_s: dict[int, float] = field(default_factory=dict)
    """Request index -> time from arrival to holding a slot (the rest of its TTFT is prefill)."""
    shed: set[int] = field(default_factory=set)
    depth_samples: list[tuple[float, dict[int, int]]] = field(default_factory=list)


def poisson_streams(
    rng: random.Random, total_rps: float, duration_s: float, mix: Sequence[TrafficClass]
) -> list[tuple[float, str, int]]:
    """Arrival times, tenants and priorities of one Poisson stream per traffic class, in time order."""
    out: list[tuple[float, str, int]] = []
    for cls in mix:
        rate = total_rps * cls.share
        t = rng.expovariate(rate)
        while t < duration_s:
            out.append((t, cls.tenant, cls.priority))
            t += rng.expovariate(rate)
    out.sort()
    return out


def arrivals(scenario: OverloadScenario, seed: int) -> list[Arrival]:
    """The request list every policy replays (one Poisson stream per traffic class)."""
    rng = random.Random(seed)
    out = poisson_streams(rng, scenario.load * scenario.capacity_rps, scenario.duration_s, scenario.mix)
    result = []
    for index, (at, tenant, priority) in enumerate(out):
        prefill = rng.uniform(*scenario.prefill_s)
        result.append(
            Arrival(
                index, at, tenant, priority, prefill, prefill + rng.expovariate(1 / scenario.decode_mean_s)
            )
        )
    return result


_ARRIVE: Final = 0
_FINISH: Final = 1
_SAMPLE: Final = 2


def simulate(
    scenario: OverloadScenario,
    requests: Sequence[Arrival],
    admission: Admission,
    settings: FlowControlSettings | None = None,
) -> Outcome:
    """Replay ``requests`` through one admission policy; virtual time, no I/O."""
    outcome = Outcome(admission)
    settings = settings or FlowControlSettings()
    if admission is Admission.NO_HEADROOM:
        settings = without_headroom(settings)
    controller = FlowController(settings)
    flow = admission in (Admission.FLOW_CONTROL, Admission.NO_HEADROOM)
    engine_queue: deque[Arrival] = deque()
    busy = 0
    events: list[tuple[float, int, int]] = [(r.at, _ARRIVE, r.index) for r in requests]
    events += [
        (t * scenario.sample_every_s, _SAMPLE, -1)
        for t in range(int(scenario.duration_s / scenario.sample_every_s) + 1)
    ]
    heapq.heapify(events)
    by_index = {r.index: r for r in requests}

    def start(request: Arrival, now: float) -> None:
        nonlocal busy
        busy += 1
        outcome.wait_s[request.index] = now - request.at
        outcome.ttft_s[request.index] = now - request.at + request.prefill_s
        heapq.heappush(events, (now + request.service_s, _FINISH, request.index))

    def shed_all(shed: Iterable[Shed]) -> None:
        for s in shed:
            outcome.shed.add(int(s.request.request_id))

    while events:
        now, kind, index = heapq.heappop(events)
        if flow:
            shed_all(tuple(controller.expire(now)))
        if kind == _SAMPLE:
            depths = controller.depths() if flow else {STANDARD: len(engine_queue)}
            outcome.depth_samples.append((now, depths))
            continue
        if kind == _FINISH:
            busy -= 1
            if admission is Admission.ROUND_ROBIN and engine_queue:
                start(engine_queue.popleft(), now)
            elif flow:
                while (item := controller.peek(now, utilisation=busy / scenario.slots)) is not None:
                    controller.take(item, now)
                    start(by_index[int(item.request_id)], now)
            continue
        request = by_index[index]
        if flow:
            utilisation = busy / scenario.slots
            if controller.admits(request.priority, utilisation) and not controller.queued_at_or_above(
                request.priority
            ):
                start(request, now)
                continue
        elif busy < scenario.slots:
            start(request, now)
            continue
        if flow:
            offer = controller.offer(
                request_id=str(index),
                priority=request.priority,
                tenant=request.tenant,
                size_bytes=1024,
                now=now,
            )
            shed_all(offer.displaced)
            if not offer.queued:
                outcome.shed.add(index)
        elif admission is Admission.ROUND_ROBIN:
            engine_queue.append(request)
        else:
            outcome.shed.add(index)
    return outcome


def without_headroom(settings: FlowControlSettings) -> FlowControlSettings:
    """``settings`` with every band dispatching until the pool is saturated."""
    bands = {p: dataclasses.replace(b, dispatch_below=1.0) for p, b in settings.bands.items()}
    return dataclasses.replace(settings, bands=bands)
