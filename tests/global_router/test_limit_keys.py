"""Rate-limit bucket keys at tier 2 never collide between tenants and models (real Redis, real JWTs)."""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import redis

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.global_router.support import MODEL, global_doc, guarded_router
from tests.security.helpers import JwksServer, ManualClock, RedisServer, TokenFactory, bearer, jwt_auth


async def test_a_tenant_named_like_another_tenants_model_bucket_does_not_drain_it(
    redis_server: RedisServer,
    jwks_server: JwksServer,
    tokens: TokenFactory,
    clock: ManualClock,
    client_ssl: ssl.SSLContext,
) -> None:
    """Tenant ``team-a|model=llama`` (a claim any printable ASCII may fill) spends its own tenant-wide
    bucket on model ``other``; tenant ``team-a``'s bucket for ``llama`` is untouched. Before session
    s44 both were the Redis key ``<prefix>team-a|model=llama``: the probe's two ``other`` requests
    left ``team-a`` a 429 on its first ``llama`` request."""
    server = FakeModelServer("east-a")
    async with running(server):
        doc: dict[str, Any] = global_doc(
            [
                {
                    "name": "east-a",
                    "region": "east",
                    "endpoint": f"http://{server.key}",
                    "models": [MODEL, "other"],
                }
            ],
            heartbeats={"required": False},
            auth=jwt_auth(jwks_server),
            authorization={"tenantClaim": "tenant"},
            rateLimits={
                "backend": "redis",
                "redis": {"url": redis_server.url, "keyPrefix": "t:grl:"},
                "default": {"requestsPerSecond": 0.001, "burst": 2},
            },
            modelRateLimits=[{"tenant": "team-a", "model": MODEL, "requestsPerSecond": 0.001, "burst": 2}],
        )
        async with (
            guarded_router(doc, clock=clock, client_ssl=client_ssl) as (url, _),
            aiohttp.ClientSession() as http,
        ):

            async def completion(tenant: str, model: str) -> int:
                headers = bearer(tokens.token(tenant=tenant))
                body = {"model": model, "prompt": "x"}
                async with http.post(url + "/v1/completions", json=body, headers=headers) as resp:
                    await resp.read()
                    return resp.status

            mallory = f"team-a|model={MODEL}"
            assert [await completion(mallory, "other") for _ in range(3)] == [200, 200, 429]
            assert [await completion("team-a", MODEL) for _ in range(3)] == [200, 200, 429]
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    try:
        keys = sorted(k.decode() for k in client.keys("t:grl:*"))
    finally:
        client.close()
    # three tenants' worth of request buckets: mallory's, team-a's, team-a's for llama
    assert len(keys) == 3, keys
