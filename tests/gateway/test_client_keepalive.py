"""Accepted client connections probe a silent peer with TCP keep-alive on the gateway's timing."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from igw.gateway.lean_server import LeanRequestHandler
from igw.gateway.serving import CONNECTION_HANDLER_KEY, GatewayRequestHandler, serve_app
from igw.gateway.tcp_keepalive import CLIENT, UPSTREAM

NLB_IDLE_TIMEOUT_S = 350
"""An AWS Network Load Balancer's TCP idle timeout (the chart's Service)."""


async def _socket_options(request: web.Request) -> web.Response:
    """The accepted socket's keep-alive settings, read on the server side."""
    assert request.transport is not None
    sock: socket.socket = request.transport.get_extra_info("socket")
    return web.json_response(
        {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "timing": [
                sock.getsockopt(socket.IPPROTO_TCP, option)
                for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
            ],
        }
    )


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="per-socket keep-alive timing is Linux's")
@pytest.mark.parametrize("handler", [GatewayRequestHandler, LeanRequestHandler])
async def test_an_accepted_connection_probes_its_client_before_a_load_balancer_forgets_it(
    handler: type[GatewayRequestHandler],
) -> None:
    """aiohttp turns SO_KEEPALIVE on with the kernel's timing (first probe after 2 hours): a long
    silent answer's flow would be cut by the NLB and a vanished client never noticed."""
    app = web.Application()
    app[CONNECTION_HANDLER_KEY] = handler
    app.router.add_get("/sockopts", _socket_options)
    async with (
        serve_app(app, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as http,
        http.get(url + "/sockopts") as resp,
    ):
        assert resp.status == 200
        seen = await resp.json()
    assert seen == {"keepalive": 1, "timing": [CLIENT.idle_s, CLIENT.interval_s, CLIENT.probes]}


def test_the_client_timing_keeps_an_nlb_flow_open_and_the_upstream_one_fails_fast() -> None:
    assert CLIENT.idle_s < NLB_IDLE_TIMEOUT_S
    assert CLIENT.idle_s + CLIENT.interval_s * CLIENT.probes <= 180  # a vanished client within 3 minutes
    assert UPSTREAM.idle_s + UPSTREAM.interval_s * UPSTREAM.probes < CLIENT.idle_s
