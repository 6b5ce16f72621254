"""The asyncio side of flow control: dispatch order through waiting tasks, pump throttling."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry

from igw.config.build import build_gateway_config
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.flow_gate import EndpointSample, FlowGates, Refused, endpoint_samples
from igw.gateway.guards import ANONYMOUS, OpenGuard
from igw.gateway.inference import _wait_in_queue
from igw.gateway.observer import RequestObserver
from igw.gateway.state import GatewayState
from igw.scheduling.flow_control import CRITICAL, SHEDDABLE, STANDARD, BandLimits, FlowControlSettings
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer
from igw.scheduling.plugins.prefix_index import PrefixIndex
from igw.scheduling.types import DecisionKind, EndpointView, EngineMetrics, RoutingDecision, RoutingRequest
from tests.gateway.flow_shedding import shed_on_arrival
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.state_walk import paths_holding

SATURATED = RoutingDecision(DecisionKind.SATURATED, reason="full")


class Pool:
    """A pool whose capacity the test opens, and which records who it placed, in order."""

    def __init__(self) -> None:
        self.free = 0
        self.placed: list[str] = []
        self.picks = 0

    def picker(self, request_id: str) -> RoutingDecision:
        self.picks += 1
        if self.free <= 0:
            return SATURATED
        self.free -= 1
        self.placed.append(request_id)
        return RoutingDecision(DecisionKind.PICKED, endpoint="10.0.0.1:8000")


def _gates(clock: list[float], poll_s: float = 0.001) -> FlowGates:
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    settings = FlowControlSettings(poll_interval_s=poll_s, dispatch_per_endpoint=100)
    gates.configure(settings, retry_after_bounds=(1, 30))
    return gates


async def _wait(
    gates: FlowGates,
    pool: Pool,
    rid: str,
    priority: int,
    level: list[float] | None = None,
    samples: dict[str, EndpointSample] | None = None,
    *,
    pick: Callable[[], RoutingDecision] | None = None,
    probe: Callable[[], float] | None = None,
    max_queue_s: float | None = None,
) -> RoutingDecision | Refused:
    return await gates.wait(
        scheduler="pool",
        request_id=rid,
        priority=priority,
        tenant="t",
        size_bytes=1,
        max_queue_s=max_queue_s,
        pick=pick or (lambda: pool.picker(rid)),
        utilisation=probe if probe is not None or level is None else lambda: level[0],
        endpoints=None if samples is None else lambda: samples,
    )


async def test_waiting_tasks_are_placed_highest_band_first_when_capacity_opens() -> None:
    clock = [0.0]
    gates, pool = _gates(clock), Pool()
    tasks = [
        asyncio.create_task(_wait(gates, pool, rid, prio))
        for rid, prio in [("batch", SHEDDABLE), ("std", STANDARD), ("chat", CRITICAL)]
    ]
    await wait_for(lambda: sum(gates.depths("pool").values()) == 3, what="all queued")
    pool.free = 3
    clock[0] = 1.0
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert all(isinstance(r, RoutingDecision) and r.kind is DecisionKind.PICKED for r in results)
    assert pool.placed == ["chat", "std", "batch"]
    assert gates.depths("pool") == {}


async def test_pump_runs_once_per_interval_however_many_waiters_call_it() -> None:
    clock = [0.0]
    gates, pool = _gates(clock, poll_s=0.5), Pool()
    tasks = [asyncio.create_task(_wait(gates, pool, f"r{i}", STANDARD)) for i in range(20)]
    await wait_for(lambda: sum(gates.depths("pool").values()) == 20, what="all queued")
    before = pool.picks
    for _ in range(50):
        gates.pump("pool")
    assert pool.picks == before  # the clock has not moved: no new scheduler runs
    clock[0] = 1.0
    gates.pump("pool")
    assert pool.picks == before + 1  # one run: the head is still saturated
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert gates.depths("pool") == {}


def _tenant_label_values(registry: CollectorRegistry) -> set[str]:
    return {
        sample.labels["tenant"]
        for metric in registry.collect()
        if metric.name == "igw_flow_rejections"
        for sample in metric.samples
        if sample.name == "igw_flow_rejections_total"
    }


async def _shed_one_per_tenant(settings: FlowControlSettings, tenants: list[str]) -> set[str]:
    """Every arrival refused at once (its band holds nothing): the rejection labels they left."""
    registry = CollectorRegistry()
    gates = FlowGates(registry=registry, clock=lambda: 0.0)
    gates.configure(settings, retry_after_bounds=(1, 30))
    await shed_on_arrival(gates, tenants)  # each larger than the band's maxBytes
    return _tenant_label_values(registry)


def _no_room(**extra: Any) -> FlowControlSettings:
    bands = {SHEDDABLE: BandLimits(max_requests=1, max_bytes=1, ttl_s=1.0)}
    return FlowControlSettings(bands=bands, max_requests=1, max_bytes=1, **extra)


async def test_tenant_label_is_bounded_for_client_chosen_fairness_ids() -> None:
    tenants = [f"client-{i}" for i in range(50)]
    labels = await _shed_one_per_tenant(_no_room(max_tenant_labels=3), tenants)
    assert labels == {"client-0", "client-1", "client-2", "other"}


async def test_tenant_label_allow_list_decides_alone() -> None:
    labels = await _shed_one_per_tenant(
        _no_room(tenant_labels=frozenset({"acme"})), ["acme", "mallory-1", "mallory-2", "acme"]
    )
    assert labels == {"acme", "other"}


async def test_one_pass_gives_each_endpoint_at_most_its_dispatch_budget() -> None:
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    settings = FlowControlSettings(poll_interval_s=0.5, dispatch_per_endpoint=2)
    gates.configure(settings, retry_after_bounds=(1, 30))
    pool = Pool()
    tasks = [asyncio.create_task(_wait(gates, pool, f"r{i}", STANDARD)) for i in range(5)]
    await wait_for(lambda: sum(gates.depths("pool").values()) == 5, what="all queued")
    pool.free = 100  # the scraped metrics say there is room for all of them
    for now, dispatched in ((1.0, 2), (2.0, 4), (3.0, 5)):
        clock[0] = now
        gates.pump("pool")
        await asyncio.sleep(0)
        assert sum(gates.depths("pool").values()) == 5 - dispatched
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert [r.kind for r in results if isinstance(r, RoutingDecision)] == [DecisionKind.PICKED] * 5


def _headroom_gates(clock: list[float]) -> FlowGates:
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    room = BandLimits(max_requests=10, max_bytes=1 << 20, ttl_s=30.0, dispatch_below=0.9)
    settings = FlowControlSettings(
        bands={CRITICAL: BandLimits(max_requests=10, max_bytes=1 << 20, ttl_s=30.0), STANDARD: room},
        poll_interval_s=0.001,
        dispatch_per_endpoint=100,
    )
    gates.configure(settings, retry_after_bounds=(1, 30))
    return gates


async def test_queued_lower_bands_hold_back_while_the_pool_is_past_their_headroom() -> None:
    clock = [0.0]
    gates, pool = _headroom_gates(clock), Pool()
    level = [0.95]
    std = asyncio.create_task(_wait(gates, pool, "std", STANDARD, level))
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 1}, what="std queued")
    pool.free = 5  # the scheduler could place it, but the pool is past Standard's 0.9
    clock[0] = 1.0
    gates.pump("pool")
    assert pool.placed == []
    chat = asyncio.create_task(_wait(gates, pool, "chat", CRITICAL, level))
    await wait_for(lambda: gates.depths("pool").get(CRITICAL) == 1, what="chat queued")
    clock[0] = 1.5  # the next pass (the pump runs at most once per interval of the injected clock)
    assert isinstance(await asyncio.wait_for(chat, timeout=10), RoutingDecision)
    assert pool.placed == ["chat"]  # Critical uses the headroom
    level[0] = 0.5
    clock[0] = 2.0
    assert isinstance(await asyncio.wait_for(std, timeout=10), RoutingDecision)
    assert pool.placed == ["chat", "std"]


async def test_must_wait_applies_the_band_threshold_and_never_overtakes_the_queue() -> None:
    clock = [0.0]
    gates, pool = _headroom_gates(clock), Pool()
    assert not gates.must_wait("pool", priority=STANDARD, utilisation=0.5)
    assert gates.must_wait("pool", priority=STANDARD, utilisation=0.9)
    assert not gates.must_wait("pool", priority=CRITICAL, utilisation=0.95)
    queued = asyncio.create_task(_wait(gates, pool, "early", STANDARD))
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 1}, what="queued")
    assert gates.must_wait("pool", priority=STANDARD, utilisation=0.1)  # behind its own band's queue
    assert not gates.must_wait("pool", priority=CRITICAL, utilisation=0.1)
    queued.cancel()
    await asyncio.gather(queued, return_exceptions=True)
    gates.configure(None, retry_after_bounds=(1, 30))
    assert not gates.must_wait("pool", priority=STANDARD, utilisation=0.99)


def _queue_place_gates(clock: list[float]) -> FlowGates:
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    places = BandLimits(max_requests=10, max_bytes=1 << 20, ttl_s=30.0, max_endpoint_queue=2, keep_slots=1)
    settings = FlowControlSettings(
        bands={CRITICAL: BandLimits(max_requests=10, max_bytes=1 << 20, ttl_s=30.0), STANDARD: places},
        poll_interval_s=0.001,
        dispatch_per_endpoint=100,
    )
    gates.configure(settings, retry_after_bounds=(1, 30))
    return gates


def _waiting(n: int) -> EndpointSample:
    return EndpointSample(waiting=n, running=None)


async def test_queued_lower_bands_wait_for_a_queue_place_without_running_the_scheduler() -> None:
    clock = [0.0]
    gates, pool = _queue_place_gates(clock), Pool()
    samples = {"10.0.0.1:8000": _waiting(2), "10.0.0.2:8000": _waiting(3)}  # none below Standard's 2
    std = asyncio.create_task(_wait(gates, pool, "std", STANDARD, samples=samples))
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 1}, what="std queued")
    pool.free = 5  # the scheduler could place it
    clock[0] = 1.0
    gates.pump("pool")
    assert (pool.placed, pool.picks) == ([], 0)  # held before the pick: no phantom dispatch
    chat = asyncio.create_task(_wait(gates, pool, "chat", CRITICAL, samples=samples))
    await wait_for(lambda: gates.depths("pool").get(CRITICAL) == 1, what="chat queued")
    clock[0] = 1.5  # the next pass (the pump runs at most once per interval of the injected clock)
    assert isinstance(await asyncio.wait_for(chat, timeout=10), RoutingDecision)
    assert pool.placed == ["chat"]  # Critical has no per-endpoint limit
    samples["10.0.0.1:8000"] = _waiting(1)
    clock[0] = 2.0
    assert isinstance(await asyncio.wait_for(std, timeout=10), RoutingDecision)
    assert pool.placed == ["chat", "std"]


async def test_a_pick_onto_an_endpoint_without_a_place_is_not_sent() -> None:
    clock = [0.0]
    gates, pool = _queue_place_gates(clock), Pool()
    samples = {"10.0.0.1:8000": _waiting(2), "10.0.0.2:8000": _waiting(0)}  # the picker answers .1
    std = asyncio.create_task(_wait(gates, pool, "std", STANDARD, samples=samples))
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 1}, what="std queued")
    pool.free = 5
    clock[0] = 1.0
    gates.pump("pool")
    assert gates.depths("pool") == {STANDARD: 1}  # still queued: its endpoint has no place
    samples["10.0.0.1:8000"] = _waiting(0)
    clock[0] = 2.0
    result = await asyncio.wait_for(std, timeout=10)
    assert isinstance(result, RoutingDecision)
    assert result.endpoint == "10.0.0.1:8000"


def test_must_wait_holds_a_band_while_no_endpoint_has_a_place() -> None:
    gates = _queue_place_gates([0.0])
    full = {"a:1": _waiting(2), "b:1": _waiting(4)}
    assert gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints=full)
    assert not gates.must_wait("pool", priority=CRITICAL, utilisation=0.1, endpoints=full)
    assert not gates.must_wait(
        "pool", priority=STANDARD, utilisation=0.1, endpoints={**full, "c:1": _waiting(1)}
    )
    assert not gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints={})  # no data


def test_a_batch_slot_is_kept_once_the_gate_has_seen_the_endpoint_full() -> None:
    gates = _queue_place_gates([0.0])
    scrapes = iter(range(100))

    def held(waiting: int, running: int, inflight: int = 0) -> bool:
        sample = EndpointSample(waiting=waiting, running=running, inflight=inflight, scraped_at=next(scrapes))
        return gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints={"a:1": sample})

    assert not held(0, 7)  # never seen full: the batch size is unknown, 7 running says nothing
    assert not held(1, 8)  # one scrape with a queue: maybe a burst between two engine steps
    assert held(2, 8)  # full (a queue behind 8 running, twice), and 2 waiting is Standard's queue limit
    assert not held(0, 6)  # 6 of the learned 8: a slot is still free after this one
    assert held(0, 7)  # 7 of 8: the last slot is kept for Critical
    assert held(0, 5, inflight=7)  # the router's own in-flight count, ahead of the scrape, counts
    assert not gates.must_wait(
        "pool", priority=CRITICAL, utilisation=0.1, endpoints={"a:1": EndpointSample(waiting=0, running=7)}
    )


def test_endpoint_samples_read_the_scrape_the_ledger_and_the_in_flight_count() -> None:
    views = [
        EndpointView(
            "a:1", EngineMetrics(waiting=2, running=8), scraped_at=0.0, inflight=9, unreflected_dispatches=1
        ),
        EndpointView("b:1", EngineMetrics(waiting=None), scraped_at=0.0),
        EndpointView("c:1", None, scraped_at=None),
    ]
    samples = endpoint_samples(views)
    assert samples == {
        "a:1": EndpointSample(waiting=2, running=8, unreflected=1, inflight=9, scraped_at=0.0),
        "b:1": EndpointSample(waiting=None, running=None, scraped_at=0.0),
    }
    first = samples["a:1"].load(None, None)  # before the scrape was first seen: the larger count
    assert (first.waiting, first.occupancy, first.batch) == (3, 11, None)


@pytest.mark.parametrize(
    ("inflight_at_scrape", "inflight_now", "occupancy", "waiting"),
    [
        (8, 8, 8, 0),  # nothing changed since the scrape
        (8, 6, 6, 0),  # two finished since: the stale scrape does not hold their slots
        (8, 10, 10, 2),  # two more sent since: they wait behind the full batch
        (3, 2, 7, 0),  # another router runs 5 of the 8 scraped: they still count
    ],
)
def test_load_corrects_the_scrape_with_the_in_flight_count(
    inflight_at_scrape: int, inflight_now: int, occupancy: int, waiting: int
) -> None:
    sample = EndpointSample(waiting=0, running=8, unreflected=0, inflight=inflight_now, scraped_at=1.0)
    load = sample.load(8, inflight_at_scrape)
    assert (load.occupancy, load.waiting) == (occupancy, waiting)


def test_the_gate_remembers_the_in_flight_count_of_each_new_scrape() -> None:
    gates = _queue_place_gates([0.0])

    def held(inflight: int, scraped_at: float) -> bool:
        sample = EndpointSample(waiting=1, running=8, inflight=inflight, scraped_at=scraped_at)
        return gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints={"a:1": sample})

    held(9, 0.5)
    assert held(9, 1.0)  # full: 9 of a batch of 8 (a queue in two scrapes)
    assert not held(6, 1.0)  # the same scrape, three finished since: 6 of 8
    assert held(6, 2.0)  # a new scrape still shows 8 + 1 with 6 of ours: 3 are another router's


def test_dispatches_since_a_scrape_without_a_queue_count_as_running_until_the_batch_is_known() -> None:
    burst = EndpointSample(waiting=0, running=3, unreflected=5, inflight=8, scraped_at=1.0)
    assert burst.load(None, 3).waiting == 0  # never seen full: a pod with no queue takes them
    assert burst.load(6, 3).waiting == 2  # a batch of 6: two of the eight wait
    queued = EndpointSample(waiting=1, running=3, unreflected=5, scraped_at=1.0)
    assert queued.load(None, 0).waiting == 6  # a queue at the scrape: what was sent since joined it


@pytest.mark.parametrize(
    "burst_scrapes",
    [
        pytest.param(1, id="one-scrape-between-two-engine-steps"),
        pytest.param(2, id="engine-starved-for-two-scrapes"),
    ],
)
async def test_a_burst_seen_between_engine_steps_never_locks_a_band_out_of_an_idle_pod(
    burst_scrapes: int,
) -> None:
    # A burst of 20 sent to an idle pod, scraped after the engine admitted the first and before its
    # next step: running 1, waiting 19. Taking that for a full batch of 1 kept its only slot for
    # Critical, so a Standard request waited at the idle pod until its TTL passed (429 ttl_expired).
    clock = [0.0]
    gates, pool = _queue_place_gates(clock), Pool()
    pool.free = 100
    key = "10.0.0.1:8000"
    samples = {key: EndpointSample(waiting=19, running=1, inflight=20, scraped_at=0.0)}
    for i in range(burst_scrapes):
        samples[key] = EndpointSample(waiting=19, running=1, inflight=20, scraped_at=0.1 * i)
        assert gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints=samples)
    std = asyncio.create_task(_wait(gates, pool, "std", STANDARD, samples=samples))
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 1}, what="std queued")
    samples[key] = EndpointSample(waiting=0, running=0, inflight=0, scraped_at=1.0)  # the burst is done
    clock[0] = 1.0
    gates.pump("pool")
    assert gates.depths("pool") == {}, "held at an idle pod"
    assert isinstance(await asyncio.wait_for(std, timeout=10), RoutingDecision)


def test_what_was_learned_of_an_endpoint_is_dropped_when_it_leaves() -> None:
    gates = _queue_place_gates([0.0])

    def held(waiting: int, running: int, scraped_at: float) -> bool:
        sample = EndpointSample(waiting=waiting, running=running, inflight=running, scraped_at=scraped_at)
        return gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints={"a:1": sample})

    held(1, 8, 1.0)
    held(1, 8, 2.0)  # a queue lasting two scrapes: a full batch of 8
    assert held(0, 7, 3.0)  # the last slot is kept
    gates.forget(["b:1"])
    assert held(0, 7, 4.0)
    gates.forget(["a:1"])
    assert not held(0, 7, 5.0)  # a new pod at that address: its batch is unknown again


def test_an_endpoint_that_left_with_requests_in_flight_is_dropped_once_they_finish() -> None:
    """Per-band in-flight counts (engine priority): a pod a rolling update drains leaves its pool
    with requests still running; its entry went only if it had none then, so every drained pod left
    an emptied counter behind for good (until session s40)."""
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: 0.0)
    drained = [f"10.0.{i // 250}.{i % 250}:8000" for i in range(500)]
    for key in drained:
        gates.started(key, STANDARD)
        gates.started(key, CRITICAL)
        gates.forget([key])
        gates.finished(key, CRITICAL)
        gates.finished(key, STANDARD)
    assert [key for key in drained if paths_holding(gates, key)] == []

    gates.started("a:1", STANDARD)
    gates.forget(["a:1"])
    gates.started("a:1", CRITICAL)  # back (a readiness probe failed for a moment), sent one more
    gates.finished("a:1", STANDARD)
    assert paths_holding(gates, "a:1") != [], "its request still in flight is counted"
    gates.finished("a:1", CRITICAL)
    assert paths_holding(gates, "a:1") == []


def test_the_gateway_forgets_an_endpoint_that_leaves_its_pool() -> None:
    config = build_gateway_config(config_doc([scheduler("s", "m")]))
    state = GatewayState(config, guard=OpenGuard(), clock=lambda: 0.0, rng=random.Random(0))
    state.flow.configure(FlowControlSettings(), retry_after_bounds=(1, 30))
    state.apply_endpoints("s", [DiscoveredEndpoint("a:1"), DiscoveredEndpoint("b:1")])

    def held(waiting: int, running: int, scraped_at: float) -> bool:
        sample = EndpointSample(waiting=waiting, running=running, inflight=running, scraped_at=scraped_at)
        return state.flow.must_wait("s", priority=STANDARD, utilisation=0.1, endpoints={"a:1": sample})

    held(1, 8, 1.0)
    held(1, 8, 2.0)
    assert held(0, 7, 3.0)
    state.apply_endpoints("s", [DiscoveredEndpoint("b:1")])
    assert not held(0, 7, 4.0)


def test_kept_slots_grow_with_the_critical_arrivals_the_gate_has_seen() -> None:
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    gates.configure(FlowControlSettings(), retry_after_bounds=(1, 30))

    def held(priority: int, waiting: int, running: int) -> bool:
        sample = EndpointSample(
            waiting=waiting, running=running, inflight=running, scraped_at=clock[0], completion_rate=37.7
        )
        return gates.must_wait("pool", priority=priority, utilisation=0.1, endpoints={"a:1": sample})

    held(STANDARD, 1, 8)
    clock[0] = 0.05
    held(STANDARD, 1, 8)  # the batch is full at 8
    clock[0] = 0.1
    assert not held(STANDARD, 0, 6)  # no Critical traffic: the one kept slot of keepSlots
    for i in range(114):  # Critical at 11.4 requests/s (30 % of the pod's 37.7 completions/s)
        clock[0] = 0.2 + i / 11.4
        assert not held(CRITICAL, 0, 6)
    # The pod ran 6 of 8 slots while completing 37.7/s: its capacity is 50/s, and Critical keeps
    # 1.8 slots busy on average; holding its wait over 15 ms under 1 % takes six kept slots,
    # capped at half the batch (maxKeptShare).
    assert held(STANDARD, 0, 4)
    assert not held(STANDARD, 0, 3)


def test_endpoint_samples_carry_the_measured_completion_rate() -> None:
    views = [EndpointView("a:1", EngineMetrics(waiting=0, running=3), scraped_at=0.0)]
    samples = endpoint_samples(views, {"a:1": 12.5}.get)
    assert samples["a:1"].completion_rate == 12.5
    assert samples["a:1"].load(None, None, 30.0).pool_completion_rate == 30.0


def _pump_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("igw-flow-pump-")]


async def test_one_pump_task_serves_a_queue_of_hundreds_and_ends_when_it_empties() -> None:
    # Waiters only await their own decision: 200 of them polling each interval would wake the event
    # loop tens of thousands of times a second and take the gateway's CPU from the requests it serves.
    clock = [0.0]
    gates, pool = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0]), Pool()
    gates.configure(
        FlowControlSettings(poll_interval_s=0.001, dispatch_per_endpoint=200), retry_after_bounds=(1, 30)
    )
    tasks = [asyncio.create_task(_wait(gates, pool, f"r{i}", STANDARD)) for i in range(200)]
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 200}, what="all queued")
    assert len(_pump_tasks()) == 1
    pool.free = 200
    clock[0] = 1.0
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert all(isinstance(r, RoutingDecision) for r in results)
    await wait_for(lambda: not _pump_tasks(), what="the pump task ends with an empty queue")


async def test_a_failing_pick_fails_its_own_request_and_the_queue_goes_on() -> None:
    clock = [0.0]
    gates, pool = _gates(clock), Pool()

    def broken() -> RoutingDecision:
        raise RuntimeError("scheduler bug")

    first = asyncio.create_task(
        _wait(gates, pool, "bad", CRITICAL, pick=lambda: pool.picker("bad") if pool.free <= 0 else broken())
    )
    second = asyncio.create_task(_wait(gates, pool, "good", STANDARD))
    await wait_for(lambda: sum(gates.depths("pool").values()) == 2, what="both queued")
    pool.free = 1
    clock[0] = 1.0
    with pytest.raises(RuntimeError, match="scheduler bug"):
        await asyncio.wait_for(first, timeout=10)
    assert isinstance(await asyncio.wait_for(second, timeout=10), RoutingDecision)
    assert pool.placed == ["good"]


async def test_no_pick_is_made_once_every_endpoint_has_had_its_budget() -> None:
    # A pick counts as a dispatch in the scheduler's ledger: one made only to be left unsent would be
    # phantom load on that endpoint until its next scrape.
    clock = [0.0]
    gates, pool = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0]), Pool()
    gates.configure(
        FlowControlSettings(poll_interval_s=0.001, dispatch_per_endpoint=2), retry_after_bounds=(1, 30)
    )
    samples = {"10.0.0.1:8000": _waiting(0)}
    tasks = [asyncio.create_task(_wait(gates, pool, f"r{i}", STANDARD, samples=samples)) for i in range(3)]
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 3}, what="all queued")
    picks = pool.picks
    pool.free = 3
    clock[0] = 1.0
    gates.pump("pool")
    assert (pool.picks - picks, pool.placed) == (2, ["r0", "r1"])
    clock[0] = 2.0
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert pool.placed == ["r0", "r1", "r2"]


async def test_a_failing_pass_is_retried_and_ttls_still_hold() -> None:
    clock = [0.0]
    gates, pool = _gates(clock), Pool()
    broken = [True]

    def level() -> float:
        if broken[0]:
            raise RuntimeError("probe bug")
        return 0.0

    task = asyncio.create_task(_wait(gates, pool, "r", STANDARD, probe=level, max_queue_s=5.0))
    await wait_for(lambda: gates.depths("pool") == {STANDARD: 1}, what="queued")
    clock[0] = 10.0  # past its deadline: expired although every pass fails after expiry
    result = await asyncio.wait_for(task, timeout=10)
    assert isinstance(result, Refused)
    assert result.reason.value == "ttl_expired"


@pytest.mark.parametrize(("assumed", "running", "held"), [(None, 7, False), (8, 6, False), (8, 7, True)])
def test_the_assumed_batch_keeps_a_slot_before_the_pod_is_seen_full(
    assumed: int | None, running: int, held: bool
) -> None:
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: 0.0)
    gates.configure(FlowControlSettings(assumed_batch=assumed), retry_after_bounds=(1, 30))
    sample = EndpointSample(waiting=0, running=running, inflight=running, scraped_at=0.0)
    assert gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints={"a:1": sample}) is held


def test_a_scrape_running_more_than_the_assumed_batch_raises_it() -> None:
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    gates.configure(FlowControlSettings(assumed_batch=8), retry_after_bounds=(1, 30))

    def held(running: int, inflight: int) -> bool:
        clock[0] += 0.05
        sample = EndpointSample(waiting=0, running=running, inflight=inflight, scraped_at=clock[0])
        return gates.must_wait("pool", priority=STANDARD, utilisation=0.1, endpoints={"a:1": sample})

    assert held(7, 7)  # 7 of the assumed 8: the last slot is kept
    assert held(10, 10)  # the pod ran 10 at once (its batch is 10, and all are taken)
    assert not held(8, 8)  # 8 of 10 leaves two free: one for this request, one kept
    assert held(9, 9)


def test_kept_slots_are_sized_from_the_pods_capacity_not_its_held_back_rate() -> None:
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    standard = BandLimits(
        max_requests=10, max_bytes=1 << 20, ttl_s=30.0, max_endpoint_queue=2, keep_slots=1, slot_wait_s=0.030
    )
    critical = BandLimits(max_requests=10, max_bytes=1 << 20, ttl_s=30.0)
    settings = FlowControlSettings(
        bands={CRITICAL: critical, STANDARD: standard}, assumed_batch=8, max_kept_share=0.875
    )
    gates.configure(settings, retry_after_bounds=(1, 30))

    def held(priority: int, running: int) -> bool:
        sample = EndpointSample(
            waiting=0, running=running, inflight=running, scraped_at=clock[0], completion_rate=18.85
        )
        return gates.must_wait("pool", priority=priority, utilisation=0.1, endpoints={"a:1": sample})

    for i in range(115):  # Critical at 11.4/s while the pod runs 4 of 8 and completes 18.85/s
        clock[0] = i / 11.4
        assert not held(CRITICAL, 4)
    # Capacity 18.85 * 8 / 4 = 37.7/s: Critical keeps 2.4 slots busy and six are kept (from the
    # counted 18.85/s, 4.8 busy, it would be the cap of seven and 1 running would be held).
    assert not held(STANDARD, 1)
    assert held(STANDARD, 2)


def test_steer_sends_critical_to_the_candidate_with_a_free_slot() -> None:
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: 0.0)
    gates.configure(FlowControlSettings(assumed_batch=8), retry_after_bounds=(1, 30))
    endpoints = {
        "a:1": EndpointSample(waiting=0, running=8, inflight=8, scraped_at=0.0),
        "b:1": EndpointSample(waiting=0, running=5, inflight=5, scraped_at=0.0),
    }
    picked = RoutingDecision(kind=DecisionKind.PICKED, endpoint="a:1", fallbacks=("b:1",))
    steered = gates.steer(picked, endpoints)
    assert (steered.endpoint, steered.fallbacks) == ("b:1", ("a:1",))
    assert gates.steer(
        RoutingDecision(kind=DecisionKind.PICKED, endpoint="b:1", fallbacks=("a:1",)), endpoints
    ) == (RoutingDecision(kind=DecisionKind.PICKED, endpoint="b:1", fallbacks=("a:1",)))
    assert gates.steers(CRITICAL)
    assert not gates.steers(STANDARD)
    gates.configure(None, retry_after_bounds=(1, 30))
    assert not gates.steers(CRITICAL)  # flow control off: the scheduler's pick stands


async def test_a_request_reaching_the_queue_of_a_scheduler_a_reload_removed_is_answered_at_once() -> None:
    """A request whose handling began before the reload (it holds the old runtime) and reaches the
    queue after it: the removed scheduler's pool is no longer scraped, so queued it would wait for
    its TTL; it is answered NO_ENDPOINTS at once instead, and leaves no queue behind."""
    clock = [0.0]
    gates, pool = _gates(clock), Pool()
    settings = FlowControlSettings(poll_interval_s=0.001, dispatch_per_endpoint=100)
    gates.configure(settings, retry_after_bounds=(1, 30), schedulers=["other"])
    result = await asyncio.wait_for(_wait(gates, pool, "late", STANDARD), timeout=1)
    assert isinstance(result, RoutingDecision)
    assert result.kind is DecisionKind.NO_ENDPOINTS
    assert "'pool' was removed by a configuration reload" in result.reason
    assert gates.depths("pool") == {}
    assert pool.picks == 0


def _queued_request_state(clock: list[float]) -> tuple[GatewayState, Any]:
    """A gateway state whose one pod ``a:1`` is saturated (9 waiting at the default threshold 5)."""
    doc = config_doc([scheduler("s", "m")])
    doc["spec"]["extensions"]["flowControl"] = {"bands": [{"priority": 0, "ttl": "60s"}]}
    state = GatewayState(
        build_gateway_config(doc), guard=OpenGuard(), clock=lambda: clock[0], rng=random.Random(0)
    )
    state.apply_endpoints("s", [DiscoveredEndpoint("a:1")])
    pod = state.runtime.schedulers["s"].pool.states["a:1"]
    pod.metrics, pod.scraped_at = EngineMetrics(waiting=9, running=4, kv_usage=0.1), 0.0
    return state, pod


@pytest.mark.parametrize("pick_first", [True, False], ids=["picked-then-cancelled", "cancelled-then-pump"])
async def test_a_queued_request_whose_client_leaves_in_the_turn_of_its_pick_leaves_no_phantom_dispatch(
    pick_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue hands a request its pick (the scheduler's ledger counts the dispatch) and its client
    disconnects in the same loop turn, before the request's task resumes: nothing is sent, so the
    ledger must not keep counting the dispatch until the pod's next scrape. Or the client went first
    and the pump came to its request before its task ran its cancellation."""
    clock = [0.0]
    state, pod = _queued_request_state(clock)
    sr = state.runtime.schedulers["s"]
    rreq = RoutingRequest(request_id="q", model="m", base_model="m", prefix_text="hi", prompt_tokens=1)
    request = make_mocked_request("POST", "/v1/completions")
    obs = RequestObserver(state.metrics, request_id="q", method="POST", path="/v1/completions")
    task = asyncio.create_task(_wait_in_queue(request, state, ANONYMOUS, sr, rreq, 10, obs, STANDARD, None))
    await wait_for(lambda: state.flow.depths("s") == {STANDARD: 1}, what="queued")
    pod.metrics, pod.scraped_at = EngineMetrics(waiting=0, running=4, kv_usage=0.0), 1.0  # room now
    clock[0] = 1.0
    if pick_first:
        state.flow.pump("s")  # hands it its pick ...
        task.cancel()  # ... and its client goes away before its task resumes
    else:
        task.cancel()
        state.flow.pump("s")
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sr.scheduler.utilisation(sr.pool.views(), now=1.0) == 0.0  # no unsent dispatch counted
    assert sr.scheduler.ledger is not None
    assert sr.scheduler.ledger.unreflected(pod.view(), now=1.0) == 0
    assert state.flow.depths("s") == {}
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def _two_pod_state(clock: list[float], bands: list[dict[str, Any]]) -> tuple[GatewayState, Any, Any]:
    """A gateway state with flow control ``bands`` and two saturated pods ``a:1`` and ``b:1``."""
    # GIE's scorers only: the prefix the pods hold decides against a shorter queue
    weights = {"queue": 2, "kvCache": 2, "prefix": 3, "predictedLatency": 0}
    doc = config_doc([scheduler("s", "m", weights=weights)])
    doc["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms", "bands": bands}
    state = GatewayState(
        build_gateway_config(doc), guard=OpenGuard(), clock=lambda: clock[0], rng=random.Random(0)
    )
    state.apply_endpoints("s", [DiscoveredEndpoint("a:1"), DiscoveredEndpoint("b:1")])
    pool = state.runtime.schedulers["s"].pool
    a, b = pool.states["a:1"], pool.states["b:1"]
    for pod in (a, b):
        pod.metrics, pod.scraped_at = EngineMetrics(waiting=9, running=4, kv_usage=0.1), 0.0
    return state, a, b


