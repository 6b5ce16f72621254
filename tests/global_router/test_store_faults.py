"""Faults of the heartbeat store itself (a real Redis) as one router replica's fleet sees them.

The fleet polls a real :class:`~igw.global_router.heartbeats.HeartbeatReader`; time is the test's
own clock, so how long the store was away is exact whatever the machine's load. Found by probing in
session s38: a store outage longer than the staleness threshold drained every cluster at the first
read after it, and a store that came back without its keys (restarted or failed over to a replica
that had none) drained every cluster at once as gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
import redis.asyncio as redis_asyncio
from prometheus_client import CollectorRegistry

from igw.gateway.heartbeat import HeartbeatPublisher, HeartbeatSettings
from igw.gateway.heartbeat_message import Heartbeat
from igw.gateway.outage_log import FLAP_S, QUIET_S
from igw.gateway.serving import serve_app
from igw.gateway.telemetry import GatewayMetrics
from igw.global_router.config import parse_global_config
from igw.global_router.fleet import TRANSITIONS_KEPT, Fleet
from igw.global_router.heartbeats import HeartbeatReader, HeartbeatSourceDown, HeartbeatSourceRefused
from igw.global_router.metrics import FleetMetrics
from igw.global_router.server import create_global_app
from tests.global_router.support import beat, global_config, global_doc, reading_fleet, redis_on_path
from tests.security.helpers import RedisServer, start_redis

PREFIX = "sf:hb:"
NAMES = ("east-a", "east-b", "west-a")
STALENESS_S = 3.0


class Clock:
    """The fleet's and the reader's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def polled_fleet(redis_server: RedisServer, clock: Clock) -> AsyncIterator[Fleet]:
    """A fleet of :data:`NAMES` reading ``redis_server`` on ``clock`` (polled by the test only)."""
    config = global_config(failover={"heartbeatStalenessSeconds": STALENESS_S})
    reader = HeartbeatReader(
        url=redis_server.url,
        key_prefix=PREFIX,
        clusters=list(NAMES),
        staleness_s=STALENESS_S,
        clock=clock,
    )
    fleet = reading_fleet(config, reader, clock=clock, metrics=FleetMetrics(CollectorRegistry()))
    try:
        yield fleet
    finally:
        await fleet.stop()


@contextlib.asynccontextmanager
async def polled_store(
    redis_server: RedisServer,
) -> AsyncIterator[tuple[Clock, redis_asyncio.Redis, Fleet]]:  # type: ignore[type-arg]
    """The test's clock, a client of ``redis_server`` to publish and fault it with, and
    :func:`polled_fleet` on that clock; the client is closed on exit."""
    clock = Clock()
    client = redis_asyncio.Redis.from_url(redis_server.url)
    try:
        async with polled_fleet(redis_server, clock) as fleet:
            yield clock, client, fleet
    finally:
        await client.aclose()  # type: ignore[attr-defined]


async def publish(client: redis_asyncio.Redis, seq: int, names: tuple[str, ...] = NAMES) -> None:  # type: ignore[type-arg]
    """One publication of each of ``names``' gateways (one replica each), as tier 1 writes it."""
    for name in names:
        await client.hset(PREFIX + name, "pod-0/1", beat(name, seq=seq).encode())


async def say_draining(client: redis_asyncio.Redis, name: str, seq: int) -> None:  # type: ignore[type-arg]
    """``name``'s gateway stopping: it publishes ``draining`` through its drain period (before it
    deletes its field, which the test does)."""
    await client.hset(PREFIX + name, "pod-0/1", beat(name, seq=seq, draining=True).encode())


async def last_replica_stops(
    clock: Clock,
    client: redis_asyncio.Redis,  # type: ignore[type-arg]
    fleet: Fleet,
    name: str,
    seq: int,
) -> None:
    """``name``'s last gateway replica stopping as it does: it says ``draining`` (one read), then
    its field and so its key go (the next read), half a second apart."""
    await say_draining(client, name, seq=seq)
    clock.now += 0.5
    await fleet.poll_once()
    await client.delete(PREFIX + name)
    clock.now += 0.5
    await fleet.poll_once()


