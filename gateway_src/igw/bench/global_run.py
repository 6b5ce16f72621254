"""``igw demo --global`` / ``igw bench global``: the two-tier failover run, measured.

Three clusters in two regions (``east-a``, ``east-b`` in the routers' region ``east``; ``west-a``
behind a delay proxy standing in for the inter-region link), each a simulated fleet behind its own
``igw serve`` publishing heartbeats to Redis, and two ``igw global serve`` replicas that a
round-robin client (the load balancer's role) sends Poisson traffic to. The script:

1. warm-up, then ``east-a``'s gateway is killed (SIGKILL: no goodbye, the heartbeat just stops);
2. it is started again (same address) and ramps up under slow start;
3. the whole ``east`` region is killed: traffic must go to ``west-a``, paying the link latency;
4. with every cluster back, the same load runs once per cost policy (latency-first,
   cost-first-within-slo) on fresh routers, for cost and P99.

Measured: time from each kill until both replicas have drained the cluster (polled from
``/readyz``), failed requests (non-streaming statuses other than 200; streams ended by an error
event), the ramp-up curve (share of requests served by the returning cluster per second, and the
routers' own ramp), latency added by the regional failover, and cost per 1000 requests with P99
latency per policy. Results go to ``<out>/global-report.md``, ``global-results.json`` and PNGs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import yaml

from igw.bench.console import Progress, quiet, stderr_progress
from igw.bench.global_fleet import (
    MODEL,
    ClusterPlan,
    DelayProxy,
    GatewayProcess,
    global_config,
    redis_process,
    router_replicas,
    sim_fleet,
    write_gateway_files,
)

ROUTER_REGION = "east"
CLUSTERS = (
    ClusterPlan("east-a", "east", pods=2, cost_per_million_tokens=0.50),
    ClusterPlan("east-b", "east", pods=2, cost_per_million_tokens=0.40),
    ClusterPlan("west-a", "west", pods=2, cost_per_million_tokens=0.20),
)
AWS_REDIRECT_S = 35.0
"""AWS's documented redirect time for its (announced) global router."""


@dataclass(frozen=True, slots=True)
class GlobalRunOptions:
    out: Path
    rate: float = 10.0
    """Offered requests per second, over both replicas."""
    warmup_s: float = 8.0
    down_s: float = 10.0
    slow_start_s: float = 12.0
    region_down_s: float = 10.0
    policy_s: float = 15.0
    link_delay_s: float = 0.035
    """One-way delay to the other region (us-east-1 <-> us-west-2 is about 35 ms)."""
    stream_share: float = 0.2
    max_tokens: int = 24
    slo_s: float = 1.0
    seed: int = 1


@dataclass(slots=True)
class Sample:
    sent_at: float
    """Seconds since the load started."""
    replica: int
    stream: bool
    status: int = 0
    cluster: str = ""
    region: str = ""
    latency_s: float = math.nan
    ttft_s: float | None = None
    stream_error: bool = False
    tokens: int = 0
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.status != 200 or self.stream_error


@dataclass
class Timeline:
    events: list[tuple[float, str]] = field(default_factory=list)
    """(seconds since load start, what) for each scripted action."""
    availability: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    """(t, replica, {cluster: {available, ramp}}) from polling /readyz."""


async def _one(
    http: aiohttp.ClientSession, url: str, sample: Sample, *, rng: random.Random, max_tokens: int, t0: float
) -> None:
    loop = asyncio.get_running_loop()
    body = {
        "model": MODEL,
        "prompt": "tell me about routing " + " ".join(str(rng.randint(0, 9999)) for _ in range(20)),
        "max_tokens": max_tokens,
        "stream": sample.stream,
    }
    if sample.stream:
        body["stream_options"] = {"include_usage": True}
    started = loop.time()
    try:
        async with http.post(url + "/v1/completions", json=body) as resp:
            sample.status = resp.status
            sample.cluster = resp.headers.get("x-igw-cluster", "")
            sample.region = resp.headers.get("x-igw-region", "")
            if sample.stream and resp.status == 200:
                async for chunk in resp.content.iter_any():
                    if sample.ttft_s is None:
                        sample.ttft_s = loop.time() - started
                    if b'"error"' in chunk:
                        sample.stream_error = True
                    if b'"usage"' in chunk:
                        with contextlib.suppress(ValueError, IndexError):
                            line = next(ln for ln in chunk.split(b"\n") if b'"usage"' in ln)
                            sample.tokens = int(json.loads(line[5:])["usage"]["total_tokens"])
            else:
                payload = await resp.read()
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    sample.tokens = int(json.loads(payload)["usage"]["total_tokens"])
    except (aiohttp.ClientError, TimeoutError) as exc:
        sample.error = type(exc).__name__
    sample.latency_s = loop.time() - started


