"""The LoRA adapter an SGLang pod serves is the one the gateway authorized (:mod:`igw.gateway.lora_field`),
through the real gateway with JWTs in front of fake SGLang model servers that record what they get.

SGLang picks a request's adapter by ``base:adapter`` in ``model``, else by the body's ``lora_path``;
a bare adapter name in ``model`` is served by the base model. Before session s39 the gateway forwarded
a client's ``lora_path`` untouched and wrote none itself."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import Gw, secured_gateway

ACCESS = {
    "authorization": {
        "modelAccess": [
            {"claim": "tenant", "values": ["base-only"], "models": ["m"]},
            {"claim": "tenant", "values": ["adapter-only"], "models": ["m-adapter"]},
        ]
    }
}
SGLANG_POOL = {"engineType": "sglang", "loraAdapters": ["m-adapter", "secret-adapter"]}


async def _post(gw: Gw, token: str, body: dict[str, Any]) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with gw.http.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
        return r.status, await r.json()


def _chat(**fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **fields}


@contextlib.asynccontextmanager
async def _sglang_gateway(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext
) -> AsyncIterator[tuple[Gw, tuple[FakeModelServer, ...]]]:
    """The secured gateway with :data:`ACCESS` in front of two fake SGLang pods of
    :data:`SGLANG_POOL`, and those pods (what each received)."""
    pods = FakeModelServer("a", engine="sglang"), FakeModelServer("b", engine="sglang")
    async with (
        running(*pods) as servers,
        secured_gateway(
            tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl, extensions=ACCESS, pool=SGLANG_POOL
        ) as gw,
    ):
        yield gw, servers


async def test_a_tenant_cannot_reach_an_adapter_it_may_not_use_by_lora_path(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with _sglang_gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        mallory = tokens.token(tenant="base-only", sub="mallory")
        status, _ = await _post(gw, mallory, _chat(model="secret-adapter"))
        assert status == 403  # refused by name
        for smuggled in ("secret-adapter", ["secret-adapter"], "m-adapter"):
            status, answer = await _post(gw, mallory, _chat(model="m", lora_path=smuggled))
            assert status == 400, (smuggled, answer)
            assert answer["error"]["param"] == "lora_path"
        assert not servers[0].received  # none of them reached the pod
        status, _ = await _post(gw, mallory, _chat(model="m", lora_path=None))
        assert status == 200  # null names no adapter: the base model the tenant may use
        assert orjson.loads(servers[0].received[-1].body).get("lora_path") is None


async def test_an_adapter_on_an_sglang_pool_is_asked_for_by_lora_path(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    async with _sglang_gateway(tmp_path, jwks_server, client_ssl) as (gw, servers):
        tokens.clock.now = time.time()
        bob = tokens.token(tenant="adapter-only", sub="bob")
        for extra in ({}, {"lora_path": None}, {"lora_path": "m-adapter"}):
            status, answer = await _post(gw, bob, _chat(model="m-adapter", **extra))
            assert status == 200, answer
            sent = orjson.loads(servers[0].received[-1].body)
            # without it SGLang serves the base model m, which this tenant may not use
            assert sent["lora_path"] == "m-adapter", (extra, sent)
            assert sent["model"] == "m-adapter"
