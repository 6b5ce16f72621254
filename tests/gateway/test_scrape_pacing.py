"""Idle endpoints are scraped less often, never so rarely that they age past ``staleThreshold``, and
every interval again from the first dispatch to them (the pacing on its own, then a real scraper)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator

import pytest

from igw.gateway.scrape_pacing import IdlePacing, idle_gap_limit, next_scrape_delay, next_scrape_due
from tests.gateway.scrape_support import scrape_rig

SETTINGS = [(0.05, 1.0), (0.05, 0.06), (0.05, 0.2), (0.01, 5.0), (0.2, 0.5), (1.0, 30.0)]


def _ticks(interval: float, seconds: float) -> list[float]:
    """The times one group's ticks fire at (``next_scrape_delay`` from each tick, slot 3 of 100)."""
    now, out = 0.0, []
    while now < seconds:
        now += 1e-6  # the scrape at the tick took a little time
        now += next_scrape_delay(now, interval, 3, 100)
        out.append(now)
    return out


@pytest.mark.parametrize("uptime_s", [0.0, 4_500.0, 86_400.0, 30 * 86_400.0])
@pytest.mark.parametrize("groups", [1, 3, 7, 63])
def test_the_tick_after_a_tick_is_the_next_one_whatever_the_clock_reads(uptime_s: float, groups: int) -> None:
    """A member re-enqueued at the tick its scrape started at gets its group's next tick, also on a
    node up for hours or days (the monotonic clock: tens of thousands of intervals, where a tick
    divided by the interval falls just under a whole number); naming the same tick again scraped
    every such member twice in one tick. Members of one group still name one float per tick."""
    interval = 0.05
    first = int(uptime_s / interval)
    for slot in range(groups):
        offset = slot / groups * interval
        for k in range(first, first + 400):
            tick = k * interval + offset
            due = next_scrape_due(tick, interval, slot, groups * 16)
            assert due > tick
            assert due - tick == pytest.approx(interval, abs=1e-6)
            assert next_scrape_due(tick + interval / 3, interval, slot, groups * 16) == due


def _run_idle(
    interval: float, stale: float, ticks: list[float], dispatch_at: float | None = None
) -> list[float]:
    """Scrape starts of an endpoint idle throughout, but for one dispatch at ``dispatch_at``."""
    pace, picks, starts = IdlePacing(), 0, []
    limit = idle_gap_limit(interval, stale)
    for t in ticks:
        if dispatch_at is not None and t >= dispatch_at and picks == 0:
            picks = 1  # dispatched since the previous tick
        if pace.due(t, picks=picks, inflight=0, interval_s=interval):
            starts.append(t)
            pace.scraped(t, picks=picks, quiet=True, interval_s=interval, limit_s=limit)
    return starts


@pytest.mark.parametrize(("interval", "stale"), SETTINGS)
def test_an_idle_endpoint_is_scraped_ever_less_often_but_within_the_stale_threshold(
    interval: float, stale: float
) -> None:
    limit = idle_gap_limit(interval, stale)
    starts = _run_idle(interval, stale, _ticks(interval, 200 * stale))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    if limit <= interval:  # no room under the threshold: every tick, as without pacing
        assert max(gaps) == pytest.approx(interval)
        return
    # a scrape started at most one interval short of the threshold after the one before, which
    # leaves the scrape at least that long to land before the endpoint would count as stale
    assert max(gaps) <= stale - interval + 1e-9
    assert max(gaps) == pytest.approx(limit, abs=interval / 2 + 1e-9)  # it does slow down that far
    ticks = len(_ticks(interval, 200 * stale))
    assert len(starts) <= ticks * interval / limit * 1.01 + 8  # a scrape per gap, not per tick


def test_the_gap_doubles_from_the_interval_to_the_limit() -> None:
    starts = _run_idle(0.05, 1.0, _ticks(0.05, 3.0))
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
    # the first two scrapes see the page for the first time and unchanged: fast, then 0.1, 0.2, 0.4, 0.5
    assert gaps[:6] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]