async def _load(
    urls: Sequence[str], *, duration_s: float, options: GlobalRunOptions, t0: float, rng: random.Random
) -> list[Sample]:
    loop = asyncio.get_running_loop()
    samples: list[Sample] = []
    tasks: list[asyncio.Task[None]] = []
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as http:
        end = loop.time() + duration_s
        i = 0
        while loop.time() < end:
            sample = Sample(
                sent_at=loop.time() - t0, replica=i % len(urls), stream=rng.random() < options.stream_share
            )
            samples.append(sample)
            tasks.append(
                loop.create_task(
                    _one(http, urls[sample.replica], sample, rng=rng, max_tokens=options.max_tokens, t0=t0)
                )
            )
            i += 1
            # never past the phase's end: at --live-rate 0.001 the next gap (1,000 s on average, an
            # hour one time in 37) was slept in full, so each phase outlasted its script by that much
            await asyncio.sleep(min(rng.expovariate(options.rate), max(0.0, end - loop.time())))
        await asyncio.gather(*tasks)
    return samples


async def _watch(urls: Sequence[str], timeline: Timeline, t0: float, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        while not stop.is_set():
            for replica, url in enumerate(urls):
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    async with http.get(url + "/readyz") as resp:
                        detail = await resp.json()
                    state = {
                        n: {"available": c["available"], "ramp": c["ramp"]}
                        for n, c in detail["clusters"].items()
                    }
                    timeline.availability.append((loop.time() - t0, replica, state))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)


def drained_after(timeline: Timeline, cluster: str, at: float, replicas: int) -> float | None:
    """Seconds from ``at`` until every replica reported ``cluster`` unavailable."""
    seen: dict[int, float] = {}
    for t, replica, state in timeline.availability:
        if t >= at and replica not in seen and not state[cluster]["available"]:
            seen[replica] = t
    return max(seen.values()) - at if len(seen) == replicas else None


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ramp_curve(
    samples: Sequence[Sample], cluster: str, *, start: float, end: float
) -> list[tuple[float, float]]:
    """(seconds after ``start``, share of requests served by ``cluster``) per one-second bin."""
    curve = []
    for b in range(int(end - start)):
        in_bin = [s for s in samples if start + b <= s.sent_at < start + b + 1 and s.status == 200]
        if in_bin:
            curve.append((b + 0.5, sum(s.cluster == cluster for s in in_bin) / len(in_bin)))
    return curve


def _window(samples: Sequence[Sample], start: float, end: float) -> list[Sample]:
    return [s for s in samples if start <= s.sent_at < end and not s.stream and s.status == 200]


async def _failover_script(
    gateways: dict[str, GatewayProcess], urls: list[str], options: GlobalRunOptions, progress: Progress
) -> tuple[list[Sample], Timeline]:
    loop = asyncio.get_running_loop()
    timeline = Timeline()
    t0 = loop.time()
    stop = asyncio.Event()
    watcher = loop.create_task(_watch(urls, timeline, t0, stop))
    total = options.warmup_s + options.down_s + options.slow_start_s + 3 + options.region_down_s
    load = loop.create_task(
        _load(urls, duration_s=total, options=options, t0=t0, rng=random.Random(options.seed))
    )

    async def at(t: float) -> None:
        await asyncio.sleep(max(0.0, t0 + t - loop.time()))

    def event(what: str) -> None:
        timeline.events.append((loop.time() - t0, what))
        progress(f"failover script: {what}")

    progress(
        f"failover script: {total:g} s of load at {options.rate:g} req/s, warm-up {options.warmup_s:g} s"
    )
    await at(options.warmup_s)
    gateways["east-a"].kill()
    event("kill east-a")
    await at(options.warmup_s + options.down_s)
    await gateways["east-a"].start()
    event("east-a back")
    await at(options.warmup_s + options.down_s + options.slow_start_s + 3)
    gateways["east-a"].kill()
    gateways["east-b"].kill()
    event("kill region east")
    samples = await load
    stop.set()
    await watcher
    return samples, timeline


