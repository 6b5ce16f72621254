"""A stream its client leaves before the end is charged what was relayed.

Before session s35 a streamed answer whose client closed the connection before the last event
counted nothing against the tenant's token rate limit: the gateway's accounting ran only for an
answer relayed to its end, so a client that read a long answer and closed the connection just
before its ``[DONE]`` was never charged (``rateLimits.tokensPerMinute`` did not bound it)."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import streams_left_early
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import secured_gateway

LIMITS = {"rateLimits": {"default": {"requestsPerSecond": 100, "tokensPerMinute": 600, "tokenBurst": 600}}}


@contextlib.asynccontextmanager
async def limited_gateway(
    tmp_path: Path,
    pods: tuple[FakeModelServer, ...],
    *,
    issuer: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
) -> AsyncIterator[tuple[Any, Callable[[], Any]]]:
    """A secured gateway under :data:`LIMITS` in front of ``pods``, and how to post a streamed
    completion to it with one tenant's token."""
    async with (
        running(*pods) as servers,
        secured_gateway(tmp_path, servers, issuer=issuer, client_ssl=client_ssl, extensions=LIMITS) as gw,
    ):
        tokens.clock.now = time.time()
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        body = {"model": "m", "prompt": "tell me", "stream": True}
        yield gw, lambda: gw.http.post(gw.url + "/v1/completions", json=body, headers=headers)


async def test_a_stream_left_before_its_end_is_charged_the_tokens_relayed(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    pods = (FakeModelServer("a", tokens=100, token_delay_s=0.002), FakeModelServer("b"))
    async with limited_gateway(tmp_path, pods, issuer=jwks_server, client_ssl=client_ssl, tokens=tokens) as (
        gw,
        post,
    ):
        statuses = await streams_left_early(post, streams=10, events=90)  # 90 of the 100 tokens
        # about 95 tokens charged per stream (the prompt's estimate and the events relayed): the
        # 600-token bucket serves six or seven, then refuses
        assert 6 <= statuses.count(200) <= 7, statuses
        assert statuses[-1] == 429
        text = await (await gw.http.get(gw.url + "/metrics")).text()
        counted = next(
            x for x in text.splitlines() if x.startswith('igw_tenant_tokens_total{kind="completion"')
        )
        assert float(counted.split()[-1]) >= 6 * 90


async def test_a_large_whole_answer_left_before_its_end_is_charged_the_bytes_relayed(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """A non-streamed answer past ``WHOLE_ANSWER_BUFFER_BYTES`` (1 MiB) is relayed as it arrives and
    its usage comes at its end: a client that reads its first megabyte and hangs up was charged its
    prompt alone until session s42, so huge answers asked for and left early got past
    ``tokensPerMinute`` (every one of these three was served). Now the bytes relayed are charged
    (four to a token, as a prompt): the first answer empties the 600-token bucket. The answer is
    larger than the socket buffers between pod and client hold, so its usage is never reached."""
    pods = (FakeModelServer("a", tokens=32_000_000), FakeModelServer("b"))  # 32 MB: "t" a token
    async with limited_gateway(tmp_path, pods, issuer=jwks_server, client_ssl=client_ssl, tokens=tokens) as (
        gw,
        _,
    ):
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        body = {"model": "m", "prompt": "tell me"}
        statuses = []
        for _ in range(3):
            async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                statuses.append(resp.status)
                if resp.status == 200:
                    await resp.content.readexactly(1 << 20)  # a megabyte, then the client leaves
                    resp.close()
        assert statuses[0] == 200
        assert 429 in statuses[1:], statuses
