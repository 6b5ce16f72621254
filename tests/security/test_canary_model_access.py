"""``GET /v1/models`` lists a canary name (``modelRewrites``) for the callers its requests are
authorized for: through the real gateway with real JWTs over loopback.

A request naming a canary name is authorized (``modelAccess``) for the target the split sends it
to, not for the name. Until session s42 the listing checked the name: a tenant allowed ``llama``
saw it listed (and retrieved it) and was refused 403 on every call, while a tenant allowed both
targets called it with success and was told it did not exist."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.gateway.fake_model_server import FakeModelServer
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import Gw, tenant_gateway

RULE = {"model": "llama", "targets": [{"model": "m", "weight": 50}, {"model": "secret", "weight": 50}]}
ACCESS = [
    {"claim": "tenant", "values": ["by-name"], "models": ["llama"]},
    {"claim": "tenant", "values": ["both-targets"], "models": ["m", "secret"]},
    {"claim": "tenant", "values": ["one-target"], "models": ["m"]},
]


@pytest.fixture
async def gw(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> AsyncIterator[Gw]:
    """The JWT-authenticated gateway splitting ``llama`` by :data:`RULE` under :data:`ACCESS`, in
    front of a ``stable`` and a ``canary`` fake model server, running."""
    extensions = {"modelRewrites": {"rules": [RULE]}, "authorization": {"modelAccess": ACCESS}}
    pods = (FakeModelServer("stable"), FakeModelServer("canary"))
    async with tenant_gateway(
        tmp_path, jwks_server, client_ssl, tokens, extensions=extensions, pods=pods
    ) as (
        _,
        gateway,
    ):
        yield gateway


async def seen(gw: Gw, token: str) -> tuple[bool, int, set[int]]:
    """Whether ``llama`` is listed, what retrieving it answers, and what 8 calls of it answer."""
    headers = {"Authorization": f"Bearer {token}"}
    async with gw.http.get(gw.url + "/v1/models", headers=headers) as resp:
        listed = "llama" in {m["id"] for m in (await resp.json())["data"]}
    async with gw.http.get(gw.url + "/v1/models/llama", headers=headers) as resp:
        retrieved = resp.status
    codes: set[int] = set()
    for _ in range(8):
        body = {"model": "llama", "prompt": "hi", "max_tokens": 2}
        async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
            codes.add(resp.status)
    return listed, retrieved, codes


async def test_a_canary_name_is_listed_for_the_callers_allowed_every_target(
    gw: Gw, tokens: TokenFactory
) -> None:
    allowed = await seen(gw, tokens.token(tenant="both-targets", sub="b"))
    assert allowed == (True, 200, {200})  # before: not listed, 404, yet every call served
    by_name = await seen(gw, tokens.token(tenant="by-name", sub="a"))
    assert by_name == (False, 404, {403})  # before: listed, 200, yet every call refused
    one = await seen(gw, tokens.token(tenant="one-target", sub="c"))
    assert one[:2] == (False, 404)  # half its calls would be refused (the other target)


async def test_a_refused_canary_call_names_the_model_the_client_sent_not_the_target(
    gw: Gw, tokens: TokenFactory
) -> None:
    """The 403 of a call the split sends to a target the caller may not use names ``llama``: before
    session s42 it named ``m`` or ``secret``, the targets ``GET /v1/models`` hides from that caller."""
    headers = {"Authorization": f"Bearer {tokens.token(tenant='by-name', sub='a')}"}
    messages: set[str] = set()
    for _ in range(8):
        body = {"model": "llama", "prompt": "hi", "max_tokens": 2}
        async with gw.http.post(gw.url + "/v1/completions", json=body, headers=headers) as resp:
            assert resp.status == 403
            messages.add((await resp.json())["error"]["message"])
    assert messages == {"tenant 'by-name' is not allowed to use model 'llama'"}
