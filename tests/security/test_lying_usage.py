"""A model server's ``usage`` is believed only within bounds.

The pods serve every tenant, and what each tenant is charged comes from the usage they report. Before
session s40 any integer was taken as it came: a negative count failed the request with a 500 after
the answer had arrived (the token counter refused it), and a count near ``2**64`` made the shared
Redis limiter's script fail, which declared the backend down for every tenant of the replica
(:data:`igw.gateway.upstream.MAX_REPORTED_TOKENS`)."""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path
from typing import Any

from tests.gateway.fake_model_server import PROMPT_TOKENS, FakeModelServer, running
from tests.security.helpers import JwksServer, RedisServer, TokenFactory
from tests.security.test_gateway_e2e import secured_gateway


async def test_negative_usage_counts_are_not_a_500_nor_counted(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    liar = FakeModelServer("a", tokens=3, reported={"prompt_tokens": -5, "completion_tokens": -1_000_000})
    async with (
        running(liar, FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions={}) as gw,
    ):
        tokens.clock.now = time.time()
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        for stream in (False, True):
            body = {"model": "m", "prompt": "hello", "stream": stream}
            async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                answer = await resp.read()
            assert resp.status == 200, answer  # relayed as it came, not an internal error
            if stream:
                assert answer.endswith(b"data: [DONE]\n\n")
            else:
                assert json.loads(answer)["usage"]["prompt_tokens"] == -5
        sample = gw.registry.get_sample_value
        # counted as answers that report no usage: the prompt's estimate and the output's events
        prompt = sample("igw_tenant_tokens_total", {"tenant": "team-a", "kind": "prompt"})
        completion = sample("igw_tenant_tokens_total", {"tenant": "team-a", "kind": "completion"})
        assert (prompt or 0) > 0
        assert 0 < (completion or 0) < 100


async def test_a_pod_reporting_an_absurd_count_does_not_take_the_shared_limiter_down(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    redis_server: RedisServer,
) -> None:
    """One answer claiming ``2**64 - 1`` prompt tokens: the Redis script failed on it (an expiry it
    cannot write), and for ``retryAfterFailure`` every tenant of the replica got
    ``onRedisUnavailable`` (here ``deny``: 503s for a tenant that pod never served)."""
    liar = FakeModelServer("a", reported={"prompt_tokens": 2**64 - 1, "completion_tokens": 1})
    limits: dict[str, Any] = {
        "rateLimits": {
            "backend": "redis",
            "redis": {"url": redis_server.url, "retryAfterFailure": "30s"},
            "onRedisUnavailable": "deny",
            "default": {"requestsPerSecond": 100, "tokensPerMinute": 600},
        }
    }
    async with (
        running(liar, FakeModelServer("b")) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=limits
        ) as gw,
    ):
        tokens.clock.now = time.time()
        # team-a's request reaches the lying pod (pool "pool"), team-b's an honest one ("other")
        for tenant, model in (("team-a", "m"), ("team-b", "secret"), ("team-b", "secret")):
            headers = {"Authorization": f"Bearer {tokens.token(tenant=tenant)}"}
            body = {"model": model, "prompt": "hello"}
            async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                answer = await resp.read()
            assert resp.status == 200, (tenant, answer)
        sample = gw.registry.get_sample_value
        assert not sample("igw_ratelimit_backend_errors_total", {"backend": "redis"})
        # the absurd count is not believed: the prompt's estimate is charged instead
        prompt = sample("igw_tenant_tokens_total", {"tenant": "team-a", "kind": "prompt"})
        assert 0 < (prompt or 0) < 100 * PROMPT_TOKENS
