"""A heartbeat document larger in shape than any gateway publishes is not parsed, and documents are
decoded off the router's event loop (session s43).

Parsing a document builds a Python object per value while the interpreter is locked: until session
s43 the router parsed each cluster's documents on its event loop, and one cluster's writer could
stall every request the router was relaying for a tenth of a second or more at every poll.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from pathlib import Path

import orjson
import pytest
import redis.asyncio as redis_asyncio

from igw.gateway.heartbeat_message import MAX_CONTAINERS, MAX_ITEMS, Heartbeat, PoolLoad
from igw.global_router.config import parse_global_config
from igw.global_router.heartbeats import HeartbeatReader
from tests.global_router.support import MODEL, beat, global_doc, reading_fleet
from tests.security.helpers import RedisServer

SCHEMA = Path(__file__).parents[2] / "schemas" / "inferencegatewayconfig.schema.json"


def _largest_gateway_heartbeat() -> Heartbeat:
    """The heartbeat of a gateway whose configuration is at the schema's limits: the most schedulers,
    each with the most LoRA adapters, every name as long as allowed (read from the schema, so that
    raising a limit there without the decoder's bounds fails here)."""
    schema = json.loads(SCHEMA.read_text())
    schedulers: int = schema["properties"]["spec"]["properties"]["schedulers"]["maxItems"]
    adapters = schema["$defs"]["scheduler"]["properties"]["loraAdapters"]
    per_pool: int = adapters["maxItems"]
    name_length: int = adapters["items"]["maxLength"]

    def name(text: str) -> str:
        return text + "x" * (name_length - len(text))

    pools = {
        name(f"pool{p}-"): PoolLoad(
            model=name(f"model{p}-"),
            endpoints_total=1000,
            endpoints_fresh=1000,
            saturation=0.5,
            queue_depth=10,
            adapters=tuple(name(f"adapter{p}-{a}-") for a in range(per_pool)),
        )
        for p in range(schedulers)
    }
    models = tuple(sorted({m for pool in pools.values() for m in (pool.model, *pool.adapters)}))
    return dataclasses.replace(
        beat("east-a", models=models, ttft_p99=1.0), pools=pools, ttft_p50_s=0.1, ttft_p90_s=0.5
    )


def test_a_gateway_at_its_configurations_limits_is_within_the_bounds() -> None:
    largest = _largest_gateway_heartbeat()
    raw = largest.encode()
    assert raw.count(b"{") + raw.count(b"[") < MAX_CONTAINERS
    assert raw.count(b",") < MAX_ITEMS
    assert Heartbeat.decode(raw) == largest


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"junk": [{"a": i} for i in range(20_000)]}, "opens 20004 JSON objects and arrays, more than 1024"),
        ({"models": [f"m{i}" for i in range(20_000)]}, "holds 20015 separated values, more than 16384"),
    ],
    ids=["objects", "models"],
)
def test_a_heartbeat_larger_in_shape_than_any_gateway_publishes_is_refused(
    extra: dict[str, object], why: str
) -> None:
    """20 000 small objects in a field the router does not know, or 20 000 models: a working
    gateway publishes at most 203 objects and arrays and about 10 700 values. Until session s43
    the first was parsed and ignored (its objects set the garbage collector going), the second
    parsed and trimmed to the cluster's configured models."""
    doc = orjson.loads(beat("east-a").encode()) | extra
    with pytest.raises(ValueError, match=why):
        Heartbeat.decode(orjson.dumps(doc))


async def test_a_heartbeat_larger_than_any_gateway_publishes_is_not_parsed(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Real Redis: cluster ``east-a``'s gateway writes 1.4 MB holding 60 000 small objects (80 to
    350 ms of the router's loop to parse, here, before session s43): it is drained as malformed,
    the message names the bound, the other clusters are read as usual, and the decoding ran on a
    worker thread, not the event loop's."""
    config = parse_global_config(
        global_doc(heartbeats={"redis": {"url": redis_server.url, "keyPrefix": "big:"}})
    )
    reader = HeartbeatReader(
        url=redis_server.url, key_prefix="big:", clusters=[c.name for c in config.clusters]
    )
    fleet = reading_fleet(config, reader)
    hostile = orjson.loads(beat("east-a").encode()) | {
        "junk": [{"a": i, "b": [1, 2, 3]} for i in range(60_000)]
    }
    client = redis_asyncio.Redis.from_url(redis_server.url)
    try:
        await client.hset("big:east-a", "replica-1", orjson.dumps(hostile))
        for name in ("east-b", "west-a"):
            await client.hset(f"big:{name}", "replica-1", beat(name, region=name.split("-")[0]).encode())
        with caplog.at_level(logging.ERROR, logger="igw.global_router"):
            await fleet.poll_once()
        assert reader.malformed == {"east-a"}
        assert not fleet.health["east-a"].available()
        assert fleet.health["east-b"].available()
        assert fleet.health["west-a"].available()
        assert next(c.cluster.name for c in fleet.plan(MODEL)) == "east-b"
        [refusal] = [r for r in caplog.records if "not parsed" in r.getMessage()]
        assert "opens 120004 JSON objects and arrays, more than 1024" in refusal.getMessage()
        assert refusal.thread != threading.get_ident()  # decoded off the event loop's thread
    finally:
        await client.aclose()  # type: ignore[attr-defined]
        await fleet.stop()
