"""Each tenant's prompts in a prefix cache of their own (``authorization.prefixCacheIsolation``,
:mod:`igw.gateway.cache_salt`), through the real gateway with JWTs in front of simulated vLLM pods,
whose prefix caches keep blocks of different ``cache_salt`` apart as vLLM's do.

The leak it closes: a model server reports the cached part of a prompt (``cached_tokens``, and a
shorter time to first token), so one tenant learns whether another sent a given prefix."""

from __future__ import annotations

import dataclasses
import ssl
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from igw.gateway.cache_salt import SALT_HEX, request_salt, scope_salt
from igw.gateway.guards import ANONYMOUS, Principal, caller_scope
from igw.gateway.inference_apis import InferenceApi
from igw.gateway.request_body import BadRequestBody, InferenceBody, parse_body, with_leading_field
from igw.sim.live import run_fleet
from igw.sim.spec import FleetSpec
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import Gw, secured_gateway

SECRET = "Our Q3 acquisition target is Initech; the board votes on Friday. " * 12
"""A prompt of some 200 tokens: a dozen full blocks of 16 tokens."""


def _access(isolation: str) -> dict[str, Any]:
    rule = {"claim": "tenant", "values": ["team-a", "team-b"], "models": ["m", "secret"]}
    return {"authorization": {"modelAccess": [rule], "prefixCacheIsolation": isolation}}


def sim_fleet() -> FleetSpec:
    """Two simulated vLLM pods: ``m`` (the pool every tenant may use) and ``secret``."""
    pods = [
        {"name": name, "preset": "llama-3.1-8b/h100", "served_model_name": model}
        for name, model in (("a", "m"), ("b", "secret"))
    ]
    return FleetSpec.from_mapping({"time_scale": 0.02, "seed": 1, "pods": pods})


async def _cached(gw: Gw, token: str, **extra: Any) -> int:
    """The prompt tokens of one chat completion of :data:`SECRET` that the pod had cached."""
    body = {"model": "m", "messages": [{"role": "user", "content": SECRET}], "max_tokens": 2, **extra}
    headers = {"Authorization": f"Bearer {token}"}
    async with gw.http.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        usage = (await r.json())["usage"]
    cached: int = usage["prompt_tokens_details"]["cached_tokens"]
    return cached


@pytest.mark.parametrize("isolation", ["shared", "tenant"])
async def test_a_tenant_cannot_tell_whether_another_sent_a_prompt(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    isolation: str,
) -> None:
    async with run_fleet(sim_fleet(), admin=False) as fleet:
        pods = tuple(fleet.pods)
        async with secured_gateway(
            tmp_path, pods, issuer=jwks_server, client_ssl=client_ssl, extensions=_access(isolation)
        ) as gw:
            tokens.clock.now = time.time()
            alice = tokens.token(tenant="team-a", sub="alice")
            alice_colleague = tokens.token(tenant="team-a", sub="carol")
            mallory = tokens.token(tenant="team-b", sub="mallory")
            assert await _cached(gw, alice) == 0  # the first time anyone sends it
            probe = await _cached(gw, mallory)  # the other tenant's guess
            if isolation == "shared":
                assert probe > 100  # the leak: mallory learns alice sent this prompt
                return
            assert probe == 0
            assert await _cached(gw, alice_colleague) > 100  # a tenant still shares its own cache
            # a client's own salt divides its tenant's cache further; it never reaches another's
            assert await _cached(gw, alice, cache_salt="alice-only") == 0
            assert await _cached(gw, alice, cache_salt="alice-only") > 100
            assert await _cached(gw, mallory, cache_salt="alice-only") == 0
            assert await _cached(gw, mallory, cache_salt=None) > 100  # null: the tenant's own salt


def test_each_scope_has_its_salt_and_a_clients_salt_is_mixed_in() -> None:
    a, b = scope_salt("tenant:team-a"), scope_salt("tenant:team-b")
    assert a != b
    assert len(a) == SALT_HEX
    assert scope_salt("tenant:x") != scope_salt("subject:x")
    assert request_salt(a, None) == a
    assert request_salt(a, "") == a
    mixed = request_salt(a, "user-1")
    assert mixed is not None
    assert len(mixed) == SALT_HEX
    assert mixed not in {a, b, request_salt(b, "user-1"), request_salt(a, "user-2")}
    # isolation off: the client's own tells prompts apart (a digest: the index keeps 32 digits)
    own = request_salt(None, "user-1" * 100_000)
    assert own is not None
    assert len(own) == SALT_HEX
    assert own != request_salt(None, "user-2")
    assert request_salt(None, "") is None
    assert request_salt(None, None) is None
    assert caller_scope(ANONYMOUS) == ""
    assert caller_scope(Principal(tenant="t", subject="s", authenticated=True)) == "tenant:t"


@pytest.mark.parametrize(
    ("api", "raw"),
    [
        (InferenceApi.COMPLETIONS, b'{"model": "m", "prompt": "x"}'),
        (InferenceApi.COMPLETIONS, b'  \n{"model":"m","prompt":"x"}\n'),
        (InferenceApi.COMPLETIONS, b'{"model":"m","prompt":"{\\"a\\": 1}"}'),
        (
            InferenceApi.RESPONSES,
            b'{"model":"m","input":"x","previous_response_id":"resp_1","max_output_tokens":3,"stream":true}',
        ),
    ],
)
def test_the_salt_is_written_first_and_the_rest_is_the_clients_bytes(api: InferenceApi, raw: bytes) -> None:
    body = parse_body(raw, api=api, header_model=None)
    salted = with_leading_field(body, "cache_salt", "0123")
    assert salted.raw.endswith(raw[raw.index(b"{") + 1 :])
    assert orjson.loads(salted.raw) == {"cache_salt": "0123", **orjson.loads(raw)}
    assert dataclasses.replace(salted, raw=raw) == body  # every other field kept


def test_an_empty_object_gets_the_field_alone() -> None:
    for raw in (b"{}", b" { \n } "):
        body = InferenceBody(raw, None, False, "", 1, None)
        assert orjson.loads(with_leading_field(body, "cache_salt", "s").raw) == {"cache_salt": "s"}


def test_the_clients_cache_salt_is_read_for_the_apis_that_carry_it() -> None:
    def salt_of(doc: dict[str, Any], api: InferenceApi = InferenceApi.CHAT) -> str | None:
        return parse_body(orjson.dumps(doc), api=api, header_model=None).cache_salt

    chat = {"model": "m", "messages": []}
    assert salt_of(chat) is None  # absent
    assert salt_of({**chat, "cache_salt": None}) == ""  # present: replaced, not written beside it
    assert salt_of({**chat, "cache_salt": "u1"}) == "u1"
    assert salt_of({"model": "m", "input": "x", "cache_salt": "u1"}, InferenceApi.EMBEDDINGS) is None
    with pytest.raises(BadRequestBody, match="'cache_salt' must be a string"):
        salt_of({**chat, "cache_salt": 7})
