"""Absolute-form request targets (RFC 9112 3.2.2) on the inference port.

Found by probing (session s46): ``POST http://evil.example/v1/completions`` is served as
``/v1/completions``, as the RFC says a server must, and the gateway never routes on, logs or
forwards the client's ``Host`` (the pod gets its own) - but ``POST ftp://evil.example/...`` (a
forward proxy's request) and ``POST http://user:pw@evil.example/...`` (user-info, which RFC 9110
4.2.4 says to treat as an error) were served alike. They are refused with 400 now, before any pod
is asked; the target's authority, not ``Host``, is the request's host (aiohttp's ``request.host``).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from aiohttp import web

from igw.gateway.serving import CONNECT_REFUSED, serve_app, target_refusal
from igw.global_router.config import parse_global_config
from igw.global_router.server import create_global_app, global_management_app
from tests.global_router.support import global_doc
from tests.reliability.harness import MODEL, gateway_doc, in_process_gateway, scripted_upstream

BODY = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 2}).encode()


async def exchange(url: str, target: str) -> tuple[int, bytes]:
    """One raw ``POST target`` with ``Host: gw.local`` to the gateway at ``url``: status and body."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST {target} HTTP/1.1\r\nHost: gw.local\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + BODY)
    data = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.rpartition(b"\r\n\r\n")[2]


@pytest.mark.parametrize(
    ("target", "status", "says"),
    [
        ("http://evil.example/v1/completions", 200, ""),
        ("HTTPS://evil.example:8443/v1/completions?x=1", 200, ""),
        ("ftp://evil.example/v1/completions", 400, "must be an http or https URI"),
        ("http://user:pw@evil.example/v1/completions", 400, "must not carry user information"),
    ],
)
async def test_an_absolute_target_is_served_by_its_path_or_refused(
    tmp_path: Path, target: str, status: int, says: str
) -> None:
    seen: list[tuple[str, str | None]] = []

    async def pod(request: web.Request) -> web.Response:
        await request.read()
        seen.append((request.raw_path, request.headers.get("Host")))
        return web.json_response({"id": "cmpl-1", "choices": [{"index": 0, "text": "ok"}]})

    async with (
        scripted_upstream({"POST /v1/completions": pod}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
    ):
        got, answer = await exchange(gw.url, target)
    assert got == status, answer
    if status == 200:
        # the path (and query) alone reach the pod, with the pod's own Host: neither the target's
        # authority nor the client's Host field is forwarded
        assert seen == [("/" + target.split("/", 3)[3], key)]
    else:
        assert b'"code":"bad_http_request"' in answer, answer
        assert says.encode() in answer, answer
        assert b"pw" not in answer
        assert seen == []


def test_origin_form_targets_are_not_read_as_absolute() -> None:
    """An origin-form target holding ``://`` or ``@`` further on is no absolute form."""
    assert target_refusal("/v1/completions?next=ftp://a@b") is None
    assert target_refusal("//evil.example/v1/completions") is None  # a path; the router answers 404


def test_an_absolute_target_s_authority_must_be_a_valid_host() -> None:
    """(aiohttp's parser refuses these first; the check keeps the rule where the others are.)"""
    why = target_refusal("http://ev{il}/v1/completions")
    assert why is not None
    assert "invalid authority" in why


async def test_connect_is_refused_on_every_listener(tmp_path: Path) -> None:
    """Found by probing (session s47): ``CONNECT 169.254.169.254:80`` was answered 404 ``CONNECT :
    Not Found`` (the authority-form target has no path) on the inference, management and global
    router ports alike; it is a 400 naming the cause now, the connection closed."""
    config = parse_global_config(global_doc())
    router = create_global_app(config, rng=random.Random(1), read_heartbeats=False, management_listener=True)
    async with (
        scripted_upstream({}) as key,
        in_process_gateway(tmp_path, gateway_doc(), [key]) as gw,
        serve_app(router, host="127.0.0.1", port=0) as traffic,
        serve_app(global_management_app(router), host="127.0.0.1", port=0) as management,
    ):
        for url in (gw.url, traffic, management):
            host, port = url.split("//", 1)[1].rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), timeout=10)  # closed after the answer
            writer.close()
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 "), (url, data)
            assert b'"code":"bad_http_request"' in body, body
            assert CONNECT_REFUSED.encode() in body, body