@contextlib.contextmanager
def stopped(redis_server: RedisServer) -> Iterator[None]:
    """The Redis process stopped (SIGSTOP): connections stay open, nothing is answered (every read
    times out, as through a partition); continued however the block ends."""
    os.kill(redis_server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)


def drained(fleet: Fleet) -> dict[str, str | None]:
    return {name: health.drain_reason for name, health in fleet.health.items()}


ALL_AVAILABLE = dict.fromkeys(NAMES)


async def test_a_store_outage_longer_than_the_staleness_drains_nothing_when_it_ends(
    redis_server: RedisServer,
) -> None:
    """The gateways cannot publish through an outage either: the first read after it sees the same
    ``seq`` as before. Before session s38 the outage's length counted toward staleness, and every
    cluster was drained at that read (stale), each request answered 503 until the next publication
    and the whole fleet slow-started after it."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await publish(client, seq=1)
        await fleet.poll_once()
        assert drained(fleet) == ALL_AVAILABLE
        clock.now += 1.0
        with stopped(redis_server):
            await fleet.poll_once()
            assert not fleet.source_up
            clock.now += 10.0  # far longer than the 3 s staleness
            await fleet.poll_once()
            assert drained(fleet) == ALL_AVAILABLE  # suspended while it lasts (as before)
        clock.now += 0.5
        await fleet.poll_once()
        assert fleet.source_up
        assert drained(fleet) == ALL_AVAILABLE
        assert not fleet.transitions
        # Staleness goes on from where it stood: one gateway publishes again, the other two do not.
        await publish(client, seq=2, names=("east-a",))
        clock.now += 1.0
        await fleet.poll_once()
        assert drained(fleet) == ALL_AVAILABLE  # 1 s counted for east-b and west-a
        clock.now += 2.5
        await fleet.poll_once()
        assert drained(fleet) == {"east-a": None, "east-b": "stale", "west-a": "stale"}


async def test_a_store_that_lost_every_key_drains_no_cluster_as_gone(redis_server: RedisServer) -> None:
    """A Redis restarted without its data (or failed over to a replica that lost it) holds no
    cluster's key. Before session s38 that read as every gateway having deleted its field on
    shutdown: the whole fleet drained at once (``gone``) until the gateways' next publication, then
    slow-started. Now each such cluster keeps its last heartbeat until its gateway writes again (on
    its own phase: one cluster back is no reason to drain the others), and staleness still drains
    one whose gateway never does; one cluster's key deleted while others remain still drains that
    cluster at once."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await publish(client, seq=1)
        await fleet.poll_once()
        assert drained(fleet) == ALL_AVAILABLE
        await client.flushall()
        for _ in range(2):
            clock.now += 0.5
            await fleet.poll_once()
            assert drained(fleet) == ALL_AVAILABLE
        await publish(client, seq=2, names=("east-a",))  # the gateways write again, one by one
        clock.now += 0.5
        await fleet.poll_once()
        assert drained(fleet) == ALL_AVAILABLE
        await publish(client, seq=2, names=("east-b",))
        clock.now += 0.5
        await fleet.poll_once()
        assert drained(fleet) == ALL_AVAILABLE
        assert not fleet.transitions  # no failover, so no slow start either
        # west-a's gateway never writes again: stale once its last heartbeat is 3 s old.
        await publish(client, seq=3, names=("east-a", "east-b"))
        clock.now += 1.5
        await fleet.poll_once()
        assert drained(fleet) == {"east-a": None, "east-b": None, "west-a": "stale"}
        await last_replica_stops(clock, client, fleet, "east-b", seq=4)  # drained at once
        assert drained(fleet)["east-b"] == "gone"


