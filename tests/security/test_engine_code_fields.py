"""A tenant cannot make a model server run code it chose, nor reach into the engine's state of other
requests (:data:`igw.gateway.tenant_fields.TENANT_REFUSED_FIELDS`), through the real gateway with
JWTs in front of fake model servers that record what they get.

SGLang started with ``--enable-custom-logit-processor`` unpickles a request's ``custom_logit_processor``
and runs it; vLLM loads a request's ``logits_processors`` by qualified name where its pattern allows.
The pods serve every tenant, so before session s39 (the field forwarded as it came) any tenant of
such a pool could run code beside the others' requests. Before session s40 the same held for
SGLang's ``rid`` (the engine's id of a request: a duplicate in flight is refused, or on older
servers takes over the other request's output), ``session_params`` (continues a session stored on
the server) and the KV-transfer fields of disaggregated serving (SGLang's ``bootstrap_*``, vLLM's
``kv_transfer_params``)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Final

import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import SECURITY, secured_gateway, tenant_gateway


def _tenant_headers(tokens: TokenFactory) -> dict[str, str]:
    """A tenant's request headers: a valid token, a JSON body."""
    return {"Authorization": f"Bearer {tokens.token()}", "Content-Type": "application/json"}


async def _post(gw: Any, headers: dict[str, str], body: str) -> tuple[int, dict[str, Any]]:
    """POST ``body`` (raw JSON text) to ``/v1/completions``; the status and the JSON answer."""
    async with gw.http.post(gw.url + "/v1/completions", data=body, headers=headers) as resp:
        return resp.status, await resp.json()


_PLAIN: Final = '{"model": "m", "prompt": "hi", "max_tokens": 2}'


async def _refused_and_then_served(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    refused: tuple[str, str],
    served: str,
) -> None:
    """A tenant's completion with the raw JSON member ``refused[0]`` is a 400 naming the parameter
    ``refused[1]`` and reaches no pod; the same request with ``served`` instead is answered 200."""
    raw_field, param = refused
    async with tenant_gateway(tmp_path, jwks_server, client_ssl, tokens) as (servers, gw):
        headers = _tenant_headers(tokens)
        status, answer = await _post(gw, headers, _PLAIN[:-1] + ", " + raw_field + "}")
        assert status == 400, answer
        assert answer["error"]["param"] == param
        assert not any(s.received for s in servers)  # nothing reached a pod
        status, answer = await _post(gw, headers, _PLAIN[:-1] + ", " + served + "}")
        assert status == 200, answer


@pytest.mark.parametrize(
    ("raw_field", "param"),
    [
        (
            '"custom_logit_processor": "gASVKAAAAAAAAACMBWJ1aWx0aW5zlIwEZXZhbJSTlIwFMSsxlIWUUpQu"',
            "custom_logit_processor",
        ),
        ('"logits_processors": ["my_pkg.RunAnything"]', "logits_processors"),
        ('"rid": "chatcmpl-of-another-tenant"', "rid"),
        ('"session_params": {"id": "another-tenants-session"}', "session_params"),
        ('"bootstrap_host": "10.0.0.9", "bootstrap_room": 42', "bootstrap_host"),
        ('"bootstrap_room": 42', "bootstrap_room"),
        ('"kv_transfer_params": {"do_remote_prefill": true, "remote_block_ids": [1]}', "kv_transfer_params"),
        # an escaped key is the same field once decoded
        ('"\\u0063ustom_logit_processor": "x"', "custom_logit_processor"),
    ],
    ids=["sglang", "vllm", "rid", "session", "bootstrap", "bootstrap-room", "kv-transfer", "escaped-key"],
)
async def test_an_authenticated_tenant_cannot_send_engine_fields_that_reach_past_its_request(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    raw_field: str,
    param: str,
) -> None:
    # null asks for nothing
    await _refused_and_then_served(
        tmp_path, jwks_server, client_ssl, tokens, (raw_field, param), '"custom_logit_processor": null'
    )