def _prefix_index(state: GatewayState) -> PrefixIndex:
    plugins = state.runtime.schedulers["s"].scheduler.plugins
    (scorer,) = [p for p in plugins if isinstance(p, PrefixCacheScorer)]
    return scorer.index


async def _queue_one(state: GatewayState, prompt: str) -> asyncio.Task[Any]:
    """Queue one Standard request for ``prompt`` (the pool is saturated); its waiting task."""
    sr = state.runtime.schedulers["s"]
    rreq = RoutingRequest(request_id="q", model="m", base_model="m", prefix_text=prompt, prompt_tokens=1)
    request = make_mocked_request("POST", "/v1/completions")
    obs = RequestObserver(state.metrics, request_id="q", method="POST", path="/v1/completions")
    task = asyncio.create_task(_wait_in_queue(request, state, ANONYMOUS, sr, rreq, 10, obs, STANDARD, None))
    await wait_for(lambda: state.flow.depths("s") == {STANDARD: 1}, what="queued")
    return task


async def test_a_queued_pick_left_for_want_of_a_place_counts_no_dispatch_and_places_no_prefix() -> None:
    """The scheduler prefers pod a (it holds the prompt's first blocks) but a has no queue place
    for Standard: the pump leaves the request queued. Each such pass picked, and the pick stayed
    counted: a phantom dispatch on a per poll (10 after 10 polls) until a's next scrape, and the
    prompt's new blocks placed in a's prefix index although a never received them."""
    clock = [0.0]
    bands = [{"priority": 1, "ttl": "60s"}, {"priority": 0, "ttl": "60s", "maxEndpointQueue": 2}]
    state, a, b = _two_pod_state(clock, bands)
    sr = state.runtime.schedulers["s"]
    shared, prompt = "x" * 1920, "x" * 1920 + "y" * 128
    seed = RoutingRequest(request_id="seed", model="m", base_model="m", prefix_text=shared, prompt_tokens=1)
    sr.scheduler.pick(seed, [a.view()], now=0.5)  # sent to a earlier
    index = _prefix_index(state)
    held = index.size("a:1")
    task = await _queue_one(state, prompt)
    a.metrics, a.scraped_at = EngineMetrics(waiting=2, running=4, kv_usage=0.0), 1.0  # no place
    b.metrics, b.scraped_at = EngineMetrics(waiting=1, running=4, kv_usage=0.7), 1.0  # a place
    for i in range(10):
        clock[0] = 1.0 + 0.011 * (i + 1)
        state.flow.pump("s")
        await asyncio.sleep(0)
    assert state.flow.depths("s") == {STANDARD: 1}  # still queued: the scheduler keeps preferring a
    assert sr.scheduler.ledger is not None
    assert sr.scheduler.ledger.unreflected(a.view(), now=clock[0]) == 0
    assert index.size("a:1") == held  # the blocks only this request has are not placed on a
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_steered_pick_places_the_prompt_on_the_pod_it_is_sent_to() -> None:
    """The top band's pick moved by flow control to a pod with a free batch slot: the prefix index
    placed the prompt on the pod picked (which never got it) and not on the pod sent to, so the next
    requests with that prefix went to the pod without it."""
    clock = [0.0]
    state, a, b = _two_pod_state(clock, [{"priority": 0, "ttl": "60s"}])  # Standard is the top band
    sr = state.runtime.schedulers["s"]
    shared, prompt = "x" * 1920, "x" * 1920 + "y" * 128
    seed = RoutingRequest(request_id="seed", model="m", base_model="m", prefix_text=shared, prompt_tokens=1)
    sr.scheduler.pick(seed, [a.view()], now=0.5)
    index = _prefix_index(state)
    held = index.size("a:1")
    task = await _queue_one(state, prompt)
    a.metrics, a.scraped_at = EngineMetrics(waiting=2, running=4, kv_usage=0.0), 1.0
    b.metrics, b.scraped_at = EngineMetrics(waiting=1, running=4, kv_usage=0.7), 1.0
    clock[0] = 1.02
    result = await asyncio.wait_for(task, timeout=10)
    decision = result[0]
    assert isinstance(decision, RoutingDecision)
    assert (decision.endpoint, decision.fallbacks) == ("b:1", ("a:1",))  # picked a, steered to b
    assert index.size("a:1") == held  # a keeps what it was sent, and nothing more
    assert index.size("b:1") == len(prompt) // 64  # b got the whole prompt
    again = RoutingRequest(request_id="r2", model="m", base_model="m", prefix_text=prompt, prompt_tokens=1)
    later = sr.scheduler.pick(again, sr.pool.views(), now=1.03)
    assert later.scores["b:1"]["prefix-cache-scorer"] > later.scores["a:1"]["prefix-cache-scorer"]


