"""Every response ``igw serve`` generates is OpenAI-shaped JSON with an ``X-Request-Id``; malformed
HTTP never echoes the request; no token reaches any response or any line the process prints."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
from aiohttp import web

from igw.sim.live import run_fleet
from tests.gateway.fake_model_server import FakeModelServer, Received, running
from tests.reliability.harness import MODEL, fleet_spec, gateway_doc, igw_serve, scripted_upstream

TOKEN = jwt.encode({"sub": "alice", "exp": int(time.time()) + 3600}, "k" * 32, algorithm="HS256")
BEARER = f"Bearer {TOKEN}"
DOC = gateway_doc(bbr={"maxRequestBodyBytes": 1024 * 1024})


async def raw_exchange(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes on a fresh connection; (status, headers, body) of the answer."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    assert status_line.startswith("HTTP/1.1 "), status_line
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


MALFORMED = {
    "CL+TE": (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: {auth}\r\nContent-Length: 5\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "duplicate Content-Length": (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: {auth}\r\nContent-Length: 2\r\n"
        "Content-Length: 3\r\n\r\n{{}}"
    ),
    "control byte after a JWT": (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: {auth}\x01\r\n\r\n"
    ),
    "bogus method": "G(ET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: {auth}\r\n\r\n",
    "header name with a space": "GET /healthz HTTP/1.1\r\nHost: gw\r\nX Token: {auth}\r\n\r\n",
}


def assert_openai_error(
    status: int, headers: dict[str, str], body: bytes, *, code: str | None = None
) -> None:
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, body)
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["code"], str)
    if code is not None:
        assert error["code"] == code
    assert headers.get("x-request-id"), headers
    assert TOKEN not in body.decode("latin-1")
    assert TOKEN[:20] not in body.decode("latin-1")


async def plain_text_error(request: web.Request) -> web.Response:
    """A model server's plain-text 500 that echoes the request's credentials."""
    await request.read()
    return web.Response(status=500, text=f"Internal Server Error: {request.headers.get('Authorization')}")


async def test_malformed_http_and_every_error_path_are_openai_shaped_and_leak_no_token(
    tmp_path: Path,
) -> None:
    async with run_fleet(fleet_spec("llama-3.1-8b/h100"), admin=False) as fleet:
        key = fleet.pods[0].key
        async with igw_serve(tmp_path, DOC, [key], "--log-level", "debug") as gw:
            for name, template in MALFORMED.items():
                status, headers, body = await raw_exchange(gw.url, template.format(auth=BEARER).encode())
                assert status == 400, name
                assert_openai_error(status, headers, body, code="bad_http_request")
            auth = {"Authorization": BEARER}
            async with aiohttp.ClientSession(headers=auth) as http:
                cases = [
                    ("POST", "/v1/completions", b"{not json", 400, "invalid_request"),
                    ("POST", "/v1/completions", b'{"model": "nope", "prompt": "x"}', 404, "model_not_found"),
                    ("POST", "/v1/completions", orjson.dumps({"model": TOKEN, "prompt": "x"}), 404, None),
                    ("POST", "/v1/completions", b'{"model": "llama", "max_tokens": "x"}', 400, None),
                    ("GET", f"/v1/{TOKEN}", b"", 404, "not_found"),
                    ("GET", "/v1/completions", b"", 405, "method_not_allowed"),
                    ("POST", "/v1/completions", b"x" * (2 * 1024 * 1024), 413, "request_too_large"),
                ]
                for method, path, data, want, code in cases:
                    resp = await http.request(
                        method, gw.url + path, data=data, headers={"X-Request-Id": TOKEN}
                    )
                    body = await resp.read()
                    assert resp.status == want, (path, body)
                    assert_openai_error(
                        resp.status, {k.lower(): v for k, v in resp.headers.items()}, body, code=code
                    )
                    assert resp.headers["X-Request-Id"] != TOKEN  # a token is never accepted as an id
                ok = await http.get(gw.url + "/healthz", headers={"X-Request-Id": "abc-123"})
                assert ok.headers["X-Request-Id"] == "abc-123"  # a plausible client id is kept
                done = await http.post(
                    gw.url + "/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 3}
                )
                assert done.status == 200
        printed = gw.output
    assert "Traceback" not in printed
    assert TOKEN not in printed
    assert TOKEN.split(".")[1] not in printed  # not even the claims segment
    assert printed.count("refused a malformed HTTP request") == len(MALFORMED)


async def test_non_json_upstream_errors_are_wrapped_keeping_the_status(tmp_path: Path) -> None:
    async with (
        scripted_upstream({"POST /v1/completions": plain_text_error}) as key,
        igw_serve(tmp_path, gateway_doc(), [key]) as gw,
    ):
        async with aiohttp.ClientSession() as http:
            resp = await http.post(
                gw.url + "/v1/completions",
                json={"model": MODEL, "prompt": "x"},
                headers={"Authorization": BEARER},
            )
            body = await resp.read()
        assert resp.status == 500
        assert_openai_error(
            resp.status, {k.lower(): v for k, v in resp.headers.items()}, body, code="upstream_error"
        )
        assert b"Internal Server Error:" not in body  # the upstream's text is not relayed
    assert TOKEN not in gw.output


async def forwarded_request(tmp_path: Path, **post: Any) -> Received:
    """POST ``/v1/completions`` through ``igw serve`` (must answer 200): what the model server got."""
    async with (
        running(FakeModelServer("a")) as (pod,),
        igw_serve(tmp_path, gateway_doc(), [pod.key]) as gw,
        aiohttp.ClientSession() as http,
    ):
        resp = await http.post(gw.url + "/v1/completions", **post)
        assert resp.status == 200, await resp.text()
    return pod.received[-1]


async def test_headers_named_in_connection_are_not_forwarded_either_way(tmp_path: Path) -> None:
    received = await forwarded_request(
        tmp_path,
        json={"model": MODEL, "prompt": "x"},
        headers={"Connection": "keep-alive, X-Hop-Secret", "X-Hop-Secret": "s3cr3t", "X-Kept": "1"},
    )
    forwarded = {k.lower(): v for k, v in received.headers.items()}
    assert "x-hop-secret" not in forwarded
    assert forwarded.get("x-kept") == "1"


@pytest.mark.parametrize(("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)])
async def test_compressed_request_bodies_are_forwarded_decoded(
    tmp_path: Path, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    document = {"model": MODEL, "prompt": "compressed", "max_tokens": 3}
    received = await forwarded_request(
        tmp_path,
        data=compress(orjson.dumps(document)),
        headers={"Content-Encoding": encoding, "Content-Type": "application/json"},
    )
    assert "content-encoding" not in {k.lower() for k in received.headers}
    assert orjson.loads(received.body) == document


BODIES_THAT_CANNOT_BE_READ = {
    "corrupt gzip": b"Content-Encoding: gzip\r\nContent-Length: 9\r\n\r\n\x1f\x8bgarbage",
    "corrupt deflate": b"Content-Encoding: deflate\r\nContent-Length: 7\r\n\r\ngarbage",
    "broken chunk size": b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\n",
}


async def test_a_body_that_cannot_be_read_gets_an_openai_400_and_no_traceback(tmp_path: Path) -> None:
    async with (
        running(FakeModelServer("a")) as (pod,),
        igw_serve(tmp_path, gateway_doc(), [pod.key]) as gw,
    ):
        for name, rest in BODIES_THAT_CANNOT_BE_READ.items():
            head = f"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: {BEARER}\r\n".encode()
            status, headers, body = await raw_exchange(gw.url, head + rest)
            assert status == 400, (name, body)
            assert_openai_error(status, headers, body, code="bad_http_request")
        assert (
            await raw_exchange(gw.url, b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        )[0] == 200
    assert not pod.received  # nothing reached the model server
    printed = gw.output
    assert "Traceback" not in printed
    assert TOKEN not in printed
    assert printed.count("refused a malformed") == len(BODIES_THAT_CANNOT_BE_READ)  # one line each