@pytest.mark.parametrize(
    ("raw_field", "param"),
    [
        (
            '"ec_transfer_params": {"mm_hash_abc": {"peer_host": "10.0.0.9", "peer_port": 5501}}',
            "ec_transfer_params",
        ),
        ('"routed_dp_rank": 0', "routed_dp_rank"),
        ('"data_parallel_rank": 0', "data_parallel_rank"),
        ('"disagg_prefill_dp_rank": 1', "disagg_prefill_dp_rank"),
        # SGLang's --schedule-policy routing-key runs first the queued requests whose key is hot
        ('"routing_key": "mine"', "routing_key"),
        # vLLM copies vllm_xargs into extra_args, where its engine reads the transfer parameters
        ('"vllm_xargs": {"kv_transfer_params": "x"}', "vllm_xargs.kv_transfer_params"),
        ('"vllm_xargs": {"my_ext": 1, "ec_transfer_params": [1]}', "vllm_xargs.ec_transfer_params"),
    ],
    ids=[
        "ec-transfer",
        "routed-dp-rank",
        "data-parallel-rank",
        "prefill-dp-rank",
        "routing-key",
        "xargs-kv",
        "xargs-ec",
    ],
)
async def test_encoder_cache_transfer_dp_ranks_and_transfer_xargs_are_refused_for_a_tenant(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    raw_field: str,
    param: str,
) -> None:
    # other vllm_xargs entries are arguments of the operator's extensions: forwarded
    await _refused_and_then_served(
        tmp_path, jwks_server, client_ssl, tokens, (raw_field, param), '"vllm_xargs": {"target_token": 7}'
    )


@pytest.mark.parametrize(
    "header",
    [
        # SGLang with SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES replaces the body's fields with these
        "x-override-rid",
        "X-Override-Bootstrap-Host",
        "x-override-bootstrap-room",
        "x-override-routed-dp-rank",
        "x-override-priority",  # over the priority the gateway writes for enginePriority
        "x-override-conversation-id",
        # vLLM and SGLang take it as the request's data-parallel rank
        "X-data-parallel-rank",
        # SGLang's OpenAI routes take it as the request's routing_key (its routing-key queue order)
        "X-SMG-Routing-Key",
    ],
)
async def test_a_tenant_cannot_set_refused_engine_fields_through_headers(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    header: str,
) -> None:
    async with tenant_gateway(tmp_path, jwks_server, client_ssl, tokens) as (servers, gw):
        headers = _tenant_headers(tokens)
        status, answer = await _post(gw, {**headers, header: "1"}, _PLAIN)
        assert status == 400, answer
        assert answer["error"]["param"] == header.lower()
        assert header.lower() in answer["error"]["message"]
        assert not any(s.received for s in servers)  # nothing reached a pod


async def test_without_authentication_the_headers_and_fields_go_to_the_model_server(
    tmp_path: Path, client_ssl: ssl.SSLContext
) -> None:
    """No spec.auth: no tenants, network controls only; the model server's own flags decide."""
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=None, client_ssl=client_ssl, extensions=None) as gw,
    ):
        headers = {"Content-Type": "application/json", "x-override-rid": "r1", "X-Data-Parallel-Rank": "1"}
        status, answer = await _post(gw, headers, _PLAIN[:-1] + ', "routed_dp_rank": 1}')
        assert status == 200, answer
        received = servers[0].received[-1]
        assert received.headers["x-override-rid"] == "r1"
        assert b'"routed_dp_rank": 1' in received.body


ALLOWING: Final = {
    "authorization": {
        **SECURITY["authorization"],
        "allowedEngineFields": ["rid", "routed_dp_rank"],
    },
}


async def test_allowed_engine_fields_are_forwarded_and_the_others_still_refused(
    tmp_path: Path, jwks_server: JwksServer, client_ssl: ssl.SSLContext, tokens: TokenFactory
) -> None:
    gateway = tenant_gateway(tmp_path, jwks_server, client_ssl, tokens, extensions=ALLOWING)
    async with gateway as (servers, gw):
        headers = _tenant_headers(tokens)
        allowed = {**headers, "x-override-rid": "mine-2", "X-Data-Parallel-Rank": "1"}
        status, answer = await _post(gw, allowed, _PLAIN[:-1] + ', "rid": "mine-1", "routed_dp_rank": 1}')
        assert status == 200, answer
        received = servers[0].received[-1]
        assert b'"rid": "mine-1"' in received.body
        assert received.headers["x-override-rid"] == "mine-2"
        assert received.headers["X-Data-Parallel-Rank"] == "1"
        for extra, param in [
            ('"session_params": {"id": "s"}', "session_params"),
            ('"custom_logit_processor": "x"', "custom_logit_processor"),
        ]:
            status, answer = await _post(gw, headers, _PLAIN[:-1] + ", " + extra + "}")
            assert (status, answer["error"]["param"]) == (400, param)
        status, answer = await _post(gw, {**headers, "x-override-bootstrap-room": "7"}, _PLAIN)
        assert (status, answer["error"]["param"]) == (400, "x-override-bootstrap-room")
        assert len(servers[0].received) == 1