async def test_a_request_reaching_a_gate_turned_off_is_answered_by_the_scheduler_as_an_arrival() -> None:
    """Flow control removed by a reload between the request path's check and the gate: the request
    is answered as an arrival without flow control is (placed where the pool has room, else the
    scheduler's own ``SATURATED`` decision, 429 ``pool_saturated`` with its Retry-After within
    ``routing.retryAfter``). Until session s48 the gate refused it itself, ``queue_full`` with a
    fixed 1 s (below ``retryAfter.minSeconds`` 10 here), for a queue that no longer existed."""
    clock = [0.0]
    gates, pool = _gates(clock), Pool()
    gates.configure(None, retry_after_bounds=(10, 30))
    full = RoutingDecision(DecisionKind.SATURATED, reason="full", retry_after_s=12.0)
    assert await _wait(gates, pool, "full", STANDARD, pick=lambda: full) == full
    pool.free = 1
    placed = await _wait(gates, pool, "placed", STANDARD)
    assert isinstance(placed, RoutingDecision)
    assert placed.kind is DecisionKind.PICKED
    assert (pool.placed, gates.depths("pool")) == (["placed"], {})


def _offer(gates: FlowGates, pool: str, count: int, priority: int, size: int) -> list[asyncio.Task[Any]]:
    """``count`` requests of ``priority`` and ``size`` bytes offered to ``pool`` (never placed), not
    waited for."""
    return [
        asyncio.create_task(
            gates.wait(
                scheduler=pool,
                request_id=f"{pool}-{i}",
                priority=priority,
                tenant="t",
                size_bytes=size,
                max_queue_s=None,
                pick=lambda: SATURATED,
            )
        )
        for i in range(count)
    ]


