"""The 401 path of ``igw serve`` leaks no token: tokens that fail verification against a real HTTPS
JWKS issuer (bad signature, expired, wrong audience, unknown ``kid``) are refused with OpenAI-shaped
401s that quote none of them, and nothing the process prints (at ``--log-level debug``) contains one.

The issuer is an HTTPS server on loopback with a certificate from a test CA (trustme); the gateway
subprocess trusts that CA through ``SSL_CERT_FILE``, the system trust store override that the
gateway's default TLS context honours - so the readiness wait below also proves the JWKS fetch
verified the issuer's certificate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from igw.sim.live import run_fleet
from tests.reliability.harness import MODEL, fleet_spec, gateway_doc, igw_serve
from tests.security.helpers import JwksServer, Keys, TokenFactory, jwt_auth, mint

SEGMENTS_CHECKED = 3  # header, claims and signature of each token
REASONS = {  # the guard's refusal reason (logged at debug) for each case
    "bad signature": "bad_signature",
    "expired": "expired",
    "wrong audience": "audience_mismatch",
    "unknown kid": "no_matching_key",
}


def secured_doc(issuer: JwksServer) -> dict[str, Any]:
    doc = gateway_doc()
    doc["spec"]["auth"] = jwt_auth(issuer)
    return doc


def rejected_tokens(tokens: TokenFactory, keys: Keys) -> dict[str, str]:
    """One token per verification failure, each otherwise valid for the gateway's provider."""
    now = int(time.time())
    tokens.clock.now = now
    return {
        "bad signature": mint(keys.attacker, tokens.claims(), extra_header={"kid": keys.rsa.kid}),
        "expired": tokens.token(iat=now - 7200, exp=now - 3600),
        "wrong audience": tokens.token(aud="another-application"),
        "unknown kid": tokens.token(keys.attacker),
    }


async def test_tokens_failing_verification_get_401_and_are_never_printed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ca: trustme.CA,
    jwks_server: JwksServer,
    tokens: TokenFactory,
    keys: Keys,
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # inherited by the igw serve subprocess
    bad = rejected_tokens(tokens, keys)
    good = tokens.token()
    async with run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet:
        doc = secured_doc(jwks_server)
        async with (
            igw_serve(tmp_path, doc, [fleet.pods[0].key], "--log-level", "debug") as gw,
            aiohttp.ClientSession() as http,
        ):
            body = {"model": MODEL, "prompt": "hello", "max_tokens": 3}
            for case, token in bad.items():
                for stream in (False, True):
                    resp = await http.post(
                        gw.url + "/v1/completions",
                        json={**body, "stream": stream},
                        headers={"Authorization": f"Bearer {token}", "X-Request-Id": token},
                    )
                    payload = await resp.read()
                    assert resp.status == 401, (case, payload)
                    assert resp.content_type == "application/json", case
                    error = (await resp.json())["error"]
                    assert set(error) == {"message", "type", "param", "code"}, case
                    assert resp.headers["X-Request-Id"] not in ("", token), case
                    assert "WWW-Authenticate" in resp.headers, case
                    for part in token.split(".")[:SEGMENTS_CHECKED]:
                        assert part not in payload.decode(), case
                        assert part not in str(resp.headers), case
            ok = await http.post(
                gw.url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {good}"}
            )
            assert ok.status == 200, await ok.text()  # the same gateway accepts a valid token
        printed = gw.output
    assert jwks_server.fetches >= 1
    assert "Traceback" not in printed
    for case, reason in REASONS.items():  # each token failed for the reason it was built to fail
        assert f"refused: {reason}" in printed, case
    for case, token in {**bad, "valid": good}.items():
        for part in token.split(".")[:SEGMENTS_CHECKED]:
            assert part not in printed, f"{case}: a token segment was printed"
