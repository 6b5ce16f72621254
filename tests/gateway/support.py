"""Helpers the gateway tests import: InferenceGatewayConfig documents and polling without blind sleeps.

The fixture that starts a gateway (``gateway``) lives in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from igw.config.loader import load_gateway_config
from igw.gateway.app import create_app
from igw.gateway.discovery.static_file import StaticFileDiscovery
from igw.gateway.inference import STATE_KEY
from igw.gateway.serving import LIMITS_KEY, GatewayRunner, ServerLimits
from igw.gateway.upstream_client import Origin, UpstreamPool, _Connection
from igw.scheduling.plugins.prefix_cache_scorer import PrefixCacheScorer

FAST_ROUTING = {
    "scrapeInterval": "20ms",
    "staleThreshold": "400ms",
    "scrapeTimeout": "200ms",
    "configReloadInterval": "100ms",
}


def config_doc(
    schedulers: list[dict[str, Any]],
    *,
    routing: Mapping[str, Any] | None = None,
    bbr: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "test-gw", "namespace": "inference"},
        "spec": {
            "bbr": {"enabled": True, **(bbr or {})},
            "schedulers": schedulers,
            "extensions": {"routing": {**FAST_ROUTING, **(routing or {})}},
        },
    }


def scheduler(name: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "modelName": model, "modelSelector": {"matchLabels": {"app": name}}, **extra}


async def wait_for(cond: Callable[[], bool], *, within: float = 3.0, what: str = "condition") -> float:
    """Poll ``cond`` every 10 ms; returns the seconds it took, fails the test after ``within``."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > within:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


async def serving_url(stderr: asyncio.StreamReader | None) -> str:
    """Read an ``igw serve`` process's stderr up to its "serving ... at URL" line; return the URL."""
    assert stderr is not None
    while True:
        line = (await asyncio.wait_for(stderr.readline(), timeout=60)).decode()
        assert line, "igw serve exited before serving"
        found = re.search(r"serving \d+ scheduler\(s\) at (http://\S+)", line)
        if found:
            return found.group(1)


