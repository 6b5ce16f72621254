"""``igw perf gateway``'s streaming phase: the gateway's TTFT judged, each peer's reported from the
same direct rounds, and the idle-gap control rows (each target's), over real loopback servers."""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from igw.perf.gateway import IDLE_GAP_S, _streaming, _Target
from igw.perf.gateway_backend import build_app
from igw.perf.gateway_load import closed_loop
from igw.perf.gateway_targets import LoadFigures

PEER = "vllm-router (round_robin)"


@pytest.fixture
async def servers() -> AsyncIterator[list[str]]:
    """Three streaming stand-ins: the direct backend, the 'gateway' and a 'peer' (the phase only
    needs addresses that answer like the benchmark's backend)."""
    runners = []
    bases = []
    for _ in range(3):
        runner = web.AppRunner(build_app(chunks=2, interval=0.001), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        bases.append(f"127.0.0.1:{runner.addresses[0][1]}")
    yield bases
    for runner in runners:
        await runner.cleanup()


async def test_the_gateway_is_judged_each_peer_reported_and_the_idle_rows_added(servers: list[str]) -> None:
    direct, gateway, peer = servers
    rows: list[dict[str, object]] = []
    figures = LoadFigures()
    targets = [_Target(label="gateway", base=gateway, pid=os.getpid()), _Target(label=PEER, base=peer, pid=0)]
    await _streaming(
        rows,
        figures,
        targets,
        backend=direct,
        args=argparse.Namespace(stream_requests=3, rounds=2),
        headers=None,
    )
    assert [r["metric"] for r in rows] == [
        "added streaming TTFT, concurrency 1",
        f"{PEER} added streaming TTFT, concurrency 1",
        f"added latency, concurrency 1, non-streamed, {IDLE_GAP_S * 1000:.0f} ms apart",
        f"{PEER} added latency, concurrency 1, non-streamed, {IDLE_GAP_S * 1000:.0f} ms apart",
    ]
    assert rows[0]["verdict"] in ("met", "MISSED")
    assert rows[0]["target"] == "p50 <= 0.5 ms"
    assert [r["verdict"] for r in rows[1:]] == ["n/a", "n/a", "n/a"]
    assert f"({PEER} p50 " in str(rows[3]["value"])
    assert figures.added_ttft_p50_ms is not None
    assert set(figures.peer_ttft_p50_ms) == {PEER}
    assert str(rows[1]["value"]).startswith("p50 ")


async def test_the_closed_loop_waits_between_requests_when_asked(servers: list[str]) -> None:
    result = await closed_loop(servers[0], concurrency=1, requests=3, pause_s=0.05)
    assert len(result.latencies_ms) == 3
    assert result.wall_s >= 3 * 0.05  # the pauses happened (a lower bound: never a timing ceiling)
