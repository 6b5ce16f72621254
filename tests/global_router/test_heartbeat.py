"""Tier-1 heartbeats: the quantile arithmetic, the document, a real gateway publishing to real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio as redis_asyncio
from prometheus_client import CollectorRegistry

from igw.gateway.heartbeat import (
    HeartbeatPublisher,
    HeartbeatSettings,
    LoadWindow,
    _Counters,
    quantile_from_buckets,
)
from igw.gateway.heartbeat_message import Heartbeat
from igw.global_router import heartbeats
from igw.global_router.config import build_global_config
from igw.global_router.heartbeats import (
    MAX_KEY_BYTES,
    MAX_READ_FIELDS,
    MAX_REPLICA_FIELDS,
    HeartbeatReader,
    HeartbeatSourceDown,
)
from igw.global_router.metrics import FleetMetrics
from tests.gateway.fake_model_server import FakeModelServer, closed_port, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.global_router.support import beat, global_doc, reading_fleet
from tests.reliability.harness import gateway_doc, igw_serve
from tests.security.helpers import RedisServer

INF = float("inf")


def test_quantiles_interpolate_inside_buckets_like_histogram_quantile() -> None:
    buckets = [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (INF, 100.0)]
    assert quantile_from_buckets(buckets, 0.5) == pytest.approx(0.1)
    assert quantile_from_buckets(buckets, 0.7) == pytest.approx(0.1 + 0.4 * 20 / 40)
    assert quantile_from_buckets(buckets, 0.99) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert quantile_from_buckets([(0.1, 0.0), (INF, 0.0)], 0.5) is None
    assert quantile_from_buckets([(0.1, 1.0), (INF, 10.0)], 0.99) == 0.1  # in +Inf: last finite bound


async def poll(
    reader: HeartbeatReader, cond: Callable[[Heartbeat], bool], *, within: float = 5.0
) -> dict[str, Heartbeat | None]:
    """Read until the ``east-a`` heartbeat satisfies ``cond``; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        seen = await reader.read()
        hb = seen.get("east-a")
        if hb is not None and cond(hb):
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"heartbeat never satisfied the condition; last: {hb}")
        await asyncio.sleep(0.05)


def test_document_round_trips_and_malformed_ones_name_the_problem() -> None:
    original = beat("a", ttft_p99=0.25, saturation=0.5)
    assert Heartbeat.decode(original.encode()) == original
    with pytest.raises(ValueError, match="lacks field 'seq'"):
        Heartbeat.decode(b'{"cluster": "a", "region": "r"}')
    with pytest.raises(ValueError, match="not JSON"):
        Heartbeat.decode(b"{")
    with pytest.raises(ValueError, match="must be a JSON object"):
        Heartbeat.decode(b"[1]")


