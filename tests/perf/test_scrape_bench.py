"""``igw perf scrape`` end to end on a tiny fleet, and the fleet it scrapes."""

from __future__ import annotations

import dataclasses
import re

import aiohttp
import pytest

from igw.cli.main import main
from igw.gateway.metrics_parser import VLLM, parse_page
from igw.gateway.page_filter import filter_path
from igw.perf.scrape import (
    ROUTING_FAMILIES,
    ScrapeRow,
    _print_breakdown,
    _print_targets,
    filtered_page,
    parse_costs,
)
from igw.perf.scrape_fleet import page_variants, serve_fleet


async def _get(url: str) -> bytes:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        return await resp.read()


def test_short_scrape_benchmark_prints_a_row_per_fleet_size(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            *("perf", "scrape", "--pods", "2,3", "--seconds", "0.5", "--parse-iterations", "20"),
            *("--clients", "filtered,fixed,lean,aiohttp,bare", "--busy-share", "0.5"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    for kind in ("whole", "filtered"):
        assert re.search(
            rf"^{kind} vLLM page, [\d,]+ bytes .* parse [\d.]+ µs with the previous page's", out, re.M
        )
    summary = out.split("summary (cost curve):")[1]
    rows = re.findall(
        r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+) µs.* (filtered|fixed|lean|aiohttp|bare)\s+(\d+)\s+(\d+)$",
        summary,
        re.M,
    )
    ways = ("filtered", "fixed", "lean", "aiohttp", "bare")
    assert [(r[0], r[4]) for r in rows] == [(pods, client) for pods in ("2", "3") for client in ways]
    for pods, scrapes, achieved, us, client, filtered, idle in rows:
        assert int(scrapes) > 0
        assert float(achieved) > 0
        assert int(us) > 0
        assert int(filtered) == (int(pods) if client in ("filtered", "fixed", "bare") else 0)
        assert int(idle) <= int(pods) // 2 + 1  # at most the idle half (the busy pods' pages move)
        if client != "filtered":
            assert int(idle) == 0  # every pod every interval
    assert re.search(
        r"^\s+3 pods filtered: \d+ µs = kernel \d+ \+ decode/xxh3/re-read [\d.]+ \+ .*; "
        r"[\d.]+ event-loop wake-ups per 3 scrapes \(a group\)$",
        summary,
        re.M,
    )
    assert re.search(
        r"^\s+3 pods: CPU per scrape filtered \d+ µs vs the 50 µs target = [\d.]+× \((met|missed)\); "
        r"filtered / fixed \d+ / \d+ µs = [\d.]+×; filtered / lean \d+ / \d+ µs = [\d.]+×; "
        r"filtered / aiohttp \d+ / \d+ µs = [\d.]+×; filtered / bare \d+ / \d+ µs",
        summary,
        re.M,
    )


def _row(client: str, *, cpu_s: float, stale_s: float) -> ScrapeRow:
    return ScrapeRow(
        client=client,
        pods=1000,
        seconds=10.0,
        scrapes=100_000,
        cpu_s=cpu_s,
        sys_s=cpu_s / 4,
        fleet_cpu_s=1.0,
        staleness_max_s=stale_s,
        staleness_p50_s=stale_s / 2,
        interval_s=0.05,
        stale_threshold_s=1.0,
        filtered_pods=1000 if client == "filtered" else 0,
        idle_pods=0,
    )


@pytest.mark.parametrize(
    ("cpu_s", "stale_s", "verdict"),
    [(4.0, 0.3, "met"), (12.0, 0.3, "missed"), (4.0, 1.5, "missed")],
)
def test_the_thousand_pod_target_needs_freshness_and_at_most_one_core(
    cpu_s: float, stale_s: float, verdict: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _print_targets([_row("filtered", cpu_s=cpu_s, stale_s=stale_s), _row("lean", cpu_s=20.0, stale_s=0.3)])
    out = capsys.readouterr().out
    per_scrape = cpu_s / 100_000 * 1e6
    assert f"CPU per scrape filtered {per_scrape:.0f} µs vs the 50 µs target" in out
    line = next(x for x in out.splitlines() if "(filtered): fresh" in x)
    assert f"host CPU {cpu_s / 10:.2f} cores vs 1 = {cpu_s / 10:.2f}× ({verdict})" in line
    assert "(lean): fresh" not in out  # the verdict is the gateway's way of scraping


def test_page_variants_differ_but_carry_the_same_signals() -> None:
    pages = page_variants(3)
    assert len(set(pages)) == 3
    assert len({filtered_page(p) for p in pages}) == 3  # filtered pages move too (frozen detection)
    parsed = {parse_page(p.decode(), VLLM) for p in pages}
    assert len(parsed) == 1
    assert next(iter(parsed)).metrics.num_gpu_blocks is not None


async def test_fleet_answers_metrics_with_rotating_pages_on_one_connection() -> None:
    servers = await serve_fleet(2)
    path = filter_path(ROUTING_FAMILIES)
    assert path is not None
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
        assert len({await _get(f"http://127.0.0.1:{port}{path}") for _ in range(3)}) == 3
        filtered = await _get(f"http://127.0.0.1:{port}{path}")
        assert filtered in {filtered_page(p) for p in page_variants()}
    finally:
        for s in servers:
            s.close()
            await s.wait_closed()


async def test_pods_past_the_busy_count_serve_one_unchanging_page() -> None:
    servers = await serve_fleet(3, busy=1)
    try:
        distinct = []
        for server in servers:
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
            distinct.append(len({await _get(url) for _ in range(3)}))
        assert distinct == [3, 1, 1]
    finally:
        for s in servers:
            s.close()
            await s.wait_closed()


async def test_a_fleet_started_without_the_filter_answers_whole_pages() -> None:
    servers = await serve_fleet(1, filter_names=False)
    try:
        port = servers[0].sockets[0].getsockname()[1]
        body = await _get(f"http://127.0.0.1:{port}{filter_path(ROUTING_FAMILIES)}")
        assert body in set(page_variants())
    finally:
        for s in servers:
            s.close()
            await s.wait_closed()


def test_page_variants_below_one_are_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["perf", "scrape", "--page-variants", "0"])
    assert exited.value.code == 2
    assert "argument --page-variants: expected a whole number >= 1, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("share", ["1.5", "-0.1", "half"])
def test_a_busy_share_outside_zero_to_one_is_refused_naming_the_option(
    share: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["perf", "scrape", "--busy-share", share])
    assert exited.value.code == 2
    assert (
        f"argument --busy-share: expected a number from 0.0 to 1.0, got {share!r}" in capsys.readouterr().err
    )


def test_the_breakdown_counts_the_processs_wake_ups_per_group_of_scrapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = dataclasses.replace(_row("filtered", cpu_s=4.0, stale_s=0.3), sleeps=12_500)
    _print_breakdown([row], parse_costs(5), pages_change=True)
    out = capsys.readouterr().out
    assert "; 2.0 event-loop wake-ups per 16 scrapes (a group)" in out  # 12,500 / 100,000 × 16
