"""A background response's tokens count against its tenant's token rate limit.

A Responses API request with ``background: true`` is answered at once (``status: queued``, no
usage) and generated afterwards; its usage shows only in later polls, which the gateway does not
count again (a retrieval repeats a response's usage). Before session s35 such a request was charged
its prompt's estimate and nothing else, so ``rateLimits.tokensPerMinute`` did not bound a tenant that
asked for its answers in the background. Now its output bound (``max_output_tokens``, else the pool's
context window less the prompt) is charged to the tenant's token bucket when it is accepted."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from igw.sim.live import run_fleet
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import Gw, secured_gateway
from tests.security.test_prefix_cache_isolation import sim_fleet

LIMITS = {"rateLimits": {"default": {"requestsPerSecond": 100, "tokensPerMinute": 600, "tokenBurst": 600}}}
"""10 tokens a second, 600 at once: two answers of 200 tokens, not a third."""


@contextlib.asynccontextmanager
async def _limited(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> AsyncIterator[tuple[Gw, dict[str, str]]]:
    """The secured gateway with :data:`LIMITS` before simulated vLLM pods, and a tenant's headers."""
    async with (
        run_fleet(sim_fleet(), admin=False) as fleet,
        secured_gateway(
            tmp_path, tuple(fleet.pods), issuer=jwks_server, client_ssl=client_ssl, extensions=LIMITS
        ) as gw,
    ):
        tokens.clock.now = time.time()
        yield gw, {"Authorization": f"Bearer {tokens.token()}"}


async def test_background_responses_are_charged_their_output_bound(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with _limited(tmp_path, jwks_server, client_ssl, tokens) as (gw, headers):
        statuses = []
        for background in (True, True, True, True, False):
            body = {"model": "m", "input": "hi", "max_output_tokens": 200, "background": background}
            async with gw.http.post(gw.url + "/v1/responses", json=body, headers=headers) as r:
                statuses.append(r.status)
                if r.status == 200:
                    assert (await r.json())["status"] == ("queued" if background else "completed")
        assert statuses == [200, 200, 429, 429, 429]
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        # charged, not counted: the tenant's token series show what is known to be generated
        assert 'igw_tenant_tokens_total{kind="completion",tenant="team-a"} 0.0' in text


async def test_without_max_output_tokens_the_bound_is_the_context_window(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with _limited(tmp_path, jwks_server, client_ssl, tokens) as (gw, headers):
        window = gw.state.runtime.schedulers["pool"].pool.largest_context()
        assert window is not None
        assert window > 600
        statuses = []
        for bound in (None, 1):
            body = {"model": "m", "input": "hi", "background": True, "max_output_tokens": bound}
            async with gw.http.post(gw.url + "/v1/responses", json=body, headers=headers) as r:
                statuses.append(r.status)
        assert statuses == [200, 429]  # the first may generate up to the window: the bucket owes it


async def _completed(gw: Gw, headers: dict[str, str], response_id: str) -> dict[str, Any]:
    """The stored response, polled until its generation ended."""
    for _ in range(400):
        async with gw.http.get(f"{gw.url}/v1/responses/{response_id}", headers=headers) as r:
            assert r.status == 200, await r.text()
            stored: dict[str, Any] = await r.json()
        if stored["status"] not in ("queued", "in_progress"):
            return stored
        await asyncio.sleep(0.02)
    raise AssertionError(f"{response_id} still {stored['status']}")


def _completion_tokens(text: str) -> float:
    prefix = 'igw_tenant_tokens_total{kind="completion",tenant="team-a"} '
    return float(next(line for line in text.splitlines() if line.startswith(prefix))[len(prefix) :])


async def test_the_first_poll_showing_the_usage_settles_the_bound(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """The bound charged for a background response is settled by the first retrieval that shows
    its usage: the tenant is credited what the response did not generate and its series count what
    it did, once. Before session s37 a background request without ``max_output_tokens`` left the
    tenant owing the pool's whole context window (here over 100,000 tokens against a 600-token
    bucket: about three hours at its 10 tokens a second)."""
    async with _limited(tmp_path, jwks_server, client_ssl, tokens) as (gw, headers):
        small = {"model": "m", "input": "hi", "max_output_tokens": 8}
        body = {"model": "m", "input": "hi", "background": True}
        async with gw.http.post(gw.url + "/v1/responses", json=body, headers=headers) as r:
            assert r.status == 200
            response_id = (await r.json())["id"]
        async with gw.http.post(gw.url + "/v1/responses", json=small, headers=headers) as r:
            assert r.status == 429  # in debt for the window
        stored = await _completed(gw, headers, response_id)
        generated = stored["usage"]["output_tokens"]
        assert 0 < generated < 500
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert _completion_tokens(metrics) == generated
        async with gw.http.post(gw.url + "/v1/responses", json=small, headers=headers) as r:
            assert r.status == 200, await r.text()  # the window less what it generated, credited
            charged_after = (await r.json())["usage"]["output_tokens"]
        for _ in range(3):  # later polls repeat the usage: neither counted nor credited again
            assert (await _completed(gw, headers, response_id))["usage"]["output_tokens"] == generated
        metrics = await (await gw.http.get(gw.url + "/metrics")).text()
        assert _completion_tokens(metrics) == generated + charged_after


async def test_a_resumed_stream_that_ends_with_the_usage_settles_the_bound(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """``GET /v1/responses/{id}?stream=true`` resumes a background response's events up to its
    ``response.completed``, which carries the usage: that settles the bound as a poll does."""
    async with _limited(tmp_path, jwks_server, client_ssl, tokens) as (gw, headers):
        body = {"model": "m", "input": "hi", "background": True}
        async with gw.http.post(gw.url + "/v1/responses", json=body, headers=headers) as r:
            response_id = (await r.json())["id"]
        url = f"{gw.url}/v1/responses/{response_id}?stream=true"
        async with gw.http.get(url, headers=headers) as r:
            assert r.status == 200
            events = (await r.read()).decode()
        assert "response.completed" in events
        small = {"model": "m", "input": "hi", "max_output_tokens": 8}
        async with gw.http.post(gw.url + "/v1/responses", json=small, headers=headers) as r:
            assert r.status == 200, await r.text()
