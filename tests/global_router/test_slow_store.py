"""Heartbeats through a slow Redis: every reply late, within the clients' timeouts (0.5 s).

A gateway publishes every ``interval`` and routers judge a cluster stale by how long its ``seq``
has not changed, so a publisher that falls behind its interval on a slow store gets its cluster
drained though its gateway is healthy (:mod:`tests.security.delay_proxy` delays the replies)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from igw.gateway.heartbeat import HeartbeatPublisher, HeartbeatSettings
from igw.global_router.heartbeats import HeartbeatReader, HeartbeatSourceRefused
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler
from tests.global_router.support import redis_on_path
from tests.security.delay_proxy import delay_proxy
from tests.security.helpers import RedisServer, start_redis


async def test_a_slow_store_does_not_stretch_the_publication_interval(
    gateway: Callable[..., Any], redis_server: RedisServer
) -> None:
    """Every reply 0.45 s late, ``interval`` 1 s: the gateway still publishes once a second. Before
    session s43 it waited its interval after each publication's round trips, so it published every
    1.45 s, every 1.9 s when it also pruned, its connection's handshake first: 4 heartbeats in 6 s
    instead of 6, and with ``interval: 2s`` under ``heartbeatStalenessSeconds: 3`` (as the docs
    advise) a pruning publication came 2.9 s after the one before, which routers reading up to a
    poll later took for stale."""
    server = FakeModelServer("s")
    async with (
        running(server),
        gateway(config_doc([scheduler("llama", "llama")]), {"llama": [server.key]}) as gw,
    ):
        with delay_proxy(redis_server.port, delay_s=0.45) as proxy:
            settings = HeartbeatSettings(cluster="a", region="r", redis_url=proxy.url, interval_s=1.0)
            publisher = HeartbeatPublisher(gw.state, settings)
            publisher.start()
            try:
                await asyncio.sleep(5.9)  # ticks start at 0, 1, 2, 3, 4 and 5 s, each done by +0.9 s
                assert publisher.published >= 5, publisher.published
            finally:
                await publisher.stop()


async def test_a_store_wanting_a_password_none_sent_is_refused_named_with_many_clusters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``HELLO`` before the first command (a slow store's round trip saved), so the read itself
    meets the store's demand for a password: with four clusters or more it has more than 10
    arguments, which Redis refuses with ``Protocol error: unauthenticated multibulk length``, not
    ``NOAUTH``. It must still read as the configuration error it is (naming ``passwordEnv``), not
    as an outage that suspends staleness without saying why."""
    monkeypatch.setenv("PATH", redis_on_path())
    server = start_redis(tmp_path, password="s3cret-store")
    reader = HeartbeatReader(url=server.url, key_prefix="p:", clusters=["a", "b", "c", "d", "e"])
    try:
        with pytest.raises(HeartbeatSourceRefused, match="requires a password and none is configured"):
            await reader.read()
    finally:
        await reader.close()
        server.stop()
