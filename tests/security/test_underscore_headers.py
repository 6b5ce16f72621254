"""A client header spelt with ``_`` for ``-`` never passes for one the gateway owns.

CGI and WSGI servers (and the frameworks on them) map ``X-IGW-Tenant`` and ``X_IGW_Tenant`` to one
variable, ``HTTP_X_IGW_TENANT``: a model server or sidecar reading the gateway's identity headers
that way read the client's copy beside the gateway's. Before session s46 the gateway stripped only
the dashed spelling, so ``X_IGW_Tenant: spoofed`` reached the model server next to the verified
tenant, on both server sides.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from igw.gateway.lean_server import SWITCH_ENV
from tests.security.helpers import JwksServer, TokenFactory
from tests.security.test_gateway_e2e import tenant_gateway

SPOOFED = {
    "X_IGW_Tenant": "spoofed",  # the tenant header (tenantHeader)
    "x_igw_subject": "spoofed",  # a forwardClaims header
    "X_Gateway_Model_Name": "secret",  # a routing header the gateway writes
    "X_Request_Id": "client-chosen",  # the id the gateway writes
    "X_Api_Key": "a-token",  # a credential header the guard strips
    "Transfer_Encoding": "chunked",  # a hop-by-hop name
}


@pytest.mark.parametrize("side", ["lean", "aiohttp"])
async def test_an_owned_header_spelt_with_underscores_never_reaches_a_model_server(
    tmp_path: Path,
    jwks_server: JwksServer,
    client_ssl: ssl.SSLContext,
    tokens: TokenFactory,
    monkeypatch: pytest.MonkeyPatch,
    side: str,
) -> None:
    monkeypatch.setenv(SWITCH_ENV, side)
    async with tenant_gateway(tmp_path, jwks_server, client_ssl, tokens) as ((a, _), gw):
        headers = {"Authorization": f"Bearer {tokens.token()}", **SPOOFED, "X_Client_Note": "kept"}
        status, _, body = await gw.call(headers=headers)
        assert status == 200, body
        sent = {name.lower(): value for name, value in a.received[-1].headers.items()}
        # the gateway's values under the dashed names; no client copy under the other spelling
        assert sent["x-igw-tenant"] == "team-a"
        assert sent["x-igw-subject"] == "user-1"
        assert sent["x-gateway-model-name"] == "m"
        assert not [name for name in sent if "_" in name and name != "x_client_note"], sent
        assert "spoofed" not in sent.values()
        assert "a-token" not in sent.values()
        # an underscore name the gateway does not own is forwarded as it came
        assert sent["x_client_note"] == "kept"
