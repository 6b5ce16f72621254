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
import time
from pathlib import Path

import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import secured_gateway


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
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as servers,
        secured_gateway(tmp_path, servers, issuer=jwks_server, client_ssl=client_ssl) as gw,
    ):
        tokens.clock.now = time.time()
        headers = {"Authorization": f"Bearer {tokens.token()}", "Content-Type": "application/json"}
        body = '{"model": "m", "prompt": "hi", "max_tokens": 2, ' + raw_field + "}"
        async with gw.http.post(gw.url + "/v1/completions", data=body, headers=headers) as resp:
            status, answer = resp.status, await resp.json()
        assert status == 400, answer
        assert answer["error"]["param"] == param
        assert not any(s.received for s in servers)  # nothing reached a pod
        ok = '{"model": "m", "prompt": "hi", "max_tokens": 2, "custom_logit_processor": null}'
        async with gw.http.post(gw.url + "/v1/completions", data=ok, headers=headers) as resp:
            assert resp.status == 200  # null asks for nothing