async def lost_then_rewritten(
    clock: Clock,
    client: redis_asyncio.Redis,  # type: ignore[type-arg]
    fleet: Fleet,
    early: tuple[str, ...],
) -> None:
    """The store loses every key (flushed) after one read; ``early``'s gateways write again before
    the router's next read, and every gateway before the one after. Checks that no cluster was
    drained at either read, and that no failover (so no slow start) followed."""
    await publish(client, seq=1)
    await fleet.poll_once()
    await client.flushall()
    await publish(client, seq=2, names=early)  # before the router's next read
    clock.now += 0.5
    await fleet.poll_once()
    assert drained(fleet) == ALL_AVAILABLE
    await publish(client, seq=3)
    clock.now += 0.5
    await fleet.poll_once()
    assert drained(fleet) == ALL_AVAILABLE
    assert not fleet.transitions  # no failover, so no slow start either


async def test_a_store_that_lost_its_keys_drains_none_of_them_when_a_gateway_writes_before_the_next_read(
    redis_server: RedisServer,
) -> None:
    """Gateways publish every second and a router reads every half second, so a store that lost its
    keys usually has some written again before the router's next read. Until session s42 only a
    store holding no configured key at all was taken for one that lost its data: the probe (flush,
    east-a's gateway writes, the router reads) drained east-b and west-a as ``gone`` and
    slow-started both (ramp 0.16 three seconds later)."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await lost_then_rewritten(clock, client, fleet, early=("east-a",))
        assert {name: health.ramp(now=clock.now) for name, health in fleet.health.items()} == dict.fromkeys(
            NAMES, 1.0
        )


async def test_a_store_that_lost_its_keys_drains_no_cluster_when_all_but_one_write_before_the_next_read(
    redis_server: RedisServer,
) -> None:
    """The store readable throughout, every gateway but one writes again between the loss and the
    router's next read: one key vanished, which was taken for that cluster's last gateway stopping.
    Until session s42 it was drained as ``gone`` and slow-started (the probe: flush, east-a and
    east-b write, the router reads: west-a ``gone``). A gateway that stops says ``draining``
    for its drain period first, so a key vanishing under a fresh heartbeat that did not say so is
    kept until its gateway writes again, or drained as ``stale`` if it never does."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await lost_then_rewritten(clock, client, fleet, early=("east-a", "east-b"))
        await client.delete(PREFIX + "west-a")  # and if its gateway never writes again: stale
        clock.now += 3.5
        await publish(client, seq=4, names=("east-a", "east-b"))
        await fleet.poll_once()
        assert drained(fleet) == {"east-a": None, "east-b": None, "west-a": "stale"}


async def test_a_cluster_whose_gateway_said_draining_before_its_key_went_is_gone_at_once(
    redis_server: RedisServer,
) -> None:
    """The last gateway replica of a cluster stopping publishes ``draining`` through its drain
    period, then deletes its field (and so the key): drained at once, as ``draining`` then
    ``gone``, however many keys the store holds."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await publish(client, seq=1)
        await fleet.poll_once()
        await client.hset(PREFIX + "east-b", "pod-0/1", beat("east-b", seq=2, draining=True).encode())
        clock.now += 0.5
        await fleet.poll_once()
        assert drained(fleet)["east-b"] == "draining"
        await client.delete(PREFIX + "east-b")
        clock.now += 0.5
        await fleet.poll_once()
        assert drained(fleet) == {"east-a": None, "east-b": "gone", "west-a": None}


async def test_a_store_read_again_after_an_outage_without_a_key_drains_that_cluster_by_staleness_only(
    redis_server: RedisServer,
) -> None:
    """A store restarted (or failed over) without its data is unreadable first: the first read
    after it missing a key it held is the loss, not that cluster's gateway stopping (whose own
    deletion could not reach the store either), even when every other gateway wrote again first.
    Until session s42 the cluster was drained at that read as ``gone``; now it keeps its last
    heartbeat until its gateway writes again, and is drained as ``stale`` if it never does."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await publish(client, seq=1)
        await fleet.poll_once()
        clock.now += 0.5
        with stopped(redis_server):
            await fleet.poll_once()
            assert not fleet.source_up
        await client.flushall()  # back without its data
        await publish(client, seq=2, names=("east-a", "east-b"))  # two gateways write first
        clock.now += 0.5
        await fleet.poll_once()
        assert fleet.source_up
        assert drained(fleet) == ALL_AVAILABLE
        await publish(client, seq=3, names=("east-a", "east-b"))  # west-a's gateway never does
        clock.now += 3.5  # the outage's second excused: 3 s counted
        await fleet.poll_once()
        assert drained(fleet) == {"east-a": None, "east-b": None, "west-a": "stale"}
        # the store readable throughout: gone at once
        await last_replica_stops(clock, client, fleet, "east-b", seq=4)
        assert drained(fleet)["east-b"] == "gone"


