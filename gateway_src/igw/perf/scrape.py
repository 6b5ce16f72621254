"""``igw perf scrape``: what keeping N pods' metrics fresh costs one gateway process.

For each fleet size a simulated fleet (:mod:`igw.perf.scrape_fleet`, its own process, so its CPU is
not counted) serves N realistic vLLM ``/metrics`` pages on loopback, and the gateway's real
:class:`~igw.gateway.scraper.Scraper` - its HTTP session, parser and frozen-page tracking - scrapes
every pod at the configured interval for a fixed wall time, once per way of scraping: ``filtered``
(the gateway's: its scrape client, :mod:`igw.gateway.scrape_client`, asking for the routing families
alone with ``name[]``, :mod:`igw.gateway.page_filter`, and idle pods less often,
:mod:`igw.gateway.scrape_pacing`), ``fixed`` (the same, every pod every interval), ``lean`` (the same
client reading whole pages every interval: the same-run baseline) and optionally ``aiohttp``
(aiohttp's client, whole pages: what the scraper used first). ``--busy-share`` makes the rest of the
fleet idle pods whose page never changes. Reported per fleet size and way: this process's CPU per
scrape and per pod (percent of a core), the scrapes achieved against the interval's ideal, the pods
on a slower idle pace at the end, and the staleness (the oldest scrape age over all pods, sampled
every interval); then the issue's two targets with their ratio and verdict.

Where a scrape's CPU goes: the in-process stages (decode, xxh3 page digest, parse) are timed in a
tight loop on the same whole and filtered pages, next to ``prometheus_client``'s full text parser;
the kernel's share comes from ``getrusage``; the rest of a scrape is the event loop and the client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import itertools
import math
import random
import resource
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import aiohttp
import xxhash

from igw.config.build import build_gateway_config
from igw.engines import MetricFamilies
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.metrics_parser import VLLM, FamilyStarts, parse_page
from igw.gateway.page_filter import filter_names, filter_path
from igw.gateway.page_template import PageReader
from igw.gateway.runtime import GatewayRuntime
from igw.gateway.scrape_client import PageGetter, ScrapeClient, ScrapeRequestError, ScrapeResponse
from igw.gateway.scrape_pacing import SCRAPE_GROUP, next_scrape_due
from igw.gateway.scraper import MAX_PAGE_BYTES, FilteredPage, Scraper
from igw.gateway.telemetry import GatewayMetrics
from igw.perf.gateway_load import cpu_seconds
from igw.perf.scrape_fleet import VARIANTS, page_variants
from igw.perf.scrape_setup import (
    FLEET_START_TIMEOUT_S,
    SCHEDULER,
    TARGET_FLEET_PODS,
    TARGET_HOST_CORES,
    ScrapeBenchmarkError,
    config_doc,
    fleet,
)
from igw.sim.metrics_page import restrict_page

if TYPE_CHECKING:
    from igw.perf.scrape_group import GroupRow

HELP = "Scrape cost: CPU per scrape and per pod, and staleness, for simulated fleets of N pods."
TARGET_US_PER_SCRAPE: Final = 50.0
"""The issue's goal for one scrape's CPU (HTTP and parsing together)."""
CLIENTS: Final = ("filtered", "fixed", "lean", "aiohttp", "bare")
"""``filtered``: the gateway's way (its client, ``name[]`` filter, idle pods less often); ``fixed``: the
same, every pod every interval; ``lean``: its client, whole pages, every interval;
``aiohttp``: aiohttp's client, whole pages (what the scraper used first); ``bare``: the client alone
fetching filtered pages, without the scraper (:class:`BareFetcher`: the floor under a scrape)."""
ROUTING_FAMILIES: Final = dataclasses.replace(VLLM, lora=None)
"""What the benchmark's scheduler reads (no ``loraAdapters``: the scraper skips the LoRA family)."""


class AiohttpGetter:
    """aiohttp's client behind the scraper's :class:`PageGetter` port: this benchmark's baseline."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def get(self, key: str, path: str, *, timeout_s: float, max_bytes: int) -> ScrapeResponse:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._session.get(f"http://{key}{path}", timeout=timeout) as resp:
                return ScrapeResponse(resp.status, await resp.content.read(max_bytes))
        except aiohttp.ClientError as exc:
            raise ScrapeRequestError(str(exc)) from exc

    def forget(self, key: str) -> None:
        """aiohttp's pool keeps its connections until the session closes."""