async def _fill(gates: FlowGates, pools: list[str], size: int, per_pool: int) -> list[asyncio.Task[Any]]:
    """``per_pool`` Standard requests of ``size`` bytes offered to each of ``pools`` (never placed)."""
    tasks = [task for name in pools for task in _offer(gates, name, per_pool, STANDARD, size)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    return tasks


async def test_max_bytes_bounds_every_schedulers_queue_together_as_the_memory_plan_reserves_it() -> None:
    """Three pools' full queues held three times the plan's queue: each scheduler's queue was
    bounded by ``maxBytes`` alone (until session s48)."""
    from igw.gateway.memory import memory_plan

    plan = memory_plan(2**30, 1)  # the default queue: flowControl.maxBytes left to 128 MiB
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    gates.configure(FlowControlSettings(poll_interval_s=60.0), retry_after_bounds=(1, 30))
    pools = ["a", "b", "c"]
    tasks = await _fill(gates, pools, 16 << 20, 4)  # 64 MiB a pool, its Standard band full
    await wait_for(lambda: sum(t.done() for t in tasks) >= 4, what="the arrivals past the budget refused")
    assert gates.queued_bytes() == sum(gates.queued_bytes(p) for p in pools)
    assert gates.queued_bytes() <= plan.queue_bytes == 128 << 20
    refused = [t.result() for t in tasks if t.done()]
    # c, within its share (a third), displaced a's and b's newest (pool_share), then was refused
    assert [r.reason.value for r in refused] == ["pool_share", "pool_share", "queue_full", "queue_full"]
    assert [gates.depths(p) for p in pools] == [{STANDARD: 3}, {STANDARD: 3}, {STANDARD: 2}]
    gates.configure(None, retry_after_bounds=(1, 30))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert gates.queued_bytes() == 0


async def test_a_lowered_max_bytes_sheds_across_every_pool_lowest_band_newest_first() -> None:
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    gates.configure(FlowControlSettings(poll_interval_s=60.0), retry_after_bounds=(1, 30))
    tasks = await _fill(gates, ["a", "b"], 10 << 20, 2)  # a-0, a-1, b-0, b-1: 40 MiB
    await wait_for(lambda: gates.depths("a") == gates.depths("b") == {STANDARD: 2}, what="all queued")
    gates.configure(FlowControlSettings(poll_interval_s=60.0, max_bytes=25 << 20), retry_after_bounds=(1, 30))
    assert gates.queued_bytes() == 20 << 20
    # a-1 and b-1, each its pool's newest, are shed; a-0 and b-0 kept, though each pool's own
    # 20 MiB fitted the new bound alone
    assert gates.depths("a") == {STANDARD: 1}
    assert gates.depths("b") == {STANDARD: 1}
    await wait_for(lambda: sum(t.done() for t in tasks) == 2, what="the shed requests answered")
    assert [t.done() for t in tasks] == [False, True, False, True]
    shed = [t.result() for t in tasks if t.done()]
    assert [r.reason.value for r in shed] == ["queue_full", "queue_full"]
    gates.configure(None, retry_after_bounds=(1, 30))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


async def _queue(
    gates: FlowGates, pool: str, count: int, priority: int, size: int
) -> list[asyncio.Task[Any]]:
    """``count`` requests of ``priority`` and ``size`` bytes offered to ``pool`` (never placed)."""
    tasks = _offer(gates, pool, count, priority, size)
    await wait_for(lambda: sum(gates.depths(pool).values()) == count, what=f"{pool}'s requests queued")
    return tasks


async def test_a_lowered_max_bytes_sheds_the_pool_most_over_its_share_not_the_pools_within_theirs() -> None:
    """A reload lowering ``maxBytes`` from 100 to 60 bytes shed the lowest band newest first across
    every pool: two light pools' Sheddable requests, 20 bytes each (their share of 60), all went,
    and the flooded pool kept its 60 (until session s49)."""
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: 0.0)
    band = BandLimits(max_requests=100, max_bytes=1 << 30, ttl_s=30.0)
    bands = {p: band for p in (SHEDDABLE, STANDARD, CRITICAL)}
    gates.configure(
        FlowControlSettings(poll_interval_s=60.0, max_bytes=100, bands=bands), retry_after_bounds=(1, 30)
    )
    light = await _queue(gates, "a", 2, SHEDDABLE, 10) + await _queue(gates, "b", 2, SHEDDABLE, 10)
    flood = await _queue(gates, "flood", 6, CRITICAL, 10)
    gates.configure(
        FlowControlSettings(poll_interval_s=60.0, max_bytes=60, bands=bands), retry_after_bounds=(1, 30)
    )
    assert [gates.queued_bytes(p) for p in ("a", "b", "flood")] == [20, 20, 20]
    await wait_for(lambda: sum(t.done() for t in flood) == 4, what="the flood's newest shed")
    assert [t.done() for t in light + flood] == [False] * 6 + [True] * 4
    assert {t.result().reason.value for t in flood[2:]} == {"queue_full"}
    assert gates.metrics.rejections.labels("flood", str(CRITICAL), "t", "queue_full")._value.get() == 4
    gates.configure(None, retry_after_bounds=(1, 30))
    await asyncio.wait_for(asyncio.gather(*light, *flood), timeout=10)


