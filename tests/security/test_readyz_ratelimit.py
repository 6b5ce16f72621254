"""``/readyz`` shows the rate-limit backend's outage without failing readiness.

A shared Redis that is down has its ``onRedisUnavailable`` policy applied to every request; failing
readiness for it would take every replica out of its load balancer at once, turning a degraded
limiter into no service. Before session s44 ``/readyz`` said nothing of it: only
``igw_ratelimit_backend_up`` and one ERROR line did. Since, its ``guard.rate_limit`` names the
backend, whether it answers, since when it has not, why (redacted) and the policy applied.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, TokenFactory, free_port
from tests.security.test_gateway_e2e import secured_gateway


async def _readyz(gw: Any) -> tuple[int, dict[str, Any]]:
    async with gw.http.get(gw.url + "/readyz") as resp:
        return resp.status, await resp.json()


async def test_readyz_shows_a_redis_outage_and_stays_ready(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    url = f"redis://igw:s3cr3t-pass@127.0.0.1:{free_port()}/0"  # nothing listens there
    limits: dict[str, Any] = {
        "rateLimits": {
            "backend": "redis",
            "redis": {"url": url, "connectTimeout": "200ms", "retryAfterFailure": "30s"},
            "onRedisUnavailable": "allow",
            "default": {"requestsPerSecond": 100},
        }
    }
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=limits
        ) as gw,
    ):
        status, before = await _readyz(gw)
        assert status == 200
        assert before["guard"]["rate_limit"] == {"backend": "redis", "up": True, "on_unavailable": "allow"}
        tokens.clock.now = time.time()
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        async with gw.http.post(
            gw.url + "/v1/completions", json={"model": "m", "prompt": "hello"}, headers=headers
        ) as resp:
            await resp.read()
        assert resp.status == 200  # the policy: allowed
        status, after = await _readyz(gw)
        shown = after["guard"]["rate_limit"]
        assert status == 200
        assert after["ready"] is True
        assert shown["up"] is False
        assert shown["on_unavailable"] == "allow"
        assert shown["backend"] == "redis"
        assert 0 <= shown["down_for_s"] < 60
        assert shown["error"].startswith("redis: ")
        async with gw.http.get(gw.url + "/readyz") as resp:
            assert "s3cr3t-pass" not in await resp.text()