@contextlib.asynccontextmanager
async def page_getter(client: str) -> AsyncIterator[PageGetter]:
    """The named client (:data:`CLIENTS`), closed on exit."""
    if client not in CLIENTS:
        raise ScrapeBenchmarkError(f"unknown client {client!r}; choose from {', '.join(CLIENTS)}")
    if client == "aiohttp":
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
        async with aiohttp.ClientSession(connector=connector) as session:
            yield AiohttpGetter(session)
        return
    lean = ScrapeClient()
    try:
        yield lean
    finally:
        await lean.close()


@dataclass(frozen=True, slots=True)
class ScrapeRow:
    client: str
    pods: int
    seconds: float
    scrapes: int
    cpu_s: float
    sys_s: float
    """The kernel's share of ``cpu_s`` (loopback TCP: both ends' network stack runs in the caller)."""
    fleet_cpu_s: float
    """The fleet process's CPU: near a full core, it (not the scraper) limits the scrapes achieved."""
    staleness_max_s: float
    staleness_p50_s: float
    interval_s: float
    stale_threshold_s: float
    filtered_pods: int
    """Pods the scraper read through the ``name[]`` filter at the end (``filtered``: all of them)."""
    idle_pods: int
    """Pods scraped less often than every interval at the end (idle: ``filtered`` only)."""
    sleeps: int = 0
    """Times this process waited for the kernel to wake it (voluntary context switches): each is an
    event-loop wake-up after the loop ran out of work, which costs more than the callbacks it runs
    once the process slept long enough for its code and data to leave the CPU's caches."""

    @property
    def us_per_scrape(self) -> float:
        return self.cpu_s / self.scrapes * 1e6 if self.scrapes else float("inf")

    @property
    def sys_us_per_scrape(self) -> float:
        return self.sys_s / self.scrapes * 1e6 if self.scrapes else float("inf")

    @property
    def sleeps_per_scrape(self) -> float:
        return self.sleeps / self.scrapes if self.scrapes else float("inf")

    @property
    def core_pct_per_pod(self) -> float:
        return self.cpu_s / self.seconds / self.pods * 100

    @property
    def achieved(self) -> float:
        """Scrapes done over scrapes an exact interval would do (1.0: the scraper keeps up)."""
        return self.scrapes / (self.pods * self.seconds / self.interval_s)