async def test_a_router_started_on_an_empty_store_waits_for_heartbeats(redis_server: RedisServer) -> None:
    """An empty store at start is a fleet that has not published yet, not a store that lost its
    data: the store is up and the clusters wait for their first heartbeat (required by default)."""
    clock = Clock()
    async with polled_fleet(redis_server, clock) as fleet:
        await fleet.poll_once()
        assert fleet.source_up
        assert drained(fleet) == dict.fromkeys(NAMES, "no-heartbeat")


async def test_a_cluster_that_never_sent_a_heartbeat_has_an_age_an_alert_can_fire_on(
    redis_server: RedisServer,
) -> None:
    """Until session s42 ``igw_global_heartbeat_age_seconds`` had no series for a cluster whose
    gateway never published (a wrong ``keyPrefix`` or cluster name, a store it cannot reach): an
    alert on the age never fired for it. Its age now runs from the router's start."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await publish(client, seq=1, names=("east-a",))
        clock.now += 4.0
        await fleet.poll_once()
        registry = fleet._metrics.registry
        ages = {
            name: registry.get_sample_value("igw_global_heartbeat_age_seconds", {"cluster": name})
            for name in NAMES
        }
        assert ages == {"east-a": 0.0, "east-b": 4.0, "west-a": 4.0}


WRONG = "wrong-secret-3f9a1c"
RIGHT = "right-secret-7d2e4b"


async def test_a_store_that_refuses_the_password_is_named_in_the_log_and_readyz(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A heartbeat Redis (``requirepass``) refusing the router's password (``WRONGPASS``), or asking
    for one the router does not send (``NOAUTH``), is a configuration error, not an outage: the log
    and ``/readyz`` say so, naming ``passwordEnv`` and its variable, never the password. Before
    session s39 both read as any outage (``heartbeat store unreadable (AuthenticationError: ...)``),
    and ``/readyz`` of a router started that way said only ``heartbeat_source_up: false``."""
    monkeypatch.setenv("PATH", redis_on_path())
    monkeypatch.setenv("SF_HB_PASSWORD", WRONG)
    server = start_redis(tmp_path, password=RIGHT)
    caplog.set_level(logging.ERROR, logger="igw.global_router")
    try:
        for redis_node, cause in (
            (
                {"url": server.url, "passwordEnv": "SF_HB_PASSWORD"},
                "refused the router's authentication: wrong password (or user) from "
                "spec.heartbeats.redis.passwordEnv, environment variable SF_HB_PASSWORD",
            ),
            (
                {"url": server.url},
                "refused the router's authentication: it requires a password and none is configured "
                "(set spec.heartbeats.redis.passwordEnv",
            ),
        ):
            caplog.clear()
            app = create_global_app(
                parse_global_config(global_doc(heartbeats={"redis": redis_node})), rng=random.Random(1)
            )
            async with (
                serve_app(app, host="127.0.0.1", port=0) as url,
                aiohttp.ClientSession() as http,
                http.get(url + "/readyz") as resp,
            ):
                assert resp.status == 503
                detail = await resp.json()
                shown = await resp.text()
            assert detail["heartbeat_source_up"] is False
            assert cause in detail["heartbeat_source_problem"]
            logged = caplog.text
            assert cause in logged
            for text in (shown, logged):
                assert WRONG not in text
                assert RIGHT not in text
    finally:
        server.stop()


