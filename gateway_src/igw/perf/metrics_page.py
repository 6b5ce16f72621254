"""``igw perf metrics-page``: what a ``/metrics`` scrape costs the event loop at fleet scale.

For each fleet size (endpoints spread over ``--pools`` pools, request series of ``--models`` models)
a gateway's state is filled as scrapes and requests leave it (:func:`fleet_state`) and the page is
rendered ``--scrapes`` times two ways, alternating, while a probe task on the same event loop
measures how late its 1 ms sleeps wake up:

* ``on loop``: ``prometheus_client.generate_latest`` of the registry in the handler, as ``/metrics``
  did until session s42 (the loop is blocked for the whole render);
* ``off loop``: :meth:`igw.gateway.metrics_render.MetricsPage.render`, what ``/metrics`` does now
  (values read on the loop, families built and formatted on a worker thread).

Per way it prints the loop stall (the probe's largest lateness during a scrape: what a request or a
stream waiting on the loop waits for) and the process CPU per scrape (both threads), the median over
the scrapes, and the on-loop/off-loop ratio of the stall; both ways run in the same process, so the
ratio holds on a loaded machine where the absolute figures do not. Last, the CPU time of the off-loop
way's own part on the loop (folding and reading the values,
:meth:`~igw.gateway.metrics_render.MetricsPage.snapshot`): the rest of its stall is the interpreter
lock changing hands (every 5 ms) and, on a busy machine, the wait for a core.

Then the same two ways for the CloudWatch EMF interval (:mod:`igw.gateway.emf`, ``--emf-interval``):
``on loop`` builds the documents in the ticker's task as before session s42, ``off loop`` reads the
inputs on the loop (:meth:`~igw.gateway.emf.EmfReporter.snapshot`) and builds and serialises the
documents on a worker thread, as :func:`~igw.gateway.emf.emf_context` does now; two reporters over the
same state must give the same lines both ways.

Last, the global router's ``/metrics`` (``igw global serve``) at a fleet of ``--clusters`` clusters
in ``--regions`` regions serving ``--router-models`` models, both ways: ``generate_latest`` on the
loop (until session s42) and :attr:`igw.global_router.metrics.FleetMetrics.page` (off it).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import generate_latest

from igw.config.build import build_gateway_config
from igw.gateway.emf import emf_reporter
from igw.gateway.endpoints import DiscoveredEndpoint
from igw.gateway.guards import OpenGuard
from igw.gateway.state import GatewayState
from igw.global_router.metrics import FleetMetrics
from igw.scheduling.values import EngineMetrics

HELP = (
    "Cost of a /metrics scrape at fleet scale: the event loop's stall and CPU per scrape, rendered on "
    "the loop (as before session s42) and off it; the same for the CloudWatch EMF interval."
)

PROBE_SLEEP_S = 0.001


def _config_doc(pools: int) -> dict[str, object]:
    schedulers = [
        {"name": f"pool{p}", "modelName": f"model{p}", "modelSelector": {"matchLabels": {"app": f"pool{p}"}}}
        for p in range(pools)
    ]
    return {
        "apiVersion": "inference.sagemaker.aws.amazon.com/v1alpha1",
        "kind": "InferenceGatewayConfig",
        "metadata": {"name": "perf", "namespace": "inference"},
        "spec": {"bbr": {"enabled": True}, "schedulers": schedulers},
    }


def fleet_state(endpoints: int, *, pools: int, models: int, clock: Callable[[], float]) -> GatewayState:
    """A gateway state with ``endpoints`` endpoints in ``pools`` pools, as scrapes and requests leave
    it: most scraped with queue, running, KV and LoRA adapters; every 10th never scraped, every 15th
    failing its scrapes, every 20th with a frozen page, every 25th missing a signal; picks on each;
    request series (requests, duration, TTFT, ITL, tokens, decisions) of ``models`` models."""
    state = GatewayState(
        build_gateway_config(_config_doc(pools)), guard=OpenGuard(), clock=clock, rng=random.Random(0)
    )
    now = clock()
    for p in range(pools):
        keys = [f"10.{p}.{i // 250}.{i % 250}:8000" for i in range(p, endpoints, pools)]
        state.apply_endpoints(f"pool{p}", [DiscoveredEndpoint(key) for key in keys])
    metrics = state.metrics
    for i, (sched, st) in enumerate(state.runtime.endpoints()):
        metrics.picks_child(sched, st.key).inc(i % 7 + 1)
        st.inflight = i % 3
        if i % 10 == 9:
            continue
        st.metrics = EngineMetrics(
            waiting=i % 5,
            running=i % 11,
            kv_usage=(i % 100) / 100,
            active_adapters=frozenset({f"adapter-{i % 4}"}),
            waiting_adapters=frozenset({f"adapter-{i % 3}"}) if i % 2 else frozenset(),
            max_lora=4,
        )
        st.scraped_at = now - (i % 40) / 100
        st.scrape_failing = i % 15 == 14
        st.page.frozen = i % 20 == 19
        if i % 25 == 24:
            st.missing = frozenset({"vllm:kv_cache_usage_perc"})
    for k in range(models):
        model = f"model{k % pools}" if k < pools else f"model{k % pools}-canary{k}"
        series = metrics.model_series(model, model)
        for status in (200, 429):
            series.requests(status).inc(10 + k)
        series.duration.observe(0.2 + k / 100)
        series.ttft.observe(0.04)
        series.itl.observe(0.01)
        series.tokens("in").inc(100)
        series.tokens("out").inc(20)
        metrics.decision_child(f"pool{k % pools}").observe(2e-4)
    return state


@dataclass(frozen=True, slots=True)
class ScrapeCost:
    stall_ms: float
    """The probe's largest lateness while the scrape ran."""
    cpu_ms: float
    """Process CPU time of the scrape (every thread)."""


