"""The hot paths leave no reference cycles: what a request or a scrape allocates is freed when it ends.

Python frees an object when its last reference goes, except the objects of a reference cycle, which
wait for the cyclic collector - and :mod:`igw.gateway.gc_tuning` makes that collector run less often,
so garbage that forms cycles piles up between its runs (with every page, answer or buffer a cycle
holds). Each test here drives the real gateway over loopback (or lets its scraper run) with the
collector off and the objects it would have freed saved (``gc.DEBUG_SAVEALL``), then collects: what
it finds is the garbage those requests or scrapes left in cycles.

Cycles found and broken in session s40: every streamed request left its relayed response and the
relay's record in a cycle; every closed connection left its handler (lean server) or scrape
connection in a cycle with its HTTP parser; and, compiled by mypyc only, nested functions that
refer to one another share an environment that holds them - a cycle per call (``parse_page`` kept
each parsed page that way; the scrape client's connect, one per connection).

These tests run on the sources (``make test``) and on a compiled tree
(``tests/compiled/test_compiled_build.py`` runs this file with ``PYTHONPATH`` at one), where the
mypyc-only cycles show. What is not the gateway's stays out of the counts where it cannot be
avoided: asyncio's own socket transport keeps a bound method of itself (a cycle per closed
connection that uvloop, the gateway's loop in production, does not make; and a scrape or a client
may time out on a busy machine and close one), so the tests count the objects of igw, its HTTP
parser, aiohttp and multidict: every cycle found so far had some.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import CollectorRegistry

from igw.config.loader import load_gateway_config
from igw.security.factory import build_request_guard
from igw.security.guard import SecurityGuard
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for
from tests.security.helpers import AUDIENCE, SigningKey, mint

MODEL = "m1"
REQUESTS = 40
ROUTING = {"scrapeInterval": "100ms", "scrapeTimeout": "2s", "staleThreshold": "10s"}
"""Scrapes that do not time out on a busy machine (a timed-out scrape closes its connection)."""
OWN_MODULES = ("igw.", "httptools", "aiohttp", "multidict")
"""Where the objects of a cycle the gateway could break come from (see the module docstring)."""


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[collections.Counter[str]]:
    """The objects that became cyclic garbage inside the block, counted by type (filled on exit)."""
    found: collections.Counter[str] = collections.Counter()
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.update(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def own(found: collections.Counter[str]) -> dict[str, int]:
    """The counts of ``found`` for the gateway's own objects and its libraries' (:data:`OWN_MODULES`)."""
    return {name: n for name, n in found.items() if name.startswith(OWN_MODULES)}


def raw_request(path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    data = orjson.dumps(body)
    fields = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{fields}"
    return f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 answer: its status and body (``Content-Length`` or chunked)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:]) if v}
    status = int(head[0].split()[1])
    if "content-length" in fields:
        return status, await reader.readexactly(int(fields["content-length"]))
    body = b""
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        body += (await reader.readexactly(size + 2))[:-2]
    await reader.readuntil(b"\r\n")
    return status, body


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


COMPLETION = {"model": MODEL, "prompt": "hello", "max_tokens": 3}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
KINDS = {
    "completion": ("/v1/completions", COMPLETION),
    "streamed completion": (
        "/v1/completions",
        {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}},
    ),
    "chat": ("/v1/chat/completions", CHAT),
    "streamed chat": ("/v1/chat/completions", {**CHAT, "stream": True}),
}


async def cycles_of_kept_alive_requests(url: str, raw: bytes) -> collections.Counter[str]:
    """Send ``raw`` :data:`REQUESTS` times on one kept-alive connection to ``url`` (after 5 that warm
    caches and pools and make first-time state), each answered 200; the cyclic garbage those
    requests left (:func:`cyclic_garbage`)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(url))
    try:
        for _ in range(5):
            writer.write(raw)
            assert (await read_answer(reader))[0] == 200
        with cyclic_garbage() as found:
            for _ in range(REQUESTS):
                writer.write(raw)
                status, answer = await read_answer(reader)
                assert status == 200, answer
    finally:
        writer.close()
    return found


@pytest.mark.parametrize("kind", list(KINDS))
async def test_requests_on_a_kept_alive_connection_leave_no_cycles(gateway: Any, kind: str) -> None:
    path, body = KINDS[kind]
    raw = raw_request(path, body)
    async with (
        running(FakeModelServer("a")) as (a,),
        gateway(config_doc([scheduler("pool", MODEL)], routing=ROUTING), {"pool": [a.key]}) as gw,
    ):
        found = await cycles_of_kept_alive_requests(gw.url, raw)
    assert not own(found), f"{kind}: cycles left by {REQUESTS} requests: {own(found)}"