async def test_a_store_refusing_every_write_drains_no_cluster_that_was_fresh(
    redis_server: RedisServer,
) -> None:
    """A full heartbeat store (``maxmemory`` with ``noeviction``) refuses the gateways' writes
    (``OOM command not allowed``) and still answers the router's reads. Until session s40 every
    cluster then went stale at once and the whole fleet was drained (probe: 20 of 20 requests
    ``503 no_healthy_cluster`` 5 s after the store filled, every cluster healthy). Now, when every
    publishing cluster is silent past the staleness at once, the ones fresh at the fleet's last
    heartbeat keep it (one already stale stays drained); once heartbeats come again each has its
    staleness from where it stood then."""
    from redis.exceptions import ResponseError

    async with polled_store(redis_server) as (clock, client, fleet):
        try:
            await publish(client, seq=1)
            await fleet.poll_once()
            clock.now += 4.5  # west-a's gateway stopped publishing before the store filled: stale
            await publish(client, seq=2, names=("east-a", "east-b"))
            await fleet.poll_once()
            assert drained(fleet) == {"east-a": None, "east-b": None, "west-a": "stale"}
            await client.config_set("maxmemory-policy", "noeviction")
            await client.config_set("maxmemory", "1")
            with pytest.raises(ResponseError, match="maxmemory"):
                await publish(client, seq=3)
            for step in (2.0, 1.5, 30.0):  # past the 3 s staleness, and far past it
                clock.now += step
                await fleet.poll_once()
                assert drained(fleet) == {"east-a": None, "east-b": None, "west-a": "stale"}
            assert fleet.readiness()[1]["heartbeats_silent_s"] == pytest.approx(33.5)
            await client.config_set("maxmemory", "0")  # room again: east-a's gateway writes first
            await publish(client, seq=3, names=("east-a",))
            clock.now += 0.5
            await fleet.poll_once()
            assert "heartbeats_silent_s" not in fleet.readiness()[1]
            clock.now += 2.5  # east-b's staleness from where it stood at the last heartbeat (0 s)
            await fleet.poll_once()
            assert drained(fleet) == {"east-a": None, "east-b": None, "west-a": "stale"}
            clock.now += 1.0  # east-b's gateway did not write again: stale now
            await publish(client, seq=4, names=("east-a",))
            await fleet.poll_once()
            assert drained(fleet) == {"east-a": None, "east-b": "stale", "west-a": "stale"}
        finally:
            await client.config_set("maxmemory", "0")


async def test_a_flapping_cluster_does_not_grow_the_router_s_memory(redis_server: RedisServer) -> None:
    """A cluster whose key is there at one poll and gone at the next (a gateway restarting in a
    loop) makes a failover and a recovery per flap. Until session s40 the fleet kept every one for
    the process's life (two a second, without end); it keeps the last
    :data:`~igw.global_router.fleet.TRANSITIONS_KEPT` now (the metrics count them all)."""
    async with polled_store(redis_server) as (clock, client, fleet):
        await publish(client, seq=1)
        await fleet.poll_once()
        for seq in range(2, TRANSITIONS_KEPT):  # about twice as many transitions as kept
            await say_draining(client, "east-a", seq=seq)  # it stops, saying so, then its key goes
            await fleet.poll_once()
            await client.delete(PREFIX + "east-a")
            clock.now += 0.5
            await fleet.poll_once()
            await publish(client, seq=seq)
            clock.now += 0.5
            await fleet.poll_once()
        assert fleet.health["east-a"].drain_reason is None
        assert len(fleet.transitions) == TRANSITIONS_KEPT
        assert fleet.transitions[-1].kind == "recovery"