async def _policy_run(
    policy: str, config: dict[str, Any], workdir: Path, options: GlobalRunOptions, progress: Progress
) -> list[Sample]:
    config = {
        **config,
        "spec": {**config["spec"], "routing": {**config["spec"]["routing"], "policy": policy}},
    }
    path = workdir / f"global-{policy}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    progress(f"cost policy {policy}: starting 2 router replicas")
    async with router_replicas(path, workdir, replicas=2, tag=policy) as urls:
        await asyncio.sleep(1.5)  # heartbeats carry recent TTFT before traffic is compared
        progress(f"cost policy {policy}: {options.policy_s:g} s of load")
        loop = asyncio.get_running_loop()
        return await _load(
            urls,
            duration_s=options.policy_s,
            options=options,
            t0=loop.time(),
            rng=random.Random(options.seed),
        )


def policy_summary(samples: Sequence[Sample], prices: dict[str, float]) -> dict[str, Any]:
    ok = [s for s in samples if s.status == 200]
    cost = sum(s.tokens * prices.get(s.cluster, 0.0) / 1e6 for s in ok)
    latencies = [s.latency_s for s in ok if not s.stream]
    ttfts = [s.ttft_s for s in ok if s.stream and s.ttft_s is not None]
    share: dict[str, float] = {}
    for s in ok:
        share[s.cluster] = share.get(s.cluster, 0) + 1 / len(ok)
    return {
        "requests": len(samples),
        "failed": sum(s.failed for s in samples),
        "cost_per_1k_requests_usd": 1000 * cost / len(ok) if ok else math.nan,
        "latency_p50_s": percentile(latencies, 0.5),
        "latency_p99_s": percentile(latencies, 0.99),
        "ttft_p99_s": percentile(ttfts, 0.99),
        "share": {k: round(v, 3) for k, v in sorted(share.items())},
    }


async def run_global(options: GlobalRunOptions, progress: Progress = quiet) -> dict[str, Any]:
    """Run everything; return the results (also written under ``options.out``). ``progress`` is
    told each phase as it starts (process start-ups included: on a loaded machine they take most of
    the time)."""
    workdir = options.out / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    prices = {c.name: c.cost_per_million_tokens for c in CLUSTERS}
    async with contextlib.AsyncExitStack() as stack:
        progress("starting redis-server")
        redis_url = await stack.enter_async_context(redis_process(workdir))
        progress(f"starting the simulated fleet ({sum(c.pods for c in CLUSTERS)} pods)")
        pods = await stack.enter_async_context(sim_fleet(CLUSTERS, workdir, seed=options.seed))
        gateways: dict[str, GatewayProcess] = {}
        endpoints: dict[str, str] = {}
        for plan in CLUSTERS:
            write_gateway_files(plan, pods[plan.name], workdir, redis_url)
            progress(f"starting igw serve for cluster {plan.name} ({plan.region})")
            gw = GatewayProcess(plan, workdir)
            stack.push_async_callback(gw.stop)
            await gw.start()
            gateways[plan.name] = gw
            endpoints[plan.name] = gw.url
            if plan.region != ROUTER_REGION:
                proxy = DelayProxy(gw.port, delay_s=options.link_delay_s)
                endpoints[plan.name] = await proxy.start()
                stack.push_async_callback(proxy.stop)
        config = global_config(
            CLUSTERS,
            endpoints,
            region=ROUTER_REGION,
            redis_url=redis_url,
            policy="latency-first",
            slo_s=options.slo_s,
            penalty_s=2 * options.link_delay_s,
            slow_start_s=options.slow_start_s,
        )
        config_path = workdir / "global-failover.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        progress("starting 2 igw global serve replicas")
        async with router_replicas(config_path, workdir, replicas=2, tag="failover") as urls:
            await asyncio.sleep(1.5)
            samples, timeline = await _failover_script(gateways, urls, options, progress)
        progress("restarting east-a and east-b for the cost policies")
        for name in ("east-a", "east-b"):
            await gateways[name].stop()
            await gateways[name].start()
        await asyncio.sleep(2.0)
        policies = {
            p: await _policy_run(p, config, workdir, options, progress)
            for p in ("latency-first", "cost-first-within-slo")
        }
        progress("stopping the processes, writing the report")
    return summarize(samples, timeline, policies, prices, options)