async def _measure(scrape: Callable[[], Awaitable[bytes]]) -> ScrapeCost:
    """One scrape with the lateness probe running beside it on the loop."""
    done = False
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        while not done:
            asked = time.perf_counter()
            await asyncio.sleep(PROBE_SLEEP_S)
            worst = max(worst, time.perf_counter() - asked - PROBE_SLEEP_S)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(PROBE_SLEEP_S * 5)  # the probe is waiting when the scrape starts
    worst = 0.0
    cpu = time.process_time()
    await scrape()
    cpu = time.process_time() - cpu
    done = True
    await prober
    return ScrapeCost(stall_ms=worst * 1000, cpu_ms=cpu * 1000)


async def _size(endpoints: int, args: argparse.Namespace) -> None:
    started = time.monotonic()  # a clock that stands still: the two renderings compare byte for byte
    state = fleet_state(
        endpoints, pools=min(args.pools, endpoints), models=args.models, clock=lambda: started
    )
    registry = state.metrics.registry

    async def on_loop() -> bytes:
        return generate_latest(registry)

    page = await state.metrics.page.render()
    assert page == generate_latest(registry), "the two renderings differ"
    costs: dict[str, list[ScrapeCost]] = {"on loop": [], "off loop": []}
    for _ in range(args.scrapes):
        costs["on loop"].append(await _measure(on_loop))
        costs["off loop"].append(await _measure(state.metrics.page.render))
    lines = page.count(b"\n")
    print(f"{endpoints:>6} endpoints: page {len(page) / 1024:,.0f} KiB, {lines:,} lines")
    stalls: dict[str, float] = {}
    for way, measured in costs.items():
        stalls[way] = statistics.median(c.stall_ms for c in measured)
        cpu = statistics.median(c.cpu_ms for c in measured)
        print(f"         {way:<9} loop stall {stalls[way]:8.1f} ms   CPU per scrape {cpu:8.1f} ms")
    ratio = stalls["on loop"] / max(stalls["off loop"], 1e-3)
    print(f"         stall on loop / off loop: {ratio:.0f}x")
    reads = []
    for _ in range(args.scrapes):
        cpu = time.thread_time()
        state.metrics.page.snapshot()
        reads.append((time.thread_time() - cpu) * 1000)
    print(f"         off loop: the loop's own part (values read) {statistics.median(reads):.1f} ms CPU")
    await _emf(state, args)


