"""With ``tlsTermination``, the management listener (``--management-port``) serves the same certificate
over TLS as the inference port: ``/metrics`` and the detailed ``/readyz`` never go out in clear text."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import aiohttp
import pytest
import trustme

from igw.perf.serve_process import serve_process
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import gateway_doc, write_config
from tests.security.test_tls import write_pair


async def test_the_management_listener_serves_tls_with_the_gateways_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert_file, key_file = write_pair(ca, tmp_path)
    doc = gateway_doc()
    doc["spec"].setdefault("extensions", {})["tlsTermination"] = {
        "certFile": str(cert_file),
        "keyFile": str(key_file),
    }
    client = ssl.create_default_context()
    ca.configure_trust(client)
    lines: list[str] = []
    async with running(FakeModelServer("pod")) as (pod,):
        config, eps = write_config(tmp_path, doc, [pod.key])
        async with (
            serve_process(config, eps, "--management-port", "0", on_line=lines.append, ready=False) as gw,
            aiohttp.ClientSession() as http,
        ):
            found = re.search(r"management listener at (\S+)", "".join(lines))
            assert found, lines
            management = found.group(1)
            assert management.startswith("https://")
            assert gw.url.startswith("https://")
            async with http.get(management + "/metrics", ssl=client) as resp:
                assert resp.status == 200
                assert "igw_" in await resp.text()
            async with http.get(management + "/readyz", ssl=client) as resp:
                assert pod.key in await resp.text()  # the detail lives here, behind TLS
            with pytest.raises(aiohttp.ClientError):  # no clear-text answer on the management port
                async with http.get(management.replace("https://", "http://") + "/metrics") as resp:
                    await resp.read()
