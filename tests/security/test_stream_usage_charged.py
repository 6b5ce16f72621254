"""A stream is charged the tokens its engine reports, however many each event carries.

Before session s36 a streamed completion whose client did not ask for
``stream_options.include_usage`` was charged one output token per event. Under speculative decoding
an event carries every token a step accepted, so a tenant's ``tokensPerMinute`` let two or three
times its budget through (:mod:`igw.gateway.stream_usage`)."""

from __future__ import annotations

import ssl
from pathlib import Path

from tests.gateway.fake_model_server import FakeModelServer
from tests.gateway.support import streams_left_early
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_streams_left_early import limited_gateway


async def test_streams_of_several_tokens_per_event_are_charged_every_token(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    # 90 tokens in 30 events of three (a draft model's accepted tokens), against a 600-token bucket
    pods = (
        FakeModelServer("a", tokens=90, tokens_per_event=3),
        FakeModelServer("b", tokens=90, tokens_per_event=3),
    )
    async with limited_gateway(tmp_path, pods, issuer=jwks_server, client_ssl=client_ssl, tokens=tokens) as (
        _,
        post,
    ):
        statuses = []
        for _ in range(12):
            async with await post() as r:
                statuses.append(r.status)
                streamed = await r.read()
            if r.status == 200:
                assert b'"usage"' not in streamed  # the client did not ask for the usage chunk
        # 97 tokens a stream (the prompt's 7 and the 90 the usage chunk reports): six or seven fit
        # the bucket; counted by events (37 a stream) all twelve did
        assert 6 <= statuses.count(200) <= 7, statuses
        assert statuses[-1] == 429


async def test_a_stream_left_before_its_usage_is_charged_its_pool_s_tokens_per_event(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    """A client that leaves before the usage chunk (the last event) is charged its events times
    the tokens per event its pool's streams reported (igw.gateway.event_tokens); before session s36,
    one token per event: under speculative decoding, a third of what it read."""
    pods = tuple(FakeModelServer(n, tokens=90, tokens_per_event=3, token_delay_s=0.002) for n in "ab")
    async with limited_gateway(tmp_path, pods, issuer=jwks_server, client_ssl=client_ssl, tokens=tokens) as (
        _,
        post,
    ):
        async with await post() as r:
            assert r.status == 200
            await r.read()  # read to its end: 97 tokens charged, about 2.8 tokens per event learnt
        statuses = await streams_left_early(post, streams=10, events=25)  # 75 of the 90 tokens
        # about 75 tokens or more charged per stream left: the 503 tokens left (and the refill) serve
        # seven or eight; at one token per event (about 27 a stream) all ten were served
        assert statuses.count(200) <= 8, statuses
        assert statuses[-1] == 429
