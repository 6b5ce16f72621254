"""``igw perf scrape`` end to end on a tiny fleet, and the fleet it scrapes."""

from __future__ import annotations

import re

import aiohttp
import pytest

from igw.cli.main import main
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.perf.scrape_fleet import page_variants, serve_fleet


def test_short_scrape_benchmark_prints_a_row_per_fleet_size(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["perf", "scrape", "--pods", "2,3", "--seconds", "0.5", "--parse-iterations", "20"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"igw parser [\d.]+ µs with the previous page's hints", out)
    summary = out.split("summary (cost curve):")[1]
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+) µs.* (lean|aiohttp)$", summary, re.M)
    assert [(r[0], r[4]) for r in rows] == [("2", "lean"), ("2", "aiohttp"), ("3", "lean"), ("3", "aiohttp")]
    assert re.search(r"^\s+3 pods: CPU per scrape lean \d+ µs / aiohttp \d+ µs = [\d.]+×", summary, re.M)
    for _pods, scrapes, achieved, us, _client in rows:
        assert int(scrapes) > 0
        assert float(achieved) > 0
        assert int(us) > 0


def test_page_variants_differ_but_carry_the_same_signals() -> None:
    pages = page_variants(3)
    assert len(set(pages)) == 3
    parsed = {parse_page(p.decode(), VLLM) for p in pages}
    assert len(parsed) == 1
    assert next(iter(parsed)).metrics.num_gpu_blocks is not None


async def test_fleet_answers_metrics_with_rotating_pages_on_one_connection() -> None:
    servers = await serve_fleet(2)
    try:
        port = servers[0].sockets[0].getsockname()[1]
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as http:
            bodies = []
            for _ in range(3):
                async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    assert resp.status == 200
                    bodies.append(await resp.read())
            async with http.get(f"http://127.0.0.1:{port}/v1/models") as resp:
                assert resp.status == 404
        assert len(set(bodies)) == 3
    finally:
        for s in servers:
            s.close()
            await s.wait_closed()
