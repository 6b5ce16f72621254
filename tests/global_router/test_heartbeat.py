"""Tier-1 heartbeats: the quantile arithmetic, the document, a real gateway publishing to real Redis."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis.asyncio as redis_asyncio

from igw.gateway.heartbeat import (
    HeartbeatPublisher,
    HeartbeatSettings,
    LoadWindow,
    _Counters,
    quantile_from_buckets,
)
from igw.gateway.heartbeat_message import Heartbeat
from igw.global_router.heartbeats import HeartbeatReader, HeartbeatSourceDown
from tests.gateway.fake_model_server import FakeModelServer, closed_port, running
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import beat
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
    doc = config_doc([scheduler("llama", "llama")])
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
                assert (hb.cluster, hb.region, hb.models) == ("east-a", "east", ("llama",))
                assert hb.endpoints_total == 3
                assert hb.endpoints_fresh == 2
                assert hb.saturation == pytest.approx(2 / 3)  # busy is over the thresholds, dead is not fresh
                assert hb.queue_depth == 50
                assert hb.ttft_p99_s is not None
                assert hb.ttft_p99_s > 0
                assert hb.requests_per_s > 0
                assert hb.pools["llama"].endpoints_fresh == 2
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