class FlappingReader:
    """A heartbeat reader whose store fails while :attr:`down` is set and answers (one fresh
    heartbeat per cluster) otherwise."""

    def __init__(self) -> None:
        self.down = False
        self.seq = 0
        self.malformed: frozenset[str] = frozenset()
        self.unread: frozenset[str] = frozenset()

    async def read(self) -> dict[str, Heartbeat]:
        if self.down:
            raise HeartbeatSourceDown("ConnectionError: Connection reset by peer")
        self.seq += 1
        return {name: beat(name, seq=self.seq) for name in NAMES}

    async def close(self) -> None:
        pass


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_flapping_store_logs_its_first_outage_and_then_counts_the_flaps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store failing every other poll (1 s) logs its first outage and return at once, then one
    line a quiet window (:data:`~igw.gateway.outage_log.QUIET_S`) counting the flaps, while
    ``igw_global_heartbeat_source_up`` follows every one. Until session s44 each flap logged an
    ERROR and a WARNING: 60 pairs in these two minutes. A store then down for good is logged once
    it has outlasted a flap (:data:`~igw.gateway.outage_log.FLAP_S`), carrying the count."""
    clock = Clock()
    reader = FlappingReader()
    metrics = FleetMetrics(CollectorRegistry())
    fleet = reading_fleet(
        global_config(failover={"heartbeatStalenessSeconds": STALENESS_S}),
        cast(HeartbeatReader, reader),
        clock=clock,
        metrics=metrics,
    )
    caplog.set_level(logging.WARNING, logger="igw.global_router")
    gauge: list[float] = []
    try:
        for poll in range(120):
            reader.down = poll % 2 == 0
            await fleet.poll_once()
            [sample] = next(iter(metrics.heartbeat_source_up.collect())).samples
            gauge.append(sample.value)
            clock.now += 1.0
        assert gauge == [0.0, 1.0] * 60  # every flap in the metric
        outages = metrics.heartbeat_source_outages
        assert [outages.labels(r)._value.get() for r in ("unreachable", "refused")] == [60.0, 0.0]
        assert lines(caplog, "unreadable") == [
            "heartbeat store unreadable (ConnectionError: Connection reset by peer): staleness suspended"
        ]
        assert lines(caplog, "readable again") == ["heartbeat store readable again"]
        # the quiet window ends at 161 (60 s after the logged return at 101): flaps 102-103 to 160-161
        assert QUIET_S == 60.0
        assert lines(caplog, "flaps") == [
            "heartbeat store readable, flapping (30 flaps in the last 59 s not logged)"
        ]
        caplog.clear()
        # down for good, inside the next quiet window: logged once it outlasts a flap
        reader.down = True
        for _ in range(int(FLAP_S) + 5):
            await fleet.poll_once()
            clock.now += 1.0
        [line] = lines(caplog, "unreadable")
        assert line.endswith(f"suspended (for {FLAP_S:.0f} s; 29 flaps in the last 68 s not logged)")
        assert len(caplog.records) == 1
    finally:
        await fleet.stop()


async def test_a_store_down_for_good_is_logged_at_once_and_its_return_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No flap before it: the first failed read is logged at once, the first good one too."""
    clock = Clock()
    reader = FlappingReader()
    fleet = reading_fleet(global_config(), cast(HeartbeatReader, reader), clock=clock)
    caplog.set_level(logging.WARNING, logger="igw.global_router")
    try:
        reader.down = True
        await fleet.poll_once()
        assert len(lines(caplog, "unreadable")) == 1
        for _ in range(100):
            clock.now += 1.0
            await fleet.poll_once()
        reader.down = False
        await fleet.poll_once()
        assert [r.getMessage() for r in caplog.records][1:] == ["heartbeat store readable again"]
        # a new outage after a quiet window is logged at once again
        clock.now += QUIET_S
        reader.down = True
        await fleet.poll_once()
        assert len(lines(caplog, "unreadable")) == 2
    finally:
        await fleet.stop()


