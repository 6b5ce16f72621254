"""``igw bench global``'s load loop keeps to its phase at any offered rate."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from igw.bench.global_run import GlobalRunOptions, _load
from tests.loopback import serving


@pytest.fixture
async def answering_url() -> AsyncIterator[str]:
    """A real HTTP server on loopback answering every completion at once."""

    async def complete(_request: web.Request) -> web.Response:
        return web.json_response({"usage": {"total_tokens": 3}})

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    async with serving(app) as url:
        yield url


async def test_a_tiny_rate_ends_the_load_at_the_phase_end(answering_url: str, tmp_path: Path) -> None:
    """At ``--live-rate 0.001`` the gap after the first request (1,000 s on average) was slept in
    full, so each scripted phase ran that much past its end; the load now stops at the end."""
    options = GlobalRunOptions(out=tmp_path, rate=0.001)
    loop = asyncio.get_running_loop()
    started = loop.time()
    samples = await asyncio.wait_for(
        _load([answering_url], duration_s=0.5, options=options, t0=started, rng=random.Random(1)),
        timeout=30,
    )
    assert loop.time() - started < 5
    assert [s.status for s in samples] == [200]
