"""A compressed request body is limited by its decoded size while it is decoded, not after.

A 64 MiB body of zeros compresses to about 64 KiB: a gateway that inflates the whole body before
checking ``bbr.maxRequestBodyBytes`` holds 64 MiB per such request (an attacker's cheap way to
exhaust memory). ``igw serve`` must answer 413 with the OpenAI error shape and its peak resident
memory must not grow by anything near the decoded size.
"""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import jwt
import orjson
import pytest

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.reliability.harness import gateway_doc, igw_serve
from tests.reliability.test_http_errors import raw_exchange

TOKEN = jwt.encode({"sub": "alice", "exp": int(time.time()) + 3600}, "k" * 32, algorithm="HS256")
DECODED_BYTES = 64 * 1024 * 1024
LIMIT_BYTES = 1024 * 1024


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set size (``VmHWM``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


@pytest.mark.parametrize(("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)])
async def test_a_decompression_bomb_gets_413_without_inflating_in_memory(
    tmp_path: Path, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    body = compress(b"0" * DECODED_BYTES)
    assert len(body) < LIMIT_BYTES  # the wire size alone passes the limit
    doc = gateway_doc(bbr={"maxRequestBodyBytes": LIMIT_BYTES})
    async with running(FakeModelServer("a")) as (pod,), igw_serve(tmp_path, doc, [pod.key]) as gw:
        before = peak_rss_kib(gw.process.pid)
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Encoding: {encoding}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        status, _headers, answer = await raw_exchange(gw.url, head + body)
        grown_kib = peak_rss_kib(gw.process.pid) - before
    assert status == 413
    assert orjson.loads(answer)["error"]["code"] == "request_too_large"
    assert grown_kib < DECODED_BYTES // 1024 // 4, f"peak RSS grew by {grown_kib} KiB"
    assert pod.received == [], "nothing reaches the model server"
