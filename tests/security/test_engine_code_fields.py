"""A tenant cannot make a model server run code it chose
(:data:`igw.gateway.request_body.ENGINE_CODE_FIELDS`), through the real gateway with JWTs in front
of fake model servers that record what they get.

SGLang started with ``--enable-custom-logit-processor`` unpickles a request's ``custom_logit_processor``
and runs it; vLLM loads a request's ``logits_processors`` by qualified name where its pattern allows.
The pods serve every tenant, so before session s39 (the field forwarded as it came) any tenant of
such a pool could run code beside the others' requests."""

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
        # an escaped key is the same field once decoded
        ('"\\u0063ustom_logit_processor": "x"', "custom_logit_processor"),
    ],
    ids=["sglang", "vllm", "escaped-key"],
)
async def test_an_authenticated_tenant_cannot_send_code_for_the_model_server_to_run(
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
