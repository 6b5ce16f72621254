"""A tenant's absurd output bound does not take the shared rate limiter down for everyone.

Through the real gateway, with its limits in a real ``redis-server``: a background response asking
for ``max_output_tokens: 2**63`` on a pool whose context window the gateway does not know is
charged its bound when accepted (:func:`igw.gateway.inference._background_bound`). Before session
s40 the Redis script failed on the debit (``ERR value is not an integer or out of range``: the
bucket's expiry past what Redis represents), the limiter took Redis for down, and under
``onRedisUnavailable: deny`` every tenant of the replica was refused 429 for
``retryAfterFailureSeconds``."""

from __future__ import annotations

import ssl
from pathlib import Path

from tests.security.helpers import JwksServer, RedisServer, TokenFactory
from tests.security.test_gateway_e2e import tenant_gateway


def _extensions(redis_url: str) -> dict[str, object]:
    return {
        "authorization": {
            "modelAccess": [{"claim": "tenant", "values": ["team-a", "team-b"], "models": ["m"]}]
        },
        "rateLimits": {
            "backend": "redis",
            "redis": {"url": redis_url},
            "onRedisUnavailable": "deny",
            "default": {"requestsPerSecond": 100, "tokensPerMinute": 6000},
        },
    }


async def test_a_huge_background_bound_leaves_other_tenants_served(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    redis_server: RedisServer,
) -> None:
    gateway = tenant_gateway(
        tmp_path, jwks_server, client_ssl, tokens, extensions=_extensions(redis_server.url)
    )
    async with gateway as (_, gw):
        mallory = {"Authorization": f"Bearer {tokens.token(tenant='team-a', sub='mallory')}"}
        alice = {"Authorization": f"Bearer {tokens.token(tenant='team-b', sub='alice')}"}
        url = gw.url + "/v1/responses"
        huge = {"model": "m", "input": "hi", "background": True, "max_output_tokens": 2**63}
        async with gw.http.post(url, json=huge, headers=mallory) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["status"] == "queued"
        async with gw.http.post(url, json={"model": "m", "input": "hello"}, headers=alice) as resp:
            assert resp.status == 200, await resp.text()
        async with gw.http.post(url, json={"model": "m", "input": "hello"}, headers=mallory) as resp:
            assert resp.status == 429  # mallory owes its bound: refused by the tokens limit, not Redis
            assert "token" in (await resp.json())["error"]["message"]
        errors = gw.registry.get_sample_value("igw_ratelimit_backend_errors_total", {"backend": "redis"})
        assert not errors
        assert gw.registry.get_sample_value("igw_ratelimit_backend_up", {"backend": "redis"}) == 1