async def test_a_request_displaced_by_another_pools_arrival_is_told_when_its_own_pool_takes_it() -> None:
    """A ``pool_share`` victim's ``Retry-After`` is its own pool's: the queue ahead of it there at
    that pool's dispatch rate, what the same request coming straight back is told (refused, its pool
    over its share), not the arriving pool's (nothing dispatched there: ``maxSeconds``)."""
    clock = [0.0]
    gates, pool = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0]), Pool()
    band = BandLimits(max_requests=100, max_bytes=1 << 30, ttl_s=30.0)
    settings = FlowControlSettings(
        poll_interval_s=0.001, dispatch_per_endpoint=100, max_bytes=100, bands={STANDARD: band}
    )
    gates.configure(settings, retry_after_bounds=(1, 60))

    def offer(scheduler: str, rid: str) -> asyncio.Task[RoutingDecision | Refused]:
        return asyncio.create_task(
            gates.wait(
                scheduler=scheduler,
                request_id=rid,
                priority=STANDARD,
                tenant="t",
                size_bytes=10,
                max_queue_s=None,
                pick=lambda: pool.picker(rid) if scheduler == "flood" else SATURATED,
            )
        )

    flood = [offer("flood", f"f{i}") for i in range(10)]
    await wait_for(lambda: gates.depths("flood") == {STANDARD: 10}, what="the flood queued")
    pool.free = 2
    clock[0] = 0.5
    gates.pump("flood")
    await wait_for(lambda: gates.depths("flood") == {STANDARD: 8}, what="two dispatched from the queue")
    flood += [offer("flood", f"f{i}") for i in range(10, 12)]
    await wait_for(lambda: gates.queued_bytes("flood") == 100, what="the flood holding all of maxBytes")
    clock[0] = 1.0  # the flood's queue turns over 2 requests a second
    light = offer("light", "l0")
    await wait_for(lambda: flood[-1].done(), what="the flood's newest displaced")
    displaced = flood[-1].result()
    assert isinstance(displaced, Refused)
    assert displaced.reason.value == "pool_share"
    assert displaced.retry_after_s == 5  # 9 ahead of it in the flood's queue, + itself, at 2/s
    back = await offer("flood", "back")
    assert isinstance(back, Refused)
    assert (back.reason.value, back.retry_after_s) == ("queue_full", 5)
    gates.configure(None, retry_after_bounds=(1, 60))
    await asyncio.wait_for(asyncio.gather(*flood, light), timeout=10)


