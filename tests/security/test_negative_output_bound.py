"""A negative output bound (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) is
refused by the gateway, before any pod counts it.

A request is counted in flight on the pod it is sent to at its prompt's estimate plus ``max_tokens``
times ``n`` (:func:`igw.gateway.request_body.estimated_tokens`), what the load-aware scorers read.
Before session s46 a negative ``max_tokens`` was forwarded for the engine to refuse: with an ``n`` of
10^9 the pod it was sent to looked billions of tokens lighter while the request lasted, and drew the
pool's traffic."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import tenant_gateway


@pytest.mark.parametrize(
    ("path", "fields", "param"),
    [
        ("/v1/completions", {"prompt": "hi", "max_tokens": -5, "n": 1_000_000_000}, "max_tokens"),
        ("/v1/chat/completions", {"messages": [], "max_completion_tokens": -1}, "max_tokens"),
        ("/v1/responses", {"input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
    ],
)
async def test_a_negative_output_bound_is_refused_before_a_pod_sees_it(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    path: str,
    fields: dict[str, Any],
    param: str,
) -> None:
    async with tenant_gateway(tmp_path, jwks_server, client_ssl, tokens) as (pods, gw):
        headers = {"Authorization": f"Bearer {tokens.token()}"}
        body = {"model": "m", **fields}
        async with gw.http.post(gw.url + path, json=body, headers=headers) as resp:
            assert resp.status == 400, await resp.text()
            error = orjson.loads(await resp.read())["error"]
        assert error["param"] == param
        assert error["message"] == f"'{param}' must not be negative"
        assert [p.received for p in pods] == [[], []]
        # a bound of 0 is the engine's to judge (vLLM scores a prompt with echo and no output)
        zero = {"model": "m", "prompt": "hi", "max_tokens": 0, "echo": True}
        async with gw.http.post(gw.url + "/v1/completions", json=zero, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        assert sum(len(p.received) for p in pods) == 1