async def _emf(state: GatewayState, args: argparse.Namespace) -> None:
    """The EMF interval's cost both ways (see the module's docstring)."""
    now = time.time()  # both reporters stamp their documents alike
    on_loop = emf_reporter(state.metrics, clock=lambda: now)
    off_loop = emf_reporter(state.metrics, clock=lambda: now)
    lines = list(on_loop.lines())
    assert lines == await asyncio.to_thread(off_loop.snapshot()), "the two EMF renderings differ"

    async def emf_on_loop() -> bytes:
        return "\n".join(on_loop.lines()).encode()

    async def emf_off_loop() -> bytes:
        return "\n".join(await asyncio.to_thread(off_loop.snapshot())).encode()

    costs: dict[str, list[ScrapeCost]] = {"on loop": [], "off loop": []}
    for _ in range(args.scrapes):
        costs["on loop"].append(await _measure(emf_on_loop))
        costs["off loop"].append(await _measure(emf_off_loop))
    print(f"         EMF interval: {len(lines)} documents")
    for way, measured in costs.items():
        stall = statistics.median(c.stall_ms for c in measured)
        cpu = statistics.median(c.cpu_ms for c in measured)
        print(f"         EMF {way:<9} loop stall {stall:8.1f} ms   CPU per interval {cpu:8.1f} ms")
    reads = []
    for _ in range(args.scrapes):
        cpu = time.thread_time()
        off_loop.snapshot()
        reads.append((time.thread_time() - cpu) * 1000)
    print(f"         EMF off loop: the loop's own part (inputs read) {statistics.median(reads):.1f} ms CPU")


def router_fleet_metrics(metrics: FleetMetrics, *, clusters: int, regions: int, models: int) -> FleetMetrics:
    """``metrics`` as a router's traffic leaves them at a fleet of ``clusters`` clusters in ``regions``
    regions serving ``models`` models: decisions, retries, failovers and heartbeat gauges per cluster,
    requests per model, the duration and TTFT histograms per model, region and locality."""
    for c in range(clusters):
        cluster, region = f"cluster{c}", f"region{c % regions}"
        for reason in ("same-region", "cross-region", "slow-start"):
            metrics.decisions.labels(cluster, region, reason).inc(c + 1)
        metrics.retries.labels(cluster, "503").inc()
        metrics.failovers.labels(cluster, "stale-heartbeat").inc()
        metrics.available.labels(cluster, region).set(1)
        metrics.ramp.labels(cluster).set(1)
        metrics.heartbeat_age.labels(cluster).set(c % 10 / 10)
    for k in range(models):
        model = f"model{k}"
        metrics.requests.labels(model, "200").inc(k + 1)
        for r in range(regions):
            for locality in ("same-region", "cross-region"):
                metrics.duration.labels(model, f"region{r}", locality).observe(0.2 + k / 100)
                metrics.ttft.labels(model, f"region{r}", locality).observe(0.04)
    return metrics


async def _router(args: argparse.Namespace) -> None:
    metrics = router_fleet_metrics(
        FleetMetrics(), clusters=args.clusters, regions=args.regions, models=args.router_models
    )
    registry = metrics.registry

    async def on_loop() -> bytes:
        return generate_latest(registry)

    page = await metrics.page.render()
    assert page == generate_latest(registry), "the two renderings differ"
    costs: dict[str, list[ScrapeCost]] = {"on loop": [], "off loop": []}
    for _ in range(args.scrapes):
        costs["on loop"].append(await _measure(on_loop))
        costs["off loop"].append(await _measure(metrics.page.render))
    lines = page.count(b"\n")
    print(
        f"global router, {args.clusters} clusters in {args.regions} regions, {args.router_models} models: "
        f"page {len(page) / 1024:,.0f} KiB, {lines:,} lines"
    )
    for way, measured in costs.items():
        stall = statistics.median(c.stall_ms for c in measured)
        cpu = statistics.median(c.cpu_ms for c in measured)
        print(f"         {way:<9} loop stall {stall:8.1f} ms   CPU per scrape {cpu:8.1f} ms")


def run(args: argparse.Namespace) -> int:
    print(f"median of {args.scrapes} scrapes per way; probe: a task sleeping {PROBE_SLEEP_S * 1000:.0f} ms")
    for endpoints in args.endpoints:
        asyncio.run(_size(endpoints, args))
    if args.clusters:
        asyncio.run(_router(args))
    return 0