async def test_a_pool_flooded_with_large_prompts_leaves_the_other_pools_their_share_of_max_bytes() -> None:
    """A flooded pool's queue held the whole process's ``maxBytes``, and a light pool's every
    arrival was refused ``queue_full`` with a Retry-After of its own empty queue's (until session
    s48). Now the flood's newest request gives way (``pool_share``, counted against its own pool),
    and the light pool's arrival past its share waits for the flood's bytes to drain."""
    clock = [0.0]
    gates = FlowGates(registry=CollectorRegistry(), clock=lambda: clock[0])
    band = BandLimits(max_requests=100, max_bytes=1 << 30, ttl_s=30.0)
    settings = FlowControlSettings(poll_interval_s=60.0, max_bytes=100 << 20, bands={STANDARD: band})
    gates.configure(settings, retry_after_bounds=(1, 60))
    flood = await _fill(gates, ["flood"], 10 << 20, 10)
    await wait_for(lambda: gates.queued_bytes("flood") == 100 << 20, what="the flood queued")
    light = await _fill(gates, ["light"], 10 << 20, 1)
    await wait_for(lambda: flood[-1].done(), what="the flood's newest displaced")
    assert not light[0].done()
    assert flood[-1].result().reason.value == "pool_share"
    assert (gates.queued_bytes("flood"), gates.queued_bytes("light")) == (90 << 20, 10 << 20)
    rejections = gates.metrics.rejections
    assert rejections.labels("flood", str(STANDARD), "t", "pool_share")._value.get() == 1
    # past its share (half), the light pool is refused; its Retry-After is the time for the
    # flood's bytes to drain, the most while the flood dispatches nothing, not the 6 s its own
    # band (5 queued, one request a second sent straight) would say
    gates.sent_straight("light", STANDARD)
    light += await _fill(gates, ["light"], 10 << 20, 5)
    await wait_for(lambda: light[-1].done(), what="the light pool's arrival past its share refused")
    assert [t.done() for t in flood + light] == [False] * 5 + [True] * 5 + [False] * 5 + [True]
    refused = light[-1].result()
    assert refused.reason.value == "queue_full"
    assert refused.retry_after_s == 60
    gates.configure(None, retry_after_bounds=(1, 60))
    await asyncio.wait_for(asyncio.gather(*flood, *light), timeout=10)