async def test_a_gateway_publishing_to_a_flapping_store_counts_the_flaps_too(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publisher's "not published" ERROR / "published again" WARNING follow the same rule: one
    pair, then one line a quiet window with the count. Until session s44: a pair per flap. Every
    write is counted in ``igw_heartbeat_writes_total`` (until s44 no series counted a failed write),
    and a refusal (a read-only replica) is logged at once, not held like a flap."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import ReadOnlyError

    clock = Clock()
    settings = HeartbeatSettings(cluster="a", region="r", redis_url="redis://127.0.0.1:1/0")
    metrics = GatewayMetrics(lister=list, clock=clock, registry=CollectorRegistry())
    publisher = HeartbeatPublisher(cast(Any, SimpleNamespace(metrics=metrics)), settings, clock=clock)
    failing: list[Exception | None] = [None]

    async def publish_once() -> None:
        if failing[0] is not None:
            raise failing[0]

    def writes() -> dict[str, float]:
        [family] = metrics.heartbeat_writes.collect()
        return {s.labels["result"]: s.value for s in family.samples if s.name.endswith("_total")}

    monkeypatch.setattr(publisher, "publish_once", publish_once)
    caplog.set_level(logging.WARNING, logger="igw.gateway.heartbeat")
    try:
        for tick in range(120):
            failing[0] = RedisConnectionError("reset") if tick % 2 == 0 else None
            await publisher._tick()
            clock.now += 1.0
        assert len(lines(caplog, "not published")) == 1
        assert len(lines(caplog, "published again")) == 1
        [summary] = lines(caplog, "flaps")
        assert summary.endswith("is being published, flapping (30 flaps in the last 59 s not logged)")
        assert len(caplog.records) == 3
        assert writes() == {"ok": 60.0, "unreachable": 60.0, "refused": 0.0}
        caplog.clear()
        failing[0] = ReadOnlyError("You can't write against a read only replica.")
        await publisher._tick()  # inside the quiet window: a refusal is news all the same
        assert lines(caplog, "not published") == [
            "heartbeat igw:hb:a not published (ReadOnlyError); retrying "
            "(29 flaps in the last 58 s not logged)"
        ]
        assert writes()["refused"] == 1.0
    finally:
        await publisher.stop()


class FreezingReader(FlappingReader):
    """A store that answers every read; while :attr:`frozen` is set no cluster's heartbeat changes
    (the gateways' writes refused: a store at ``maxmemory`` with ``noeviction``)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = False

    async def read(self) -> dict[str, Heartbeat]:
        if not self.frozen:
            self.seq += 1
        return {name: beat(name, seq=self.seq) for name in NAMES}


async def test_a_fleet_falling_silent_and_back_in_turn_logs_its_first_silence_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store on the edge of full refuses the gateways' writes for a few seconds, then takes one
    (every 5 s here): the fleet is judged silent (ERROR "no cluster's heartbeat has changed") and
    changing again (WARNING) in turn. Until session s44 that was a pair of lines every 5 s, 23 pairs
    in these two minutes; now the rule of :mod:`igw.gateway.outage_log`: the first pair, then one
    line a quiet window with the count, while every silence still keeps the clusters (none drained)."""
    clock = Clock()
    reader = FreezingReader()
    fleet = reading_fleet(
        global_config(failover={"heartbeatStalenessSeconds": STALENESS_S}),
        cast(HeartbeatReader, reader),
        clock=clock,
    )
    caplog.set_level(logging.WARNING, logger="igw.global_router")
    judged_silent = 0
    try:
        for poll in range(120):
            reader.frozen = poll % 5 != 4  # one write taken every 5 s
            await fleet.poll_once()
            judged_silent += fleet.silent_since is not None
            assert drained(fleet) == dict.fromkeys(NAMES)
            clock.now += 1.0
        assert judged_silent == 23  # every silence judged (and its clusters kept)
        assert len(lines(caplog, "has changed for")) == 1
        assert lines(caplog, "changing again") == ["heartbeats are changing again after 5.0 s of silence"]
        # the first silence judged at 108 (the last change at 104), its end at 109; the quiet window
        # ends at 169: silences 113 to 168 counted
        assert lines(caplog, "flapping") == [
            "heartbeats are changing, flapping (12 flaps in the last 56 s not logged)"
        ]
        assert len(caplog.records) == 3
    finally:
        await fleet.stop()


class RefusingReader(FlappingReader):
    """A store that refuses the router's credentials while :attr:`refusing` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = False

    async def read(self) -> dict[str, Heartbeat]:
        if self.refusing:
            raise HeartbeatSourceRefused(
                "the heartbeat store refused the router's authentication: wrong password"
            )
        return await super().read()


async def test_a_refusal_inside_a_flapping_store_s_quiet_window_is_logged_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal of the router's credentials is an operator's mistake, not a flap: until session s44
    one that came within a minute of a logged return (a store that had flapped, then had its
    password changed) was held like a flap and logged 10 s late, or never when the Secret was fixed
    within 10 s. It is logged at once now; the same refusal coming back is counted like a flap."""
    clock = Clock()
    reader = RefusingReader()
    metrics = FleetMetrics(CollectorRegistry())
    fleet = reading_fleet(global_config(), cast(HeartbeatReader, reader), clock=clock, metrics=metrics)
    caplog.set_level(logging.WARNING, logger="igw.global_router")

    async def poll() -> None:
        await fleet.poll_once()
        clock.now += 1.0

    try:
        reader.down = True
        await poll()
        reader.down = False
        await poll()  # one outage and its return, logged: the quiet window starts
        assert len(caplog.records) == 2
        reader.refusing = True
        await poll()
        assert lines(caplog, "wrong password") == [
            "the heartbeat store refused the router's authentication: wrong password: staleness suspended"
        ]
        reader.refusing = False
        await poll()
        assert lines(caplog, "readable again")[1:] == ["heartbeat store readable again"]
        caplog.clear()
        for _ in range(5):  # the same refusal again and again, a flap each
            reader.refusing = True
            await poll()
            reader.refusing = False
            await poll()
        assert caplog.records == []
        outages = metrics.heartbeat_source_outages
        assert [outages.labels(r)._value.get() for r in ("unreachable", "refused")] == [1.0, 6.0]
    finally:
        await fleet.stop()


async def test_a_failed_prune_is_not_counted_as_a_failed_write(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write went through, the prune after it (``HGETALL``, ``HDEL``: an ACL that grants the
    gateway's user ``HSET`` alone refuses them) did not: the heartbeat is published and counted
    ``ok``, the prune counted apart (``igw_heartbeat_prunes_total{result}``) and logged once, so the
    alert on failed writes (``IgwHeartbeatWritesFailing``) stays quiet. Until session s45 the prune's
    refusal failed the whole tick: counted ``refused`` in ``igw_heartbeat_writes_total`` and logged
    as "not published" although every write landed."""
    from redis.exceptions import NoPermissionError

    clock = Clock()
    settings = HeartbeatSettings(cluster="a", region="r", redis_url=redis_server.url, ttl_s=2.0)
    metrics = GatewayMetrics(lister=list, clock=clock, registry=CollectorRegistry())
    state = SimpleNamespace(metrics=metrics, runtime=SimpleNamespace(schedulers={}), draining=False)
    publisher = HeartbeatPublisher(cast(Any, state), settings, clock=clock)
    refusing = [True]
    real_hgetall = publisher._client.hgetall

    async def hgetall(key: str) -> Any:
        if refusing[0]:
            raise NoPermissionError("this user has no permissions to run the 'hgetall' command")
        return await real_hgetall(key)

    def counted(family_of: Any) -> dict[str, float]:
        [family] = family_of.collect()
        return {s.labels["result"]: s.value for s in family.samples if s.name.endswith("_total")}

    monkeypatch.setattr(publisher._client, "hgetall", hgetall)
    caplog.set_level(logging.INFO, logger="igw.gateway.heartbeat")
    try:
        for _ in range(6):  # a prune every TTL (2 s): at 100, 102 and 104
            await publisher._tick()
            clock.now += 1.0
        assert publisher.published == 6
        assert counted(metrics.heartbeat_writes) == {"ok": 6.0, "unreachable": 0.0, "refused": 0.0}
        assert counted(metrics.heartbeat_prunes) == {"ok": 0.0, "unreachable": 0.0, "refused": 3.0}
        assert lines(caplog, "not published") == []
        assert lines(caplog, "not pruned") == [
            "heartbeat igw:hb:a: other replicas' stale fields not pruned (NoPermissionError); the "
            "heartbeat itself is published"
        ]
        refusing[0] = False
        clock.now += 1.0
        await publisher._tick()
        assert counted(metrics.heartbeat_prunes)["ok"] == 1.0
        assert lines(caplog, "pruned again") == ["heartbeat igw:hb:a: stale fields pruned again"]
    finally:
        await publisher.stop()