class BareFetcher:
    """The floor under a scrape (way ``bare``): the gateway's client fetching each pod's filtered page
    in the scraper's groups and phases, and nothing else - no digest, parse or endpoint state - so
    the rest of a ``filtered`` scrape is the scraper's own work. As the scraper does, it starts a
    group's requests from the tick's one timer on kept-alive connections
    (:meth:`ScrapeClient.start`), and connects through :meth:`ScrapeClient.get` when a pod has none."""

    def __init__(self, keys: list[str], client: ScrapeClient, *, interval_s: float, timeout_s: float) -> None:
        self.done = 0
        self.scraped_at: dict[str, float] = {}
        self._keys = keys
        self._client = client
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._path = filter_path(ROUTING_FAMILIES) or "/metrics"
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticks: dict[float, tuple[asyncio.TimerHandle, list[int]]] = {}
        self._fired = [0.0] * len(keys)
        """Per slot: the tick its last request was sent at (as the scraper's members keep it)."""
        self._closed = False

    def start(self) -> None:
        now = asyncio.get_running_loop().time()
        for slot in range(len(self._keys)):
            self._fire(slot, now)

    def _fire(self, slot: int, now: float) -> None:
        key = self._keys[slot]
        landed = functools.partial(self._landed, slot)
        self._fired[slot] = now
        deadline = next_scrape_due(now + self._timeout_s, self._interval_s, slot, len(self._keys))
        if not self._client.start(
            key,
            self._path,
            timeout_s=self._timeout_s,
            max_bytes=MAX_PAGE_BYTES,
            done=landed,
            deadline=deadline,
        ):
            task = asyncio.create_task(self._connect(slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, slot: int) -> None:
        try:
            resp = await self._client.get(
                self._keys[slot], self._path, timeout_s=self._timeout_s, max_bytes=MAX_PAGE_BYTES
            )
        except (TimeoutError, OSError) as exc:
            self._landed(slot, 0, b"", exc)
        else:
            self._landed(slot, resp.status, resp.body, None)

    def _landed(self, slot: int, status: int, body: bytes, error: BaseException | None) -> None:
        if self._closed:
            return
        if error is None and status == 200:
            self.done += 1
            self.scraped_at[self._keys[slot]] = time.monotonic()
        loop = asyncio.get_running_loop()
        after = max(loop.time(), self._fired[slot])
        due = next_scrape_due(after, self._interval_s, slot, len(self._keys))
        waiting = self._ticks.get(due)
        if waiting is None:
            waiting = self._ticks[due] = (loop.call_at(due, self._wake, due), [])
        waiting[1].append(slot)

    def _wake(self, due: float) -> None:
        now = max(asyncio.get_running_loop().time(), due)
        for slot in self._ticks.pop(due)[1]:
            self._fire(slot, now)

    async def close(self) -> None:
        self._closed = True
        for timer, _ in self._ticks.values():
            timer.cancel()
        self._ticks.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def measure(
    pods: int,
    *,
    seconds: float,
    interval_s: float,
    stale_s: float,
    client: str = "lean",
    variants: int = VARIANTS,
    busy_share: float = 1.0,
) -> ScrapeRow:
    """Scrape a fleet of ``pods`` with ``client`` for ``seconds`` after a warm-up (every pod scraped
    once, then one more second); a
    ``busy_share`` of the pods cycles through ``variants`` pages, the rest (and every pod with
    ``variants=1``) are idle pods whose page never changes."""
    clock = time.monotonic
    async with fleet(pods, variants, round(pods * busy_share)) as (fleet_pid, ports):
        runtime = GatewayRuntime(
            build_gateway_config(config_doc(interval_s, stale_s)), rng=random.Random(0), clock=clock
        )
        pool = runtime.schedulers[SCHEDULER].pool
        pool.replace(DiscoveredEndpoint(key=f"127.0.0.1:{p}") for p in ports)
        metrics = GatewayMetrics(lister=runtime.endpoints, clock=clock)
        async with page_getter(client) as getter:
            scraper: Scraper | BareFetcher
            if client == "bare":
                if not isinstance(getter, ScrapeClient):
                    raise ScrapeBenchmarkError("the bare way measures the gateway's scrape client")
                bare = scraper = BareFetcher(list(pool.states), getter, interval_s=interval_s, timeout_s=1.0)
                bare.start()

                def scrapes() -> float:
                    return float(bare.done)

                def oldest(now: float) -> float:
                    return max(now - bare.scraped_at.get(key, 0.0) for key in pool.states)

                def filtered() -> int:
                    return len(pool.states)

                def unscraped() -> int:
                    return len(pool.states) - len(bare.scraped_at)

                def idle() -> int:
                    return 0

            else:
                full = scraper = Scraper(
                    runtime=lambda: runtime,
                    client=getter,
                    clock=clock,
                    metrics=metrics,
                    name_filter=client in ("filtered", "fixed"),
                    idle_pacing=client == "filtered",
                )
                full.sync()

                def scrapes() -> float:
                    value = metrics.registry.get_sample_value("igw_endpoint_scrapes_total", {"result": "ok"})
                    return value or 0.0

                def oldest(now: float) -> float:
                    return max(now - (s.scraped_at or 0.0) for s in pool.states.values())

                def filtered() -> int:
                    return sum(
                        isinstance(full.page_mode(SCHEDULER, key), FilteredPage) for key in pool.states
                    )

                def unscraped() -> int:
                    return sum(s.scraped_at is None for s in pool.states.values())

                def idle() -> int:
                    paces = (full.pace(SCHEDULER, key) for key in pool.states)
                    return sum(p is not None and p.gap > interval_s for p in paces)

            try:
                # warm-up: every pod scraped once (a loaded machine may take longer than a second to
                # connect to a thousand pods, which would read as a stale pod), then one more second
                for _ in range(math.ceil(FLEET_START_TIMEOUT_S / interval_s)):
                    if not unscraped():
                        break
                    await asyncio.sleep(interval_s)
                await asyncio.sleep(1.0)
                ages: list[float] = []
                loop = asyncio.get_running_loop()
                n0, usage0, t0 = scrapes(), resource.getrusage(resource.RUSAGE_SELF), clock()
                fleet0 = cpu_seconds(fleet_pid)
                while (now := clock()) - t0 < seconds:
                    ages.append(oldest(now))
                    # sampled at the first group's ticks (that group at its oldest), in the same
                    # event-loop turn as the tick: a wake-up of its own would be this benchmark's
                    # cost, not the scraper's (one per interval, shared by only 16 scrapes at 16 pods)
                    await asyncio.sleep(next_scrape_due(loop.time(), interval_s, 0, pods) - loop.time())
                usage, elapsed, done = resource.getrusage(resource.RUSAGE_SELF), clock() - t0, scrapes() - n0
                fleet_cpu = cpu_seconds(fleet_pid) - fleet0
                filtered_pods, idle_pods = filtered(), idle()
            finally:
                await scraper.close()
    if not done:
        raise ScrapeBenchmarkError(f"no scrape of the {pods}-pod fleet succeeded (see the log above)")
    return ScrapeRow(
        client=client,
        pods=pods,
        seconds=elapsed,
        scrapes=int(done),
        cpu_s=usage.ru_utime - usage0.ru_utime + usage.ru_stime - usage0.ru_stime,
        sys_s=usage.ru_stime - usage0.ru_stime,
        fleet_cpu_s=fleet_cpu,
        staleness_max_s=max(ages),
        staleness_p50_s=statistics.median(ages),
        interval_s=interval_s,
        stale_threshold_s=stale_s,
        filtered_pods=filtered_pods,
        idle_pods=idle_pods,
        sleeps=usage.ru_nvcsw - usage0.ru_nvcsw,
    )


def _mean_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1e6


@dataclass(frozen=True, slots=True)
class StageCosts:
    """Mean CPU µs of a scrape's in-process stages on one page, in a tight loop."""

    size: int
    """The page's bytes."""
    decode: float
    digest: float
    """xxh3 of the page (frozen-page detection)."""
    hinted: float
    """The gateway's parser with the endpoint's search hints from its previous page (as scraping runs)."""
    cold: float
    """The same parser without hints (an endpoint's first page)."""
    reread: float
    """What the scraper spends reading a changed page of the endpoint (:class:`PageReader`, pages
    alternating between variants): through the previous page's template where the shape held (small
    pages), else the hinted parse."""

    @property
    def total(self) -> float:
        return self.decode + self.digest + self.reread


def stage_costs(raws: list[bytes], families: MetricFamilies, iterations: int) -> StageCosts:
    """Stage costs on ``raws[0]``; the re-read alternates over all of ``raws`` (the variants)."""
    raw = raws[0]
    text = raw.decode()
    starts: FamilyStarts = {}
    parse_page(text, families, starts)
    texts = [r.decode() for r in raws]
    reader, reread_starts = PageReader(), dict(starts)
    turns = itertools.cycle(texts)
    return StageCosts(
        size=len(raw),
        decode=_mean_us(lambda: raw.decode("utf-8", errors="replace"), iterations),
        digest=_mean_us(lambda: xxhash.xxh3_64_intdigest(raw), iterations),
        hinted=_mean_us(lambda: parse_page(text, families, starts), iterations),
        cold=_mean_us(lambda: parse_page(text, families), iterations),
        reread=_mean_us(lambda: reader.read(next(turns), families, reread_starts), iterations),
    )


@dataclass(frozen=True, slots=True)
class ParseCosts:
    """Stage costs of a realistic vLLM page, whole and filtered, and the full-parser baseline."""

    whole: StageCosts
    filtered: StageCosts
    full: float
    """``prometheus_client``'s full text parser on the whole page."""

    def stages(self, client: str) -> StageCosts:
        return self.filtered if client in ("filtered", "fixed") else self.whole


def filtered_page(raw: bytes) -> bytes:
    """``raw`` as a prometheus_client server answers the scraper's filtered request."""
    return restrict_page(raw.decode(), filter_names(ROUTING_FAMILIES)).encode()


def parse_costs(iterations: int) -> ParseCosts:
    """Stage costs of a realistic vLLM page, whole and filtered, and the full-parser baseline."""
    # deferred: prometheus_client's parser is only this benchmark's baseline
    from prometheus_client.parser import text_string_to_metric_families

    raws = page_variants()
    text = raws[0].decode()
    return ParseCosts(
        whole=stage_costs(raws, ROUTING_FAMILIES, iterations),
        filtered=stage_costs([filtered_page(raw) for raw in raws], ROUTING_FAMILIES, iterations),
        full=_mean_us(lambda: list(text_string_to_metric_families(text)), max(1, iterations // 20)),
    )


def _print_rows(rows: list[ScrapeRow], *, header: bool = True) -> None:
    if header:
        print(
            f"{'pods':>6} {'scrapes':>8} {'achieved':>8} {'CPU/scrape':>11} {'of it sys':>10} "
            f"{'vs 50 µs':>8} {'core %/pod':>10} {'core % total':>12} {'fleet core %':>12} "
            f"{'stale p50':>10} {'stale max':>10} {'client':<8} {'filtered':>8} idle pods"
        )
    for r in rows:
        print(
            f"{r.pods:>6} {r.scrapes:>8} {r.achieved:>8.2f} {r.us_per_scrape:>8.0f} µs "
            f"{r.sys_us_per_scrape:>7.0f} µs "
            f"{r.us_per_scrape / TARGET_US_PER_SCRAPE:>7.1f}× {r.core_pct_per_pod:>10.3f} "
            f"{r.core_pct_per_pod * r.pods:>12.1f} {r.fleet_cpu_s / r.seconds * 100:>12.1f} "
            f"{r.staleness_p50_s * 1000:>7.0f} ms "
            f"{r.staleness_max_s * 1000:>7.0f} ms {r.client:<8} {r.filtered_pods:>8} {r.idle_pods}"
        )


def _print_breakdown(rows: list[ScrapeRow], costs: ParseCosts, *, pages_change: bool) -> None:
    """Per row: kernel, in-process stages (tight-loop figures) and the rest (event loop, client).
    Where pages never change (``--page-variants 1``) the scraper does not decode or parse them again,
    so only the digest counts."""
    for r in rows:
        if r.client == "bare":
            print(
                f"{r.pods:>6} pods     bare: {r.us_per_scrape:.0f} µs = kernel {r.sys_us_per_scrape:.0f} "
                f"+ event loop and client alone {r.us_per_scrape - r.sys_us_per_scrape:.0f} (no scraper); "
                f"{r.sleeps_per_scrape * min(r.pods, SCRAPE_GROUP):.1f} event-loop wake-ups per "
                f"{min(r.pods, SCRAPE_GROUP)} scrapes"
            )
            continue
        stages = costs.stages(r.client)
        inline = stages.total if pages_change else stages.digest
        rest = r.us_per_scrape - r.sys_us_per_scrape - inline
        print(
            f"{r.pods:>6} pods {r.client:>8}: {r.us_per_scrape:.0f} µs = kernel {r.sys_us_per_scrape:.0f} "
            f"+ {'decode/xxh3/re-read' if pages_change else 'xxh3'} {inline:.1f} "
            f"+ event loop, client, bookkeeping {rest:.0f}; "
            f"{r.sleeps_per_scrape * min(r.pods, SCRAPE_GROUP):.1f} event-loop wake-ups per "
            f"{min(r.pods, SCRAPE_GROUP)} scrapes (a group)"
        )


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def _print_targets(rows: list[ScrapeRow]) -> None:
    """The issue's two scraping targets, each with its ratio and verdict, from this run's rows."""
    by = {(r.client, r.pods): r for r in rows}
    for pods in dict.fromkeys(r.pods for r in rows):
        best = next((by[(c, pods)] for c in CLIENTS[:4] if (c, pods) in by), None)
        if best is None:
            continue
        ratio = best.us_per_scrape / TARGET_US_PER_SCRAPE
        line = (
            f"{pods:>6} pods: CPU per scrape {best.client} {best.us_per_scrape:.0f} µs vs the "
            f"{TARGET_US_PER_SCRAPE:.0f} µs target = {ratio:.2f}× ({_verdict(ratio <= 1)})"
        )
        for base_name in ("fixed", "lean", "aiohttp", "bare"):
            base = by.get((base_name, pods))
            if base is not None and base is not best:
                line += (
                    f"; {best.client} / {base_name} {best.us_per_scrape:.0f} / {base.us_per_scrape:.0f} µs "
                    f"= {best.us_per_scrape / base.us_per_scrape:.2f}×"
                )
        print(line)
    preferred = next((c for c in CLIENTS[:4] if any(r.client == c for r in rows)), None)
    for r in rows:
        if r.pods < TARGET_FLEET_PODS or r.client != preferred:
            continue
        stale_ok = r.staleness_max_s <= r.stale_threshold_s
        cores = r.core_pct_per_pod * r.pods / 100
        full_rate = r.us_per_scrape * 1e-6 * r.pods / r.interval_s
        print(
            f"{r.pods:>6} pods ({r.client}): fresh within the stale threshold: oldest scrape "
            f"{r.staleness_max_s * 1000:.0f} ms vs {r.stale_threshold_s * 1000:.0f} ms "
            f"({_verdict(stale_ok)}); "
            f"host CPU {cores:.2f} cores vs {TARGET_HOST_CORES:g} = {cores / TARGET_HOST_CORES:.2f}× "
            f"({_verdict(stale_ok and cores <= TARGET_HOST_CORES)}), at {r.achieved:.2f} of the interval's "
            f"scrapes; every pod every {r.interval_s * 1000:.0f} ms at this CPU per scrape would take "
            f"{full_rate:.2f} cores (arithmetic)"
        )


async def _run(args: argparse.Namespace) -> list[ScrapeRow]:
    rows: list[ScrapeRow] = []
    for pods in args.pods:
        for client in args.clients:
            rows.append(
                await measure(
                    pods,
                    seconds=args.seconds,
                    interval_s=args.interval,
                    stale_s=args.stale_threshold,
                    client=client,
                    variants=args.page_variants,
                    busy_share=args.busy_share,
                )
            )
            _print_rows(rows[-1:], header=len(rows) == 1)
    return rows


async def _run_groups(args: argparse.Namespace) -> list[GroupRow]:
    # deferred: the group rows run igw serve and read its /metrics (only with --groups)
    from igw.perf.scrape_group import measure_group, print_group_row

    rows: list[GroupRow] = []
    for pods in args.pods:
        for workers in args.groups:
            busy = round(pods * args.busy_share)
            row = await measure_group(
                pods,
                workers,
                seconds=args.seconds,
                interval_s=args.interval,
                stale_s=args.stale_threshold,
                variants=args.page_variants,
                busy=busy,
            )
            print_group_row(row)
            rows.append(row)
    return rows


def _groups(args: argparse.Namespace) -> int:
    """``--groups``: a whole ``igw serve --workers W`` per fleet size (:mod:`igw.perf.scrape_group`)."""
    # deferred: the group rows' module loads only with --groups
    from igw.perf.scrape_group import print_group_targets

    print(
        f"igw serve --workers {','.join(map(str, args.groups))}, idle, before each fleet for "
        f"{args.seconds:g} s (scraping every {args.interval * 1000:.0f} ms, stale threshold "
        f"{args.stale_threshold * 1000:.0f} ms; each pod cycles through {args.page_variants} page(s), "
        f"{args.busy_share:.0%} of the pods; the rest idle); CPU of every process of the group"
    )
    rows = asyncio.run(_run_groups(args))
    print("targets:")
    print_group_targets(rows)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.groups:
        return _groups(args)
    costs = parse_costs(args.parse_iterations)
    for name, c in (("whole", costs.whole), ("filtered", costs.filtered)):
        print(
            f"{name} vLLM page, {c.size:,} bytes (CPU, tight loop): decode {c.decode:.1f} µs, xxh3 "
            f"{c.digest:.1f} µs, parse {c.hinted:.1f} µs with the previous page's hints ({c.cold:.1f} µs "
            f"without), re-read of a changed page as the scraper does it {c.reread:.1f} µs; decode, xxh3 "
            f"and re-read together {c.total:.1f} µs"
        )
    print(
        f"prometheus_client full parser on the whole page {costs.full:.0f} µs "
        f"({costs.full / costs.whole.hinted:.0f}× the igw parser with hints)"
    )
    print(
        f"scraping every {args.interval * 1000:.0f} ms for {args.seconds:g} s per fleet size "
        f"(stale threshold {args.stale_threshold * 1000:.0f} ms; each pod cycles through "
        f"{args.page_variants} page(s), {args.busy_share:.0%} of the pods; the rest idle); CPU is this "
        "process's only"
    )
    try:
        # deferred: optional speed-up: uvloop (gateway extra), as igw serve runs it
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        rows = runner.run(_run(args))
    print("summary (cost curve):")
    _print_rows(rows)
    print("where a scrape's CPU goes:")
    _print_breakdown(rows, costs, pages_change=args.page_variants > 1)
    print("targets:")
    _print_targets(rows)
    return 0
