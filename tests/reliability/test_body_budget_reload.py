"""``serverLimits.maxBodyBytesHeld`` applied by a hot reload (since session s50), on a real ``igw serve``
watching its file, with slow 1 MiB uploads over loopback: a lowered budget lets the uploads that hold
bytes finish and refuses new ones (503 ``server_busy``) until the bytes held fit under it; a raised
one admits the next body at once; the reload names the restart-only fields it changed beside it; a
``--max-body-bytes-held`` given on the command line wins. Before, the budget kept its start value
and the reload only WARNED that ``serverLimits`` needed a restart."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import connection, read_response
from tests.reliability.harness import MODEL, ServedGateway, gateway_doc, igw_serve

MIB = 2**20
CHUNK = 64 * 1024


def limits_doc(**limits: Any) -> dict[str, Any]:
    doc = gateway_doc()
    doc["spec"]["extensions"]["serverLimits"] = {"bodyTimeout": "20s", **limits}
    return doc


def upload(size: int = MIB) -> tuple[bytes, bytes]:
    """A completion request whose body is ``size`` bytes: (head, body)."""
    body = orjson.dumps({"model": MODEL, "prompt": "x" * (size - 60), "max_tokens": 1})
    body += b" " * (size - len(body))
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    return head.encode(), body


async def gauges(url: str) -> dict[str, float]:
    """``igw_body_bytes_held`` and its ``_limit`` from ``/metrics``."""
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as resp:
        text = await resp.text()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("igw_body_bytes_held", "igw_body_bytes_held_limit"):
            out[family.name] = family.samples[0].value
    return out


async def until(url: str, cond: Callable[[dict[str, float]], bool], what: str, gw: ServedGateway) -> None:
    deadline = time.monotonic() + 10
    while not cond(seen := await gauges(url)):
        assert time.monotonic() < deadline, f"{what}: {seen}\n{gw.output[-3000:]}"
        await asyncio.sleep(0.05)


async def until_logged(gw: ServedGateway, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in gw.output:
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{gw.output[-3000:]}"
        await asyncio.sleep(0.05)


def rewrite(tmp_path: Path, doc: dict[str, Any]) -> None:
    """Replace the served file as a ConfigMap volume does (a rename: never read half-written)."""
    staged = tmp_path / "igwc.yaml.new"
    staged.write_text(yaml.safe_dump(doc))
    staged.replace(tmp_path / "igwc.yaml")


@contextlib.asynccontextmanager
async def served(tmp_path: Path, doc: dict[str, Any], *args: str) -> AsyncIterator[tuple[ServedGateway, int]]:
    async with (
        running(FakeModelServer("a")) as (pod,),
        igw_serve(tmp_path, doc, [pod.key], *args, reload=True) as gw,
    ):
        port = urlsplit(gw.url).port
        assert port is not None
        yield gw, port


async def answered(reader: asyncio.StreamReader) -> tuple[int, str | None]:
    status, _, body = await asyncio.wait_for(read_response(reader), 10)
    code = orjson.loads(body).get("error", {}).get("code") if status >= 400 else None
    return status, code


async def test_a_lowered_budget_lets_held_uploads_finish_and_refuses_new_ones_until_they_fit(
    tmp_path: Path,
) -> None:
    head, body = upload()
    async with served(tmp_path, limits_doc(maxBodyBytesHeld=4 * MIB)) as (gw, port):
        async with connection(port) as (r0, w0), connection(port) as (r1, w1):
            for w in (w0, w1):  # two uploads under way: 2 MiB held, the rest of each body not sent
                w.write(head + body[:CHUNK])
                await w.drain()
            await until(gw.url, lambda g: g["igw_body_bytes_held"] == 2 * MIB, "2 MiB held", gw)
            # lowered below what they hold; headerTimeout, restart-only, changed with it
            rewrite(tmp_path, limits_doc(maxBodyBytesHeld=MIB, headerTimeout="5s"))
            await until(gw.url, lambda g: g["igw_body_bytes_held_limit"] == MIB, "limit reloaded", gw)
            async with connection(port) as (r2, w2):
                w2.write(head + body)
                assert await answered(r2) == (503, "server_busy")
            for r, w in ((r0, w0), (r1, w1)):  # the held uploads finish
                w.write(body[CHUNK:])
                assert await answered(r) == (200, None)
        await until(gw.url, lambda g: g["igw_body_bytes_held"] == 0, "bytes given back", gw)
        async with connection(port) as (r3, w3):  # nothing held: a lone body fits
            w3.write(head + body)
            assert await answered(r3) == (200, None)
    assert (
        f"at most {MIB} bytes from now on (was {4 * MIB}; serverLimits.maxBodyBytesHeld, reloaded)"
        in gw.output
    )
    assert (
        "spec.extensions.serverLimits changed (headerTimeout): the listener keeps the limits it started "
        "with until igw serve restarts"
    ) in gw.output


async def test_a_raised_budget_admits_the_next_body_at_once_and_names_no_restart(tmp_path: Path) -> None:
    head, body = upload()
    async with served(tmp_path, limits_doc(maxBodyBytesHeld=MIB)) as (gw, port), connection(port) as (r0, w0):
        w0.write(head + body[:CHUNK])
        await w0.drain()
        await until(gw.url, lambda g: g["igw_body_bytes_held"] == MIB, "1 MiB held", gw)
        async with connection(port) as (r1, w1):
            w1.write(head + body)
            assert await answered(r1) == (503, "server_busy")
        rewrite(tmp_path, limits_doc(maxBodyBytesHeld=4 * MIB))
        await until(gw.url, lambda g: g["igw_body_bytes_held_limit"] == 4 * MIB, "limit reloaded", gw)
        async with connection(port) as (r2, w2):  # the first upload still holds its 1 MiB
            w2.write(head + body)
            assert await answered(r2) == (200, None)
        w0.write(body[CHUNK:])
        assert await answered(r0) == (200, None)
    assert "serverLimits changed" not in gw.output  # the one field changed is applied


async def test_a_budget_given_on_the_command_line_wins_over_a_reload(tmp_path: Path) -> None:
    async with served(
        tmp_path, limits_doc(maxBodyBytesHeld=4 * MIB), "--max-body-bytes-held", str(2 * MIB)
    ) as (
        gw,
        _,
    ):
        rewrite(tmp_path, limits_doc(maxBodyBytesHeld=MIB))
        await until_logged(gw, "--max-body-bytes-held given to igw serve wins")
        assert (await gauges(gw.url))["igw_body_bytes_held_limit"] == 2 * MIB