async def wait_all_fresh(http: aiohttp.ClientSession, url: str, *, within: float = 60.0) -> None:
    """Poll ``/readyz`` until every endpoint of every scheduler has a fresh scrape.

    ``/readyz`` answers 200 before the first scrape lands (discovery has reported), so a test that
    depends on what the pods' metrics say (saturation, per-pod scores) waits for this instead.
    """
    t0 = time.monotonic()
    while True:
        async with http.get(url + "/readyz") as resp:
            detail = await resp.json()
        endpoints = [ep for s in detail.get("schedulers", {}).values() for ep in s["endpoints"].values()]
        if endpoints and all(ep["fresh"] for ep in endpoints):
            return
        if time.monotonic() - t0 > within:
            pytest.fail(f"timed out after {within}s waiting for fresh scrapes of every endpoint: {detail}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def connection(port: int) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A raw loopback connection to ``port``, closed on exit (for byte-level HTTP tests)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer read off a raw connection: (status, lower-cased headers, body), the body
    by its ``Content-Length`` or its chunks."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


@contextlib.asynccontextmanager
async def runner_gateway(
    tmp_path: Path,
    key: str,
    *,
    doc: dict[str, Any],
    limits: ServerLimits | None = None,
    budget: int | None = None,
) -> AsyncIterator[tuple[int, web.Application, GatewayRunner]]:
    """The gateway app of ``doc`` with the one pod ``key`` (pool ``llama``) on a :class:`GatewayRunner`
    at a loopback port, yielded once the pod is scraped: (port, app, runner), for the tests that read
    the runner's server or send raw bytes. ``limits``: set as the app's (else the runner's defaults,
    the app's left unset); ``budget``: the body budget's limit."""
    (tmp_path / "igwc.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "endpoints.yaml").write_text(yaml.safe_dump({"schedulers": {"llama": [key]}}))
    config = load_gateway_config(tmp_path / "igwc.yaml")
    app = create_app(
        config,
        discovery=StaticFileDiscovery.for_schedulers(tmp_path / "endpoints.yaml", config.schedulers),
        rng=random.Random(1),
    )
    if limits is not None:
        app[LIMITS_KEY] = limits
    state = app[STATE_KEY]
    if budget is not None:
        state.body_budget.limit = budget
    runner = GatewayRunner(app, limits=limits or ServerLimits(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        sr = state.runtime.schedulers["llama"]
        await wait_for(
            lambda: (
                (st := sr.pool.states.get(key)) is not None
                and sr.scheduler.is_fresh(st.view(), state.clock())
            ),
            what="endpoint scraped",
        )
        yield port, app, runner
    finally:
        await runner.cleanup()


def parsing_connection() -> _Connection:
    """An upstream connection that never connects, for a test that feeds its response parser alone.

    Its pool is a real one (made on a loop of its own, which its constructor needs): compiled code
    checks the type at run time, so a ``None`` passed through ``cast`` is refused there."""

    async def pool() -> UpstreamPool:
        return UpstreamPool(limit=1)

    return _Connection(asyncio.run(pool()), Origin("h", 1, False))


def data_events(body: bytes) -> list[bytes]:
    """Each SSE event of ``body`` (blank-line separated) as its ``data:`` line alone: event names
    (the gateway's terminal ``event: error``) and comments (``: ping``) dropped, events left empty by
    that skipped."""
    events = []
    for block in body.split(b"\n\n"):
        data = b"\n".join(line for line in block.split(b"\n") if line.startswith(b"data:"))
        if data:
            events.append(data)
    return events


async def streams_left_early(
    post: Callable[[], Awaitable[aiohttp.ClientResponse]], *, streams: int, events: int
) -> list[int]:
    """``streams`` streamed requests made by ``post``, each read for ``events`` of its events and then
    its connection closed (a client that leaves before the end); their statuses."""
    statuses = []
    for _ in range(streams):
        async with await post() as response:
            statuses.append(response.status)
            if response.status != 200:
                continue
            read = 0
            while read < events:
                read += (await response.content.readline()).startswith(b"data: {")
            response.close()
        await asyncio.sleep(0.1)  # the gateway's next write finds the connection gone
    return statuses


def prefix_blocks(gw: Any, *keys: str, pool: str = "pool") -> dict[str, int]:
    """The blocks scheduler ``pool``'s prefix index places on each of ``keys`` (the pick's
    bookkeeping settled): where the gateway believes a prompt is cached."""
    sch = gw.state.runtime.schedulers[pool].scheduler
    sch.settle()
    (scorer,) = [p for p in sch.plugins if isinstance(p, PrefixCacheScorer)]
    return {key: scorer.index.size(key) for key in keys}


def unreflected_dispatches(gw: Any, *keys: str, pool: str = "pool") -> dict[str, int]:
    """The dispatches scheduler ``pool``'s ledger counts on each of ``keys`` since its scrape."""
    sch = gw.state.runtime.schedulers[pool].scheduler
    views = {v.key: v for v in gw.state.runtime.schedulers[pool].pool.views()}
    return {key: sch.ledger.unreflected(views[key], now=gw.state.clock()) for key in keys}


def assert_pick_moved(gw: Any, refused: str, served: str, *, pool: str = "pool") -> None:
    """Scheduler ``pool`` counts the last request where it was served (``served``), not on the pod
    first picked that never took it (``refused``): the prompt's blocks in the prefix index are on
    ``served`` alone, and so is the one dispatch in the ledger."""
    blocks = prefix_blocks(gw, refused, served, pool=pool)
    assert blocks[refused] == 0, blocks
    assert blocks[served] > 0, blocks
    assert unreflected_dispatches(gw, refused, served, pool=pool) == {refused: 0, served: 1}