@pytest.mark.parametrize(("interval", "stale"), [(0.05, 1.0), (0.01, 5.0)])
def test_a_dispatch_brings_the_endpoint_back_to_every_interval_at_its_groups_next_tick(
    interval: float, stale: float
) -> None:
    ticks = _ticks(interval, 40 * stale)
    dispatch_at = 30 * stale + interval / 3  # long idle by then
    starts = _run_idle(interval, stale, ticks, dispatch_at=dispatch_at)
    first_after = min(s for s in starts if s >= dispatch_at)
    assert first_after == min(t for t in ticks if t >= dispatch_at)  # the very next tick of its group
    # the dispatch ended the idle streak: the next scrapes are one interval apart, then slow down again
    after = [s for s in starts if s >= first_after][:3]
    assert after[1] - after[0] == pytest.approx(interval)


def test_requests_in_flight_or_a_changed_page_keep_the_fast_interval() -> None:
    pace = IdlePacing()
    pace.scraped(0.0, picks=0, quiet=True, interval_s=0.05, limit_s=0.5)
    pace.scraped(0.05, picks=0, quiet=True, interval_s=0.05, limit_s=0.5)
    assert pace.gap == pytest.approx(0.1)
    assert pace.due(0.1, picks=0, inflight=1, interval_s=0.05)  # a request in flight: due anyway
    assert not pace.due(0.1, picks=0, inflight=0, interval_s=0.05)
    pace.scraped(0.15, picks=0, quiet=False, interval_s=0.05, limit_s=0.5)  # the page moved
    assert pace.gap == pytest.approx(0.05)
    assert pace.due(0.2, picks=0, inflight=0, interval_s=0.05)


class StillPod:
    """A loopback pod whose ``/metrics`` page never changes (an idle vLLM server); counts scrapes."""

    PAGE = (
        b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 0\n"
        b'vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1\n'
    )

    def __init__(self) -> None:
        self.metrics_requests = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                metrics = head.startswith(b"GET /metrics")
                self.metrics_requests += metrics
                body = self.PAGE if metrics else b""
                status = b"200 OK" if metrics else b"404 Not Found"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def still_pod() -> AsyncIterator[StillPod]:
    pod = StillPod()
    server = await asyncio.start_server(pod.handle, "127.0.0.1", 0)
    pod.port = server.sockets[0].getsockname()[1]
    try:
        yield pod
    finally:
        server.close()
        await server.wait_closed()


async def _until(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_a_real_scraper_slows_down_on_an_idle_pod_and_speeds_up_at_a_dispatch() -> None:
    routing = {"scrapeInterval": "20ms", "staleThreshold": "2s"}
    async with still_pod() as pod, scrape_rig(f"127.0.0.1:{pod.port}", routing=routing) as rig:
        rig.scraper.sync()
        try:
            await _until(lambda: (p := rig.scraper.pace("s", rig.state.key)) is not None and p.gap >= 0.5)
            seen = pod.metrics_requests
            await asyncio.sleep(0.4)  # 20 ticks of its group
            assert pod.metrics_requests - seen <= 1  # every 20 ms would have been ~20 scrapes
            assert rig.state.scraped_at is not None
            assert not rig.state.scrape_failing
            rig.state.dispatched(10)
            await _until(lambda: pod.metrics_requests > seen + 1)
            pace = rig.scraper.pace("s", rig.state.key)
            assert pace is not None
            assert pace.picks == 1
            assert pace.gap == pytest.approx(0.02)  # the dispatch ended the idle streak
        finally:
            await rig.scraper.close()


async def test_without_idle_pacing_an_idle_pod_is_scraped_every_interval() -> None:
    routing = {"scrapeInterval": "20ms", "staleThreshold": "2s"}
    async with (
        still_pod() as pod,
        scrape_rig(f"127.0.0.1:{pod.port}", routing=routing, idle_pacing=False) as rig,
    ):
        rig.scraper.sync()
        try:
            await _until(lambda: pod.metrics_requests >= 30)
            pace = rig.scraper.pace("s", rig.state.key)
            assert pace is not None
            assert pace.gap == pytest.approx(0.02)
        finally:
            await rig.scraper.close()
