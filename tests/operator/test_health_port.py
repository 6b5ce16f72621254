"""The operator's ``--health-port``: ``GET /healthz`` answers 200 over real loopback HTTP, naming the
product without versions (:mod:`igw.gateway.server_identity`)."""

from __future__ import annotations

import aiohttp

from igw.gateway.server_identity import SERVER_NAME
from igw.operator.runner import _health_server
from tests.security.helpers import free_port


async def test_healthz_answers_ok_and_names_no_versions() -> None:
    port = free_port()
    async with (
        _health_server(port),
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as response,
    ):
        assert (response.status, await response.text()) == (200, "ok")
        assert response.headers.getall("Server") == [SERVER_NAME]