def _guarded(tmp_path: Path) -> tuple[SecurityGuard, str, dict[str, Any]]:
    """A configuration with JWT auth on, the guard built from it by the real factory (its key set
    loaded, no issuer to fetch it from) and a token it accepts."""
    key = SigningKey("k1", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    doc = config_doc([scheduler("pool", MODEL)], routing=ROUTING)
    issuer = "https://issuer.example"
    provider = {
        "name": "idp",
        "issuer": issuer,
        "remoteJWKS": {"uri": f"{issuer}/jwks"},
        "audiences": [AUDIENCE],
    }
    doc["spec"]["auth"] = {"jwt": {"provider": provider}}
    path = tmp_path / "auth.yaml"
    path.write_text(yaml.safe_dump(doc))
    guard = build_request_guard(load_gateway_config(path), registry=CollectorRegistry())
    assert guard.jwks is not None
    guard.jwks.load_document({"keys": [key.public_jwk()]})
    now = int(time.time())
    token = mint(key, {"iss": issuer, "aud": AUDIENCE, "sub": "u", "iat": now, "exp": now + 3600})
    return guard, token, doc


async def test_streams_with_auth_and_flow_control_leave_no_cycles(gateway: Any, tmp_path: Path) -> None:
    """The JWT guard's path (a cached verified token), flow control's admission, then the relay."""
    guard, token, doc = _guarded(tmp_path)
    doc["spec"]["extensions"]["flowControl"] = {"pollInterval": "10ms", "maxRequests": 100}
    path, body = KINDS["streamed completion"]
    raw = raw_request(path, body, {"Authorization": f"Bearer {token}"})
    async with (
        running(FakeModelServer("a"), FakeModelServer("b")) as (a, b),
        gateway(doc, {"pool": [a.key, b.key]}, guard=guard) as gw,
    ):
        found = await cycles_of_kept_alive_requests(gw.url, raw)
    assert not own(found), f"cycles left by {REQUESTS} requests: {own(found)}"


async def test_a_connection_per_request_and_clients_leaving_streams_leave_no_gateway_cycles(
    gateway: Any,
) -> None:
    """A client that opens a connection per request, and one that closes its connection mid-stream
    (the relay cut short, what was relayed charged): each closed connection's handler and parser,
    and the cut stream's response, are freed with it (asyncio's transport cycle aside, see the module
    docstring)."""
    plain = raw_request(*KINDS["completion"])
    streamed = raw_request(*KINDS["streamed completion"])
    async with (
        running(FakeModelServer("a", tokens=50, token_delay_s=0.005)) as (a,),
        gateway(config_doc([scheduler("pool", MODEL)], routing=ROUTING), {"pool": [a.key]}) as gw,
    ):
        port = port_of(gw.url)

        async def once(raw: bytes, *, leave: bool) -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            if leave:  # the head and the first events read, then gone
                await reader.readuntil(b"data:")
                writer.transport.abort()
                await wait_for(lambda: len(gw.state.inflight) == 0, what="the cut stream's handler done")
            else:
                status, answer = await read_answer(reader)
                assert status == 200, answer
                writer.close()
                await writer.wait_closed()

        await once(plain, leave=False)
        await once(streamed, leave=True)
        with cyclic_garbage() as found:
            for _ in range(REQUESTS // 2):
                await once(plain, leave=False)
                await once(streamed, leave=True)
            await asyncio.sleep(0.05)  # the last connections' close callbacks
    assert not own(found), f"{REQUESTS} connections left in cycles: {own(found)}"


class _ChangingPage(FakeModelServer):
    """A pod whose page changes its lines at every scrape (a label value: the page template cannot
    re-read it, so the parser reads the whole page), and that may close each connection it answers."""

    close: bool = False

    def page(self) -> str:
        return super().page() + f'vllm:lora_requests_info{{max_lora="0",scrape="{self.scrapes}"}} 1.0\n'

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        response = await super()._metrics(request)
        if self.close:
            response.force_close()
        return response


@pytest.mark.parametrize("close", [False, True], ids=["kept-alive", "closed-per-scrape"])
async def test_scrapes_leave_no_cycles(gateway: Any, close: bool) -> None:
    """Scrapes of a page parsed whole each time (compiled, ``parse_page``'s nested functions kept
    each page in a cycle), on a kept-alive connection and on a connection per scrape (a pod that
    closes each: the scrape client's connection and parser, and compiled its connect's closures)."""
    pod = _ChangingPage("a")
    pod.close = close
    async with (
        running(pod) as (a,),
        gateway(config_doc([scheduler("pool", MODEL)], routing=ROUTING), {"pool": [a.key]}),
    ):
        await wait_for(lambda: a.scrapes >= 5, what="scrapes")
        with cyclic_garbage() as found:
            start = a.scrapes
            await wait_for(lambda: a.scrapes >= start + 20, what="20 scrapes")
            await asyncio.sleep(0.05)  # the last connection's close callbacks
    assert not own(found), f"20 scrapes left in cycles: {own(found)}"
