"""A request for ``n`` answers is admitted against its tenant's token limit as ``n`` answers.

Each of a completion's ``n`` answers may run to ``max_tokens``; before session s39 admission charged
the prompt's estimate and one ``max_tokens``, so a tenant with room for one answer was admitted a
request that could generate eight (:func:`igw.gateway.request_body.estimated_tokens`). A
completion's ``best_of`` likewise (vLLM generates that many and returns the ``n`` best), before
session s40 not counted at all."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import secured_gateway
from tests.security.test_streams_left_early import LIMITS


async def test_a_request_for_n_answers_is_admitted_as_n_times_its_output_bound(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    pods = (FakeModelServer("a", tokens=300), FakeModelServer("b", tokens=300))
    async with (
        running(*pods) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=LIMITS
        ) as gw,
    ):
        tokens.clock.now = time.time()
        headers = {"Authorization": f"Bearer {tokens.token()}"}

        async def post(**fields: int) -> int:
            body = {"model": "m", "prompt": "tell me", **fields}
            async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
                await resp.read()
                return resp.status

        # 600-token bucket; the first answer costs its prompt and 300 tokens: about 290 are left
        assert await post(max_tokens=300) == 200
        assert await post(max_tokens=100, n=4) == 429  # up to 400 tokens: more than is left
        # best_of answers generated, n returned (vLLM): counted as generated (before s40: as one)
        assert await post(max_tokens=100, n=1, best_of=4) == 429
        assert await post(max_tokens=100) == 200  # one answer of 100 fits
        assert len(pods[0].received) + len(pods[1].received) == 2