def summarize(
    samples: Sequence[Sample],
    timeline: Timeline,
    policies: dict[str, list[Sample]],
    prices: dict[str, float],
    options: GlobalRunOptions,
) -> dict[str, Any]:
    events = dict((what, t) for t, what in timeline.events)
    kill, back, region = events["kill east-a"], events["east-a back"], events["kill region east"]
    baseline = _window(samples, 1.0, kill)
    during = _window(samples, region + 1.0, math.inf)
    base_p50 = percentile([s.latency_s for s in baseline], 0.5)
    region_p50 = percentile([s.latency_s for s in during], 0.5)
    router_ramp = [
        (t - back, state["east-a"]["ramp"])
        for t, replica, state in timeline.availability
        if t >= back and replica == 0
    ]
    non_stream = [s for s in samples if not s.stream]
    streams = [s for s in samples if s.stream]
    return {
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
        "events": timeline.events,
        "requests": len(samples),
        "failed_non_streaming": sum(s.failed for s in non_stream),
        "non_streaming": len(non_stream),
        "streams": len(streams),
        "streams_ended_with_error_event": sum(s.stream_error for s in streams),
        "streams_failed_otherwise": sum(s.status != 200 for s in streams),
        "redirect_s": {
            "cluster east-a killed": drained_after(timeline, "east-a", kill, 2),
            "region east killed (east-a)": drained_after(timeline, "east-a", region, 2),
            "region east killed (east-b)": drained_after(timeline, "east-b", region, 2),
        },
        "served_by_east_a_after_kill": sum(
            1 for s in samples if kill + 0.5 < s.sent_at < back and s.cluster == "east-a"
        ),
        "ramp_curve": ramp_curve(samples, "east-a", start=back, end=region),
        "router_ramp": router_ramp[:: max(1, len(router_ramp) // 60)],
        "regional_failover": {
            "baseline_p50_s": base_p50,
            "baseline_p99_s": percentile([s.latency_s for s in baseline], 0.99),
            "cross_region_p50_s": region_p50,
            "cross_region_p99_s": percentile([s.latency_s for s in during], 0.99),
            "added_p50_s": region_p50 - base_p50,
            "served_cross_region": sum(1 for s in samples if s.sent_at > region + 1 and s.region == "west"),
        },
        "policies": {name: policy_summary(s, prices) for name, s in policies.items()},
        "aws_redirect_s": AWS_REDIRECT_S,
    }


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The console summary of a run (stdout; scripts may parse it). Each policy's P99 is over the
    requests it served, so the line also says how many of its requests failed: the P99 of a policy
    that failed half its requests read as good as one that failed none."""
    redirect = ", ".join(
        f"{k}: {v if v is None else round(v, 2)} s" for k, v in results["redirect_s"].items()
    )
    lines = [
        f"time to redirect: {redirect} (AWS: {AWS_REDIRECT_S:.0f} s)",
        f"failed non-streaming requests: {results['failed_non_streaming']} of {results['non_streaming']}; "
        f"streams ended by an error event: {results['streams_ended_with_error_event']}"
        f" of {results['streams']}",
        f"added P50 latency in the regional failover: {results['regional_failover']['added_p50_s']:.3f} s",
    ]
    for name, p in results["policies"].items():
        lines.append(
            f"{name}: ${p['cost_per_1k_requests_usd']:.5f} per 1000 requests, "
            f"P99 latency {p['latency_p99_s']:.3f} s (served requests; failed {p['failed']} of "
            f"{p['requests']}), share {p['share']}"
        )
    return lines


def failed_counts(results: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(failed, sent) per part of the run that failed any request: the failover script (non-streaming
    requests with a status other than 200, streams ended by an error event or failed otherwise) and
    each cost policy's run."""
    script = (
        results["failed_non_streaming"]
        + results["streams_ended_with_error_event"]
        + results["streams_failed_otherwise"]
    )
    parts = {"failover script": (script, results["requests"])}
    parts |= {name: (p["failed"], p["requests"]) for name, p in results["policies"].items()}
    return {part: counts for part, counts in parts.items() if counts[0]}


ACCEPT_FAILURES: Final = "pass --allow-failures to accept"
"""What ``igw bench global``'s failed-requests line ends with; ``igw demo --global`` says its own."""


def run_global_command(
    *, out: Path, rate: float, quick: bool, command: str, allow_failures: bool = False,
    failure_note: str = ACCEPT_FAILURES,
) -> int:  # fmt: skip
    """What ``igw demo --global`` and ``igw bench global`` run: the whole script, then the report.

    Phases go to stderr as they start; the summary to stdout. Ctrl-C or SIGTERM stops every process
    the run started and ends with one line and exit 130 (as ``igw bench`` and ``igw demo`` do), also
    while the report is written. A run in which any request failed exits 1 after its report (a CI job
    gates on it; until session s44 it exited 0), unless ``allow_failures`` (``igw bench global
    --allow-failures``), as ``igw bench`` does; ``failure_note`` ends that line (``igw demo --global``,
    which takes no ``--allow-failures``, says why its failures fail it)."""
    options = GlobalRunOptions(out=out, rate=rate)
    if quick:
        options = GlobalRunOptions(
            out=out, rate=rate, warmup_s=4, down_s=6, slow_start_s=6, region_down_s=5, policy_s=6
        )
    return run_global_options(
        options, command=command, allow_failures=allow_failures, failure_note=failure_note
    )


def run_global_options(
    options: GlobalRunOptions,
    *,
    command: str,
    allow_failures: bool = False,
    failure_note: str = ACCEPT_FAILURES,
) -> int:
    """:func:`run_global_command` with the phases' lengths given (tests run a short script)."""
    # deferred: start-up cost: the report's plotting stack loads only when a run finishes
    from igw.bench.global_report import write_global_report
    from igw.bench.interrupt import run_interruptible, stop_signals_interrupt
    from igw.bench.processes import RouterStartError

    name = command.removesuffix(" --quick")
    workdir = options.out / "work"
    try:
        # ``igw demo --global`` writes under OUT/global, which ``--out``'s check did not cover: a file
        # named ``global`` there ended the command in a NotADirectoryError traceback
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"{name}: cannot create {workdir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        results = run_interruptible(run_global(options, stderr_progress()))
    except RouterStartError as exc:
        print(f"igw: a process of the run did not start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    try:
        with stop_signals_interrupt():
            report = write_global_report(results, options.out, command=command)
            for line in summary_lines(results):
                print(line)
            print(f"report: {report}")
    except KeyboardInterrupt:
        print(
            f"{name}: interrupted while writing the report (what is in {options.out} may be incomplete); "
            "every process it started has been stopped",
            file=sys.stderr,
        )
        return 130
    failed = failed_counts(results)
    if not failed:
        return 0
    listed = ", ".join(f"{part}: {n} of {sent}" for part, (n, sent) in failed.items())
    if allow_failures:
        print(f"{name}: failed requests (exit status 0 all the same): {listed}", file=sys.stderr)
        return 0
    print(f"{name}: failed requests: {listed}; exit status 1 ({failure_note})", file=sys.stderr)
    return 1
