"""A stream is charged the tokens its engine reports, however many each event carries.

Before session s36 a streamed completion whose client did not ask for
``stream_options.include_usage`` was charged one output token per event. Under speculative decoding
an event carries every token a step accepted, so a tenant's ``tokensPerMinute`` let two or three
times its budget through (:mod:`igw.gateway.stream_usage`)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import secured_gateway
from tests.security.test_streams_left_early import LIMITS


async def test_streams_of_several_tokens_per_event_are_charged_every_token(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    # 90 tokens in 30 events of three (a draft model's accepted tokens), against a 600-token bucket
    pods = (
        FakeModelServer("a", tokens=90, tokens_per_event=3),
        FakeModelServer("b", tokens=90, tokens_per_event=3),
    )
    async with (
        running(*pods) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=LIMITS
        ) as gw,
    ):
        tokens.clock.now = time.time()
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        body = {"model": "m", "prompt": "tell me", "stream": True}
        statuses = []
        for _ in range(12):
            async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as r:
                statuses.append(r.status)
                streamed = await r.read()
            if r.status == 200:
                assert b'"usage"' not in streamed  # the client did not ask for the usage chunk
        # 97 tokens a stream (the prompt's 7 and the 90 the usage chunk reports): six or seven fit
        # the bucket; counted by events (37 a stream) all twelve did
        assert 6 <= statuses.count(200) <= 7, statuses
        assert statuses[-1] == 429
