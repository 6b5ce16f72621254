"""The global router's listener bounds slow clients the way a tier-1 gateway does (``ServerLimits``)."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml
from aiohttp import web

from igw.gateway.serving import ServerLimits, serve_app
from igw.global_router.config import GlobalConfigError, parse_global_config
from igw.global_router.server import ROUTER_KEY, create_global_app
from tests.gateway.support import read_response
from tests.global_router.support import MODEL, global_doc, post_part_of_a_body
from tests.reliability.harness import end_process
from tests.security.helpers import wait_until


async def test_a_body_that_stalls_gets_408_and_the_connection_closed() -> None:
    """The body was read with no bound: a client that sent half of it held the connection forever. Now
    408 and ``Connection: close`` (aiohttp then lingers up to 10 s for the rest before closing)."""
    app = create_global_app(parse_global_config(global_doc()), rng=random.Random(1), read_heartbeats=False)
    limits = ServerLimits(body_timeout_s=0.5)
    async with serve_app(app, host="127.0.0.1", port=0, limits=limits) as url:
        reader, writer, head = await post_part_of_a_body(url, announced=100, sent=b'{"model":')
        length = int(
            next(
                v
                for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                if k.lower() == b"content-length"
            )
        )
        body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
        writer.close()
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in head.lower()
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_timeout"
    assert "0.5s" in error["message"]


async def test_the_request_body_limit_is_the_configs() -> None:
    """``spec.routing.maxRequestBodyBytes``: the router holds each body whole while it tries clusters,
    so its limit is the operator's to size with the replica's memory (fixed at 256 MiB before)."""
    doc = global_doc(routing={"maxRequestBodyBytes": 1024})
    app = create_global_app(parse_global_config(doc), rng=random.Random(1), read_heartbeats=False)
    body = orjson.dumps({"model": "llama", "prompt": "x" * 2048})
    async with (
        serve_app(app, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as http,
        http.post(f"{url}/v1/completions", data=body) as resp,
    ):
        assert resp.status == 413
        error = (await resp.json())["error"]
    assert error["code"] == "request_too_large"
    assert "spec.routing.maxRequestBodyBytes (1024 bytes)" in error["message"]


def test_server_limits_are_read_from_the_config_and_named_by_their_path(tmp_path: Path) -> None:
    doc = global_doc(serverLimits={"keepAliveTimeout": "300s"})
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config), "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "spec.serverLimits.keepAliveTimeout: at most 120s" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(GlobalConfigError, match=r"spec\.serverLimits\.maxHeaders"):
        parse_global_config(global_doc(serverLimits={"maxHeaders": "many"}))


def test_igw_global_serve_applies_the_configs_server_limits(tmp_path: Path) -> None:
    """``spec.serverLimits`` reaches the listener of a real ``igw global serve`` (before session s39
    the router ran on the defaults whatever an operator needed: no header, connection or timeout
    bound of its own): ``maxHeaders: 8`` answers a request with 20 header fields 431."""
    config = tmp_path / "global.yaml"
    config.write_text(yaml.safe_dump(global_doc(serverLimits={"maxHeaders": 8, "drainPeriod": "0s"})))
    proc = subprocess.Popen(
        [sys.executable, "-m", "igw.cli.main", "global", "serve", "--config", str(config),
         "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        url = ""
        for line in proc.stderr:
            if found := re.search(r"serving \d+ cluster\(s\) at (http://\S+)", line):
                url = found.group(1)
                break
        assert url, "the router did not start"
        headers = {f"x-extra-{i}": "1" for i in range(20)}
        request = urllib.request.Request(url + "/v1/models", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 431
        refused.value.close()
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        end_process(proc)


async def test_bodies_the_router_cannot_read_are_counted_in_its_request_metric() -> None:
    """400 (not JSON), 413 (over ``maxRequestBodyBytes``), 415 (an unknown ``Content-Encoding``) and
    408 (a stalled body) were answered and counted nowhere: ``igw_global_requests_total`` ("requests
    answered, by model and HTTP status") and every rate and error ratio built on it missed them,
    while tier 1 counts its own. Labelled by the header's model when it is served, as 401s are."""
    doc = global_doc(routing={"maxRequestBodyBytes": 1024})
    app = create_global_app(parse_global_config(doc), rng=random.Random(1), read_heartbeats=False)
    sends: tuple[tuple[bytes, dict[str, str]], ...] = (
        (b"{not json", {"x-gateway-model-name": "llama"}),
        (orjson.dumps({"model": "llama", "prompt": "x" * 2048}), {}),
        (b"x", {"Content-Encoding": "br2", "x-gateway-model-name": "made-up"}),
    )
    async with serve_app(app, host="127.0.0.1", port=0, limits=ServerLimits(body_timeout_s=0.5)) as url:
        async with aiohttp.ClientSession() as http:
            for data, headers in sends:
                async with http.post(f"{url}/v1/completions", data=data, headers=headers) as resp:
                    assert resp.status in (400, 413, 415)
        _, writer, head = await post_part_of_a_body(url, announced=100, sent=b'{"model":')
        writer.close()
        assert head.startswith(b"HTTP/1.1 408 ")
        async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
            page = await resp.text()
    counted = {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in page.splitlines()
        if line.startswith("igw_global_requests_total{")
    }
    assert counted == {
        'igw_global_requests_total{code="400",model="llama"}': 1.0,
        'igw_global_requests_total{code="413",model="(unknown)"}': 1.0,
        'igw_global_requests_total{code="415",model="(unknown)"}': 1.0,
        'igw_global_requests_total{code="408",model="(unknown)"}': 1.0,
    }


async def test_an_over_limit_body_refused_from_its_head_names_the_routers_setting_and_closes() -> None:
    """Two 413s the router gives before reading a body: ``Expect: 100-continue`` with a
    ``Content-Length`` past the limit (answered by the connection handler, tier 1's code) and a
    chunked body whose chunk-size lines declare more than the limit. Until session s45 the first named
    tier 1's ``bbr.maxRequestBodyBytes`` (no such field in a GlobalRouterConfig) and the second kept
    the connection open without saying why: tier 1 answers it with ``Connection: close`` (the rest of
    the body is never read) and says the chunk sizes declared more. Nothing reaches a cluster (the
    clusters here are not listening)."""
    doc = global_doc(routing={"maxRequestBodyBytes": 1024})
    app = create_global_app(parse_global_config(doc), rng=random.Random(1), read_heartbeats=False)
    head = "POST /v1/completions HTTP/1.1\r\nHost: g\r\n"
    expect = f"{head}Expect: 100-continue\r\nContent-Length: 2048\r\n\r\n".encode()
    declared = f"{head}Transfer-Encoding: chunked\r\n\r\nffffffff\r\n{{".encode()
    async with serve_app(app, host="127.0.0.1", port=0) as url:
        for request, says in ((expect, ""), (declared, ": its chunk sizes declare more")):
            status, headers, body = await _one_answer(url, request)
            assert (status, headers.get("connection")) == (413, "close"), body
            error = orjson.loads(body)["error"]
            assert error["code"] == "request_too_large"
            assert (
                error["message"]
                == f"request body exceeds spec.routing.maxRequestBodyBytes (1024 bytes){says}"
            )


async def _one_answer(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` on a fresh connection; the first answer's status, headers (lower-case names)
    and ``Content-Length`` body, read without waiting for the connection to close (aiohttp lingers
    up to 10 s on a refused ``Expect: 100-continue`` for a body that never comes)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        status_line, *lines = head.decode("latin-1").strip().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout=10)
    finally:
        writer.close()
    return int(status_line.split()[1]), headers, body


async def test_bodies_past_the_routers_body_budget_are_refused_unread_and_given_back_when_answered() -> None:
    """The router holds each body whole while it tries clusters: 200 concurrent 1 MiB uploads took an
    ``igw global serve`` from 75 to 522 MiB resident (session s48). ``spec.serverLimits.maxBodyBytesHeld``
    bounds them as at tier 1: a body past it is answered 503 ``server_busy`` before it is read, the
    connection closed at once; a body's bytes are given back when its request is answered."""
    mib = 2**20

    async def complete(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": "c", "object": "text_completion", "choices": []})

    cluster_app = web.Application(client_max_size=4 * mib)
    cluster_app.router.add_post("/v1/completions", complete)
    payload = orjson.dumps({"model": MODEL, "prompt": "x" * (mib - 100)})
    payload += b" " * (mib - len(payload))
    head = f"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: {mib}\r\n\r\n".encode()
    async with serve_app(cluster_app, host="127.0.0.1", port=0) as cluster_url:
        clusters = [{"name": "c", "region": "east", "endpoint": cluster_url, "models": [MODEL]}]
        doc = global_doc(clusters, heartbeats={"required": False}, routing={"maxRequestBodyBytes": 4 * mib})
        app = create_global_app(parse_global_config(doc), rng=random.Random(1), read_heartbeats=False)
        budget = app[ROUTER_KEY].body_budget
        budget.limit = int(1.5 * mib)
        async with serve_app(app, host="127.0.0.1", port=0) as url:
            port = int(url.rsplit(":", 1)[1])
            r0, w0 = await asyncio.open_connection("127.0.0.1", port)
            r1, w1 = await asyncio.open_connection("127.0.0.1", port)
            try:
                w0.write(head + payload[:1024])  # held: 1 MiB, stalled
                await wait_until(lambda: budget.held == mib, timeout_s=5)
                w1.write(head + payload[:1024])
                status, headers, answer = await asyncio.wait_for(read_response(r1), 5)
                assert (status, orjson.loads(answer)["error"]["code"]) == (503, "server_busy")
                assert "maxBodyBytesHeld" in orjson.loads(answer)["error"]["message"]
                assert headers.get("retry-after") is not None
                assert headers.get("connection") == "close"
                assert await asyncio.wait_for(r1.read(), 3) == b""  # closed, the body unread
                assert budget.refused == 1
                w0.write(payload[1024:])
                status, _, _ = await asyncio.wait_for(read_response(r0), 10)
                assert status == 200
                await wait_until(lambda: budget.held == 0, timeout_s=5)
            finally:
                w0.close()
                w1.close()
            metrics = app[ROUTER_KEY].metrics.registry.get_sample_value
            assert metrics("igw_body_budget_refusals_total") == 1
            assert metrics("igw_global_requests_total", {"model": "(unknown)", "code": "503"}) == 1