def _document(**changes: Any) -> bytes:
    """A well-formed published document with ``changes`` applied (a value of ``...`` removes the field)."""
    doc = orjson.loads(beat("a", ttft_p99=0.25, saturation=0.5).encode())
    pool = {"model": "llama", "endpoints_total": 2, "endpoints_fresh": 2, "saturation": 0.5, "queue_depth": 0}
    doc["pools"] = {"llama": pool}
    for name, value in changes.items():
        if value is ...:
            del doc[name]
        else:
            doc[name] = value
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # A P99 of -0.05 s made the routing weight's divisor 0: every request for the model failed.
        ({"ttft_p99_s": -0.05}, "field 'ttft_p99_s' must be a finite number of at least 0, got number -0.05"),
        ({"ttft_p50_s": "nan"}, "field 'ttft_p50_s' must be a finite number of at least 0, got string 'nan'"),
        ({"requests_per_s": -1}, "field 'requests_per_s' must be a finite number of at least 0"),
        ({"saturation": "nan"}, "field 'saturation' must be a number from 0 to 1, got string 'nan'"),
        ({"saturation": 1.5}, "field 'saturation' must be a number from 0 to 1, got number 1.5"),
        ({"saturation": True}, "field 'saturation' must be a number from 0 to 1, got boolean True"),
        ({"draining": "false"}, "field 'draining' must be true or false, got string 'false'"),
        ({"models": "llama"}, "field 'models' must be a list of strings, got string 'llama'"),
        ({"models": ["llama", 3]}, "field 'models' must be a list of strings"),
        ({"models": ...}, "lacks field 'models'"),
        ({"seq": True}, "field 'seq' must be an integer of at least 0, got boolean True"),
        ({"seq": 1.5}, "field 'seq' must be an integer of at least 0, got number 1.5"),
        ({"endpoints_fresh": -3}, "field 'endpoints_fresh' must be an integer of at least 0, got integer -3"),
        ({"queue_depth": "7"}, "field 'queue_depth' must be an integer of at least 0, got string '7'"),
        ({"cluster": ""}, "field 'cluster' must be a non-empty string"),
        ({"region": None}, "field 'region' must be a non-empty string, got null"),
        ({"sent_at": None}, "field 'sent_at' must be a finite number of at least 0, got null"),
        ({"version": 2}, "format version 2 is newer than this router reads (1): upgrade the global router"),
        ({"version": 0}, "field 'version' must be at least 1"),
        ({"pools": []}, "field 'pools' must be an object, got array"),
        ({"pools": {"llama": 1}}, "field 'pools.llama' must be an object"),
        (
            {
                "pools": {
                    "llama": {
                        "model": "llama",
                        "endpoints_total": 2,
                        "endpoints_fresh": 2,
                        "saturation": -0.1,
                        "queue_depth": 0,
                    }
                }
            },
            "field 'pools.llama.saturation' must be a number from 0 to 1",
        ),
        ({"pools": {"llama": {"model": "llama"}}}, "lacks field 'pools.llama.endpoints_total'"),
        (
            {
                "pools": {
                    "llama": {
                        "model": "llama",
                        "endpoints_total": 2,
                        "endpoints_fresh": 2,
                        "saturation": 0.5,
                        "queue_depth": 0,
                        "adapters": "sql-lora",
                    }
                }
            },
            "field 'pools.llama.adapters' must be a list of strings, got string 'sql-lora'",
        ),
    ],
)
def test_a_document_no_working_gateway_publishes_is_refused_naming_the_field(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Heartbeat.decode(_document(**changes))


def test_optional_fields_may_be_absent_or_null_and_unknown_fields_are_ignored() -> None:
    decoded = Heartbeat.decode(
        _document(
            ttft_p50_s=None,
            ttft_p90_s=...,
            rate_429_per_s=...,
            draining=...,
            version=...,
            pools=None,
            added_by_a_newer_gateway={"x": 1},
        )
    )
    assert (decoded.ttft_p50_s, decoded.ttft_p90_s, decoded.ttft_p99_s) == (None, None, 0.25)
    assert (decoded.rate_429_per_s, decoded.draining, decoded.version, dict(decoded.pools)) == (
        0.0,
        False,
        1,
        {},
    )
    assert Heartbeat.decode(_document(saturation=1, sent_at=0)).saturation == 1.0  # JSON integers are numbers


def test_a_counter_reset_starts_the_load_window_anew_so_no_rate_or_ttft_goes_below_zero() -> None:
    window = LoadWindow(window_s=10.0)
    window.add(_Counters(at=0.0, ttft={0.1: 5.0, INF: 10.0}, requests=10.0, rejected_429=1.0))
    oldest, newest = window.add(
        _Counters(at=1.0, ttft={0.1: 8.0, INF: 20.0}, requests=20.0, rejected_429=2.0)
    )
    assert oldest.at == 0.0  # no reset: the window spans both
    for reset in (
        _Counters(at=2.0, ttft={0.1: 8.0, INF: 20.0}, requests=3.0, rejected_429=2.0),
        _Counters(at=2.0, ttft={0.1: 1.0, INF: 20.0}, requests=25.0, rejected_429=2.0),
        _Counters(at=2.0, ttft={0.1: 8.0, INF: 20.0}, requests=25.0, rejected_429=0.0),
    ):
        again = LoadWindow(window_s=10.0)
        again.add(_Counters(at=1.0, ttft={0.1: 8.0, INF: 20.0}, requests=20.0, rejected_429=2.0))
        oldest, newest = again.add(reset)
        assert oldest is newest is reset


async def test_gateway_publishes_its_load_and_the_router_reads_it(
    gateway: Callable[..., Any], redis_server: RedisServer
) -> None:
    doc = config_doc([scheduler("llama", "llama", loraAdapters=["sql-lora"])])
    doc["spec"]["extensions"]["globalHeartbeat"] = {
        "cluster": "east-a",
        "region": "east",
        "redis": {"url": redis_server.url, "keyPrefix": "t:hb:"},
        "interval": "100ms",
    }
    busy = FakeModelServer("busy", waiting=50, kv=0.99)
    idle = FakeModelServer("idle", waiting=0, kv=0.1)
    async with running(busy, idle):
        dead = f"127.0.0.1:{closed_port()}"
        async with gateway(doc, {"llama": [busy.key, idle.key]}, wait_fresh=True) as gw:
            gw.endpoints_path.write_text(f"schedulers:\n  llama: [{busy.key}, {idle.key}, '{dead}']\n")
            for _ in range(4):
                resp = await gw.post("/v1/completions", {"model": "llama", "prompt": "hi", "stream": True})
                await resp.read()
            reader = HeartbeatReader(url=redis_server.url, key_prefix="t:hb:", clusters=["east-a", "west-a"])
            try:
                seen = await poll(reader, lambda hb: hb.endpoints_total == 3 and hb.ttft_p99_s is not None)
                hb = seen["east-a"]
                assert hb is not None
                assert seen["west-a"] is None
                assert (hb.cluster, hb.region, hb.models) == ("east-a", "east", ("llama", "sql-lora"))
                assert hb.endpoints_total == 3
                assert hb.endpoints_fresh == 2
                assert hb.saturation == pytest.approx(2 / 3)  # busy is over the thresholds, dead is not fresh
                assert hb.queue_depth == 50
                assert hb.ttft_p99_s is not None
                assert hb.ttft_p99_s > 0
                assert hb.requests_per_s > 0
                assert hb.pools["llama"].endpoints_fresh == 2
                # the pool names its adapters: a router reads an adapter's load from it (since s40)
                assert hb.pools["llama"].adapters == ("sql-lora",)
                first = hb.seq
                await poll(reader, lambda b: b.seq > first)
                gw.state.draining = True
                await poll(reader, lambda b: b.draining)
            finally:
                await reader.close()
        # The gateway deleted its key when it stopped: routers drain it at once.
        reader = HeartbeatReader(url=redis_server.url, key_prefix="t:hb:", clusters=["east-a"])
        assert (await reader.read()) == {"east-a": None}
        await reader.close()


async def test_reader_ignores_malformed_or_misnamed_documents(redis_server: RedisServer) -> None:
    client = redis_asyncio.Redis.from_url(redis_server.url)
    await client.set("p:a", b"{oops")
    await client.set("p:b", beat("not-b").encode())
    await client.set("p:c", beat("c").encode())
    reader = HeartbeatReader(url=redis_server.url, key_prefix="p:", clusters=["a", "b", "c"])
    got = await reader.read()
    assert got["a"] is None
    assert got["b"] is None
    assert got["c"] is not None
    assert reader.malformed == {"a", "b"}
    await client.set("p:a", beat("a").encode())
    await client.set("p:b", _document(ttft_p99_s=-0.05).replace(b'"cluster":"a"', b'"cluster":"b"'))
    got = await reader.read()
    assert got["a"] is not None
    assert got["b"] is None
    assert reader.malformed == {"b"}
    await reader.close()
    await client.aclose()  # type: ignore[attr-defined]


async def test_a_hostile_replica_or_pool_name_forges_no_line_of_the_router_s_log(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica's field name and a pool's name are whatever the heartbeat's writer chose. Until
    session s42 both went into the router's log as they came: a name holding a line break wrote a
    line of the writer's choosing (``ERROR forged ...``) into it. Both are quoted now."""
    client = redis_asyncio.Redis.from_url(redis_server.url)
    doc = orjson.loads(beat("a").encode())
    doc["pools"] = {"x\nERROR forged pool": 5}
    await client.hset("j:a", mapping={"gw-1\nERROR forged replica": b"{oops", "gw-2": orjson.dumps(doc)})
    reader = HeartbeatReader(url=redis_server.url, key_prefix="j:", clusters=["a"])
    try:
        with caplog.at_level(logging.ERROR, logger="igw.global_router"):
            await reader.read()
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 3  # each replica's problem, then the cluster drained
        assert all("\n" not in message for message in messages)
        assert any("replica 'gw-1\\nERROR forged replica'" in message for message in messages)
        assert any("'pools.x\\nERROR forged pool'" in message for message in messages)
    finally:
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]


async def test_unreachable_store_raises_source_down_and_publisher_keeps_serving() -> None:
    url = f"redis://127.0.0.1:{closed_port()}/0"
    reader = HeartbeatReader(url=url, key_prefix="p:", clusters=["a"])
    with pytest.raises(HeartbeatSourceDown):
        await reader.read()
    await reader.close()


async def test_publisher_failure_is_reported_not_fatal(gateway: Callable[..., Any]) -> None:
    from redis.exceptions import RedisError

    server = FakeModelServer("s")
    async with (
        running(server),
        gateway(config_doc([scheduler("llama", "llama")]), {"llama": [server.key]}) as gw,
    ):
        settings = HeartbeatSettings(
            cluster="a", region="r", redis_url=f"redis://127.0.0.1:{closed_port()}/0"
        )
        publisher = HeartbeatPublisher(gw.state, settings)
        with pytest.raises((RedisError, OSError)):
            await publisher.publish_once()
        assert publisher.published == 0
        await publisher.stop()
        resp = await gw.post("/v1/completions", {"model": "llama", "prompt": "x"})
        assert resp.status == 200


async def test_the_gateway_s_emf_heartbeat_writes_name_the_cluster_its_heartbeats_name(
    gateway: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Since session s45 the ``HeartbeatWrites`` documents carry ``Cluster`` (the one
    ``spec.extensions.globalHeartbeat`` names), so the CDK app's failed-writes alarm reads its own
    cluster's series, not the sum of every cluster of the account and region."""
    caplog.set_level(logging.INFO, logger="igw.emf")
    doc = config_doc([scheduler("llama", "llama")])
    doc["spec"]["extensions"]["globalHeartbeat"] = {
        "cluster": "east-a",
        "region": "east",
        "redis": {"url": f"redis://127.0.0.1:{closed_port()}/0"},
        "interval": "100ms",
    }

    def writes() -> list[dict[str, Any]]:
        documents = [orjson.loads(r.getMessage()) for r in caplog.records if r.name == "igw.emf"]
        return [d for d in documents if "HeartbeatWrites" in d]

    server = FakeModelServer("s")
    async with running(server), gateway(doc, {"llama": [server.key]}, emf_interval_s=0.1):
        await wait_for(lambda: bool(writes()), what="a HeartbeatWrites document")
    assert {(d["Cluster"], d["Result"]) for d in writes()} == {("east-a", "unreachable")}


async def test_saturated_gateway_reports_saturation_and_its_429_rate(
    gateway: Callable[..., Any], redis_server: RedisServer
) -> None:
    doc = config_doc([scheduler("llama", "llama")])
    doc["spec"]["extensions"]["globalHeartbeat"] = {
        "cluster": "east-a",
        "region": "east",
        "redis": {"url": redis_server.url, "keyPrefix": "s:hb:"},
        "interval": "100ms",
    }
    busy = FakeModelServer("busy", waiting=500, kv=0.99)
    async with running(busy), gateway(doc, {"llama": [busy.key]}) as gw:
        codes = []
        for _ in range(5):
            resp = await gw.post("/v1/completions", {"model": "llama", "prompt": "hi"})
            codes.append(resp.status)
            await resp.read()
        assert set(codes) == {429}
        reader = HeartbeatReader(url=redis_server.url, key_prefix="s:hb:", clusters=["east-a"])
        try:
            seen = await poll(reader, lambda b: b.rate_429_per_s > 0)
        finally:
            await reader.close()
        hb = seen["east-a"]
        assert hb is not None
        assert hb.saturation == 1.0
        assert hb.queue_depth == 500


async def _field_names(client: Any, key: str) -> set[str]:
    return {name.decode() for name in await client.hkeys(key)}


async def test_replicas_publish_one_field_each_from_worker_0_and_one_stopping_drains_nothing(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """Two replicas of one cluster's gateway, each ``igw serve --workers 2``, as real processes. When
    the cluster had one key that every replica overwrote, a replica stopping in a rolling update
    deleted it (after saying ``draining``): every router drained the whole cluster ("gone"), then
    slow-started it over ``slowStartSeconds``, while the other replica served."""
    doc = gateway_doc()
    doc["spec"]["extensions"]["globalHeartbeat"] = {
        "cluster": "east-a",
        "region": "east",
        "redis": {"url": redis_server.url, "keyPrefix": "r:hb:"},
        "interval": "100ms",
    }
    config = build_global_config(global_doc(heartbeats={"pollIntervalSeconds": 0.05}))
    reader = HeartbeatReader(
        url=redis_server.url, key_prefix="r:hb:", clusters=["east-a", "east-b", "west-a"]
    )
    fleet = reading_fleet(config, reader)
    client = redis_asyncio.Redis.from_url(redis_server.url)
    pod = FakeModelServer("p0")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    try:
        async with (
            running(pod),
            igw_serve(tmp_path / "one", doc, [pod.key], "--workers", "2") as one,
            igw_serve(tmp_path / "two", doc, [pod.key], "--workers", "2") as two,
        ):
            for group in (one, two):  # worker 0's pid: the readiness answer names the worker
                while (worker := await _worker_of_new_connection(group.url))["index"] != 0:
                    pass
                group.lines.append(f"worker 0 pid {worker['pid']}\n")
            host = socket.gethostname()
            zeros = {
                f"{host}/{line.split()[-1]}"
                for line in one.lines + two.lines
                if line.startswith("worker 0 pid ")
            }
            fields: set[str] = set()
            deadline = time.monotonic() + 30
            for _ in range(600):  # polled: Redis tells no one when a field is written
                fields = await _field_names(client, "r:hb:east-a")
                if fields == zeros or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert fields == zeros  # one field per replica, written by its worker 0 only
            await fleet.poll_once()
            assert fleet.health["east-a"].available()

            stopped = asyncio.get_running_loop().create_task(one.stop())
            while not stopped.done():  # the router polls through the replica's drain and exit
                await fleet.poll_once()
                await asyncio.sleep(0.05)
            assert await stopped == 0
            for _ in range(10):
                await fleet.poll_once()
                await asyncio.sleep(0.05)
            assert [t for t in fleet.transitions if t.cluster == "east-a"] == []
            assert fleet.health["east-a"].ramp(now=time.monotonic()) == 1.0
            assert len(await _field_names(client, "r:hb:east-a")) == 1  # the stopped one removed its own
            # The last replica stops too: it says draining, then the key is gone, and the cluster
            # with it (a key vanishing under a heartbeat that did not say draining is kept until
            # stale: the store lost it, test_store_faults.py).
            stopped = asyncio.get_running_loop().create_task(two.stop())
            while not stopped.done():
                await fleet.poll_once()
                await asyncio.sleep(0.05)
            assert await stopped == 0
        assert await client.exists("r:hb:east-a") == 0
        await fleet.poll_once()
        assert fleet.health["east-a"].drain_reason == "gone"
    finally:
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]


async def _worker_of_new_connection(url: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as fresh, fresh.get(url + "/readyz") as resp:
        worker: dict[str, int] = (await resp.json())["worker"]
        return worker


@contextlib.asynccontextmanager
async def _replicas_of_one_gateway(
    gateway: Callable[..., Any], redis_server: RedisServer, ttl_s: float
) -> AsyncIterator[tuple[Any, Any, Callable[..., HeartbeatPublisher]]]:
    """A gateway (one pod), a client of ``redis_server`` and a maker of heartbeat publishers for it:
    ``replica(name, clock, wall=...)`` publishes as replica ``name`` of cluster ``a`` under key prefix
    ``k:`` with ``ttl_s``, reading the times it is given - several replicas of one gateway."""
    server = FakeModelServer("s")
    client = redis_asyncio.Redis.from_url(redis_server.url)
    settings = HeartbeatSettings(
        cluster="a", region="r", redis_url=redis_server.url, key_prefix="k:", ttl_s=ttl_s
    )
    try:
        async with (
            running(server),
            gateway(config_doc([scheduler("llama", "llama")]), {"llama": [server.key]}) as gw,
        ):

            def replica(
                name: str, clock: Callable[[], float], wall: Callable[[], float] = time.time
            ) -> HeartbeatPublisher:
                return HeartbeatPublisher(
                    gw.state, dataclasses.replace(settings, replica=name), clock=clock, wall=wall
                )

            yield gw, client, replica
    finally:
        await client.aclose()  # type: ignore[attr-defined]


async def test_a_field_left_by_a_replica_killed_outright_is_pruned_after_the_ttl(
    gateway: Callable[..., Any], redis_server: RedisServer
) -> None:
    async with _replicas_of_one_gateway(gateway, redis_server, ttl_s=2.0) as (_, client, replica):
        clock = [0.0]
        killed = replica("killed", lambda: clock[0])
        await killed.publish_once()  # then killed: never stopped, its field stays
        live = replica("live", lambda: clock[0])
        await live.publish_once()  # prunes (its first write): sees killed's field as it is
        assert await _field_names(client, "k:a") == {"killed", "live"}
        clock[0] += 1.0
        await live.publish_once()  # the live replica's next write: no prune within a TTL
        assert await _field_names(client, "k:a") == {"killed", "live"}
        clock[0] += 1.5
        await live.publish_once()  # prunes: killed's seq unchanged for 2.5 s, past the 2 s TTL
        assert await _field_names(client, "k:a") == {"live"}
        await live.stop()
        await killed.stop()


@pytest.mark.parametrize("ttl_s", [10.0, 60.0, 90.0])
async def test_a_replica_prunes_at_least_once_per_prune_every_s(
    gateway: Callable[..., Any], redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, ttl_s: float
) -> None:
    """``HeartbeatSettings.prune_every_s`` bounds the time between a replica's prunes, writes coming
    every ``interval`` a little late (the CDK app's failed-prunes alarm sizes its period by it), TTLs
    under, at and over the one-minute EMF interval."""
    async with _replicas_of_one_gateway(gateway, redis_server, ttl_s=ttl_s) as (_, _client, replica):
        clock = [0.0]
        publisher = replica("live", lambda: clock[0])
        pruned: list[float] = []

        async def prune() -> None:
            pruned.append(clock[0])

        monkeypatch.setattr(publisher, "prune", prune)
        settings = dataclasses.replace(HeartbeatSettings(cluster="a", region="r"), ttl_s=ttl_s)
        for tick in range(int(4 * ttl_s) + 5):
            clock[0] = tick * settings.interval_s + (0.01 if tick % 3 else 0.0)  # jitter: late ticks
            await publisher.publish_once()
        await publisher.stop()
    gaps = [b - a for a, b in itertools.pairwise(pruned)]
    assert len(gaps) >= 3
    assert ttl_s <= min(gaps) <= max(gaps) <= settings.prune_every_s


async def test_a_step_of_the_wall_clock_prunes_no_live_replica(
    gateway: Callable[..., Any], redis_server: RedisServer
) -> None:
    """Ages are measured on the pruning replica's monotonic clock. Until session s41 they were the
    fields' ``sent_at`` against its wall clock: after an NTP step of one node by a minute (TTL 10 s),
    its prune removed the other replica's field although that replica had just written it, and at
    every prune while the step lasted; a node whose clock ran a minute behind had its own field
    pruned by the others likewise."""
    async with _replicas_of_one_gateway(gateway, redis_server, ttl_s=10.0) as (_, client, replica):
        clock, ahead, behind = [0.0], [1000.0], [1000.0]
        stepped = replica("stepped", lambda: clock[0], wall=lambda: ahead[0])
        other = replica("other", lambda: clock[0], wall=lambda: behind[0])
        await other.publish_once()
        await stepped.publish_once()
        for _ in range(3):  # both keep writing every second for 30 s; one node's clock is a minute ahead
            ahead[0] += 60.0 if clock[0] == 0.0 else 0.0
            for _ in range(10):
                clock[0] += 1.0
                ahead[0] += 1.0
                behind[0] += 1.0
                await other.publish_once()
                await stepped.publish_once()
            assert await _field_names(client, "k:a") == {"stepped", "other"}
        await stepped.stop()
        await other.stop()


async def test_the_reader_merges_replicas_and_drains_only_a_cluster_with_no_good_document(
    redis_server: RedisServer,
) -> None:
    client = redis_asyncio.Redis.from_url(redis_server.url)
    await client.hset("m:a", mapping={"gw-1": beat("a", saturation=0.2).encode(), "gw-2": b"{oops"})
    await client.hset(
        "m:b", mapping={"gw-1": _document(ttft_p99_s=-1).replace(b'"cluster":"a"', b'"cluster":"b"')}
    )
    await client.set("m:c", beat("c", saturation=0.5).encode())  # a gateway from before per-replica fields
    reader = HeartbeatReader(url=redis_server.url, key_prefix="m:", clusters=["a", "b", "c", "d"])
    try:
        got = await reader.read()
        a, c = got["a"], got["c"]
        assert a is not None
        assert a.saturation == 0.2  # the malformed replica is left out, the cluster is not drained
        assert got["b"] is None
        assert c is not None
        assert c.saturation == 0.5
        assert got["d"] is None
        assert reader.malformed == {"b"}
        await client.hset("m:a", "gw-2", beat("a", saturation=0.6).encode())
        again = (await reader.read())["a"]
        assert again is not None
        assert again.saturation == pytest.approx(0.4)
    finally:
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]


async def test_an_oversized_key_drains_its_cluster_and_the_others_are_read(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Before session s38 every key was read whole in one pipeline: one cluster's key with 20,000
    replica fields or a 10 MB document pushed the read past its 0.5 s timeout at every poll, the
    router took the store for down and suspended staleness for the whole fleet. Each key is measured
    first now; a key too large (or of another type) drains only its cluster."""
    client = redis_asyncio.Redis.from_url(redis_server.url)
    fields: dict[str | bytes, bytes | float | int | str] = {
        f"gw-{i}": beat("a").encode() for i in range(MAX_REPLICA_FIELDS + 1)
    }
    await client.hset("o:a", mapping=fields)
    await client.set("o:b", b"x" * (MAX_KEY_BYTES + 1))
    await client.rpush("o:c", b"a list")
    await client.hset("o:d", mapping={"gw-1": beat("d").encode()})
    reader = HeartbeatReader(url=redis_server.url, key_prefix="o:", clusters=["a", "b", "c", "d"])
    try:
        with caplog.at_level(logging.ERROR, logger="igw.global_router"):
            got = await reader.read()
            await reader.read()  # logged once per cluster, not at every poll
        assert got["a"] is None
        assert got["b"] is None
        assert got["c"] is None
        assert got["d"] is not None
        assert reader.malformed == {"a", "b", "c"}
        refused = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
        assert len(refused) == 3
        assert f"{MAX_REPLICA_FIELDS + 1} replica fields, more than {MAX_REPLICA_FIELDS}" in refused[0]
        assert f"{MAX_KEY_BYTES + 1} bytes, more than {MAX_KEY_BYTES}" in refused[1]
        assert "a list, not a hash of replica documents" in refused[2]
        await client.delete("o:a")
        await client.hset("o:a", mapping={"gw-1": beat("a").encode()})
        assert (await reader.read())["a"] is not None
        assert reader.malformed == {"b", "c"}
    finally:
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]


async def test_a_read_over_its_budget_drains_the_largest_key_and_reads_the_others(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each key was bounded (1 024 fields, 4 MiB) but a read was not: until session s42 six clusters
    each holding 950 valid 4 KB replica documents (23 MB, 5 700 documents) took 1.0 to 1.6 s of the
    router's event loop per read against a 0.5 s poll (requests stalled up to 1.3 s). A read now
    takes at most ``MAX_READ_FIELDS`` fields and ``MAX_READ_BYTES`` bytes: the largest keys are
    refused until the rest fit, their clusters drained (logged once, ``igw_global_heartbeat_unread``)."""
    client = redis_asyncio.Redis.from_url(redis_server.url)
    each = MAX_READ_FIELDS // 2 - 24  # a's and b's within a key's bounds, all three over a read's
    await client.hset("t:east-a", mapping={f"gw-{i}": beat("east-a").encode() for i in range(each)})
    await client.hset("t:east-b", mapping={f"gw-{i}": beat("east-b").encode() for i in range(each + 10)})
    await client.hset("t:west-a", mapping={f"gw-{i}": beat("west-a").encode() for i in range(100)})
    config = build_global_config(global_doc())
    reader = HeartbeatReader(url=redis_server.url, key_prefix="t:", clusters=["east-a", "east-b", "west-a"])
    metrics = FleetMetrics(CollectorRegistry())
    fleet = reading_fleet(config, reader, metrics=metrics)
    try:
        with caplog.at_level(logging.ERROR, logger="igw.global_router"):
            await fleet.poll_once()
            await fleet.poll_once()  # logged once, not at every poll
        assert fleet.health["east-b"].drain_reason == "malformed"
        assert fleet.health["east-a"].available()
        assert fleet.health["west-a"].available()
        assert reader.unread == {"east-b"}
        refused = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
        assert len(refused) == 1
        assert "the largest key of a read over its budget" in refused[0]
        assert f"more than {heartbeats.MAX_READ_BYTES} bytes or {MAX_READ_FIELDS} fields" in refused[0]
        unread = {
            c: metrics.registry.get_sample_value("igw_global_heartbeat_unread", {"cluster": c})
            for c in ("east-a", "east-b", "west-a")
        }
        assert unread == {"east-a": 0.0, "east-b": 1.0, "west-a": 0.0}
        await client.delete("t:east-b")  # within the budget again: read, and the gauge says so
        await fleet.poll_once()
        assert reader.unread == frozenset()
        assert metrics.registry.get_sample_value("igw_global_heartbeat_unread", {"cluster": "east-b"}) == 0.0
    finally:
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]


async def test_the_reader_lets_the_event_loop_run_while_it_decodes(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Decoding is the read's cost (about 0.26 ms per 4 KB document here) and ran in one piece:
    until session s42 a read of 5 700 documents held the event loop for up to 1.3 s, every request
    of the replica waiting. Session s42 made it yield every 5 ms between documents, which left one
    large document parsed in one piece on the loop (60 to 140 ms for 3.8 MB); since session s43
    the documents are decoded on a worker thread: the problem logged for a malformed one among
    them comes from another thread than the loop's, and a task on the loop runs during the read."""
    client = redis_asyncio.Redis.from_url(redis_server.url)
    documents = 200
    await client.hset("y:a", mapping={f"gw-{i}": beat("a").encode() for i in range(documents)})
    await client.hset("y:a", "gw-bad", b"{oops")
    reader = HeartbeatReader(url=redis_server.url, key_prefix="y:", clusters=["a"])
    turns = 0
    reading = True

    async def count() -> None:
        nonlocal turns
        while reading:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.get_running_loop().create_task(count())
    try:
        before = turns
        with caplog.at_level(logging.ERROR, logger="igw.global_router"):
            assert (await reader.read())["a"] is not None
        assert turns > before
        [problem] = [r for r in caplog.records if "gw-bad" in r.getMessage()]
        assert problem.thread != threading.get_ident()
    finally:
        reading = False
        await counter
        await reader.close()
        await client.aclose()  # type: ignore[attr-defined]
